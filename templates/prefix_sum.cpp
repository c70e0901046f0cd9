#include <fmt/format.h>

#include <algorithm>

#include "templates/registry.hpp"

namespace gmjit::templates {
namespace {

// The smallest tile in the domains: the workspace is sized for it, so one workspace serves every
// configuration of a problem.
constexpr std::int64_t kSmallestTile = 128 * 8;
// The ring of a persistent block: at most 192 KB (of the 227 KB a block may hold), so tiles of
// 16384 elements can run with two or three stages.
constexpr std::int64_t kLargestRingBytes = 192 * 1024;
// The smallest persistent grid in the domain; each larger value doubles it.
constexpr std::int64_t kSmallestGrid = 132;

std::int64_t tile(const Config& c) { return c.at("block") * c.at("items"); }
bool persistent(const Config& c) { return c.at("stages") > 1; }
std::int64_t ring_bytes(const Config& c) { return c.at("stages") * tile(c) * 4; }
// A block per tile stages its tile with one pad word in 33.
std::int64_t staged_bytes(const Config& c) { return tile(c) * 4 * 33 / 32; }

}  // namespace

std::int64_t prefix_sum_workspace_words(std::int64_t n) {
  const std::int64_t tiles = ceil_div(n, kSmallestTile);
  // Counter, epoch, two words of padding, then per tile two 64-bit words (status and value).
  return 4 + 4 * tiles;
}

KernelDescriptor prefix_sum_descriptor() {
  KernelDescriptor d;
  d.name = "prefix_sum";
  d.summary = "y = inclusive scan of fp32 x in one pass (decoupled look-back, tile sums carried in double); "
              "the workspace tensor must be zeroed once before the first launch and then reused as is";
  d.header = "gmjit/prefix_sum.cuh";
  d.problem_keys = {"n"};
  d.dtypes = {"fp32"};
  d.params = {
      {"block", {128, 256, 512}, "threads per block"},
      {"items", {8, 16, 32}, "consecutive elements each thread scans in registers"},
      {"stages", {1, 2, 3},
       "1: one block per tile; 2-3: persistent blocks, each with a ring of that many tiles whose copies "
       "(cp.async) run while it scans and looks back"},
      {"blocks", {0, 132, 264, 528}, "persistent grid (132 SMs on an H200: 1 to 4 blocks per SM); 0 with stages=1"},
  };
  d.default_config = {{"block", 256}, {"items", 16}, {"stages", 1}, {"blocks", 0}};
  d.constraints_doc = "stages=1: blocks=0; stages>1: a ring of stages * block * items * 4 bytes <= 192 KB and "
                      "blocks > 0";
  d.violation = [](const Config& c, const Shape& s) -> std::string {
    if (!persistent(c)) {
      if (c.at("blocks") != 0) return "stages=1 launches one block per tile, so blocks must be 0";
      return {};
    }
    if (c.at("blocks") == 0) return fmt::format("stages={} runs persistent blocks, so blocks must be above 0", c.at("stages"));
    // A grid capped to the tiles would repeat the smaller blocks value's configuration.
    const std::int64_t tiles = ceil_div(s.at("n"), tile(c));
    if (c.at("blocks") > kSmallestGrid && tiles <= c.at("blocks") / 2) {
      return fmt::format("blocks={} launches only {} blocks at n={} (tiles of {} elements), as blocks={} does",
                         c.at("blocks"), tiles, s.at("n"), tile(c), c.at("blocks") / 2);
    }
    if (ring_bytes(c) > kLargestRingBytes) {
      return fmt::format("a ring of stages={} x block={} x items={} floats is {} KB, above {} KB", c.at("stages"),
                         c.at("block"), c.at("items"), ring_bytes(c) / 1024, kLargestRingBytes / 1024);
    }
    return {};
  };
  d.name_expression = [](const Config& c, const Shape&, const DtypeInfo&) {
    if (persistent(c)) {
      return fmt::format("gmjit::prefix_sum_pipelined<{}, {}, {}>", c.at("block"), c.at("items"), c.at("stages"));
    }
    return fmt::format("gmjit::prefix_sum<{}, {}>", c.at("block"), c.at("items"));
  };
  d.geometry = [](const Config& c, const Shape& s, const DtypeInfo&) {
    LaunchGeometry g;
    const std::int64_t tiles = ceil_div(s.at("n"), tile(c));
    g.grid[0] = static_cast<unsigned>(persistent(c) ? std::min(tiles, c.at("blocks")) : tiles);
    g.block[0] = static_cast<unsigned>(c.at("block"));
    g.dynamic_shared_bytes = static_cast<unsigned>(persistent(c) ? ring_bytes(c) : staged_bytes(c));
    return g;
  };
  d.tensors = [](const Shape& s) {
    TensorArg workspace{"workspace", prefix_sum_workspace_words(s.at("n")), false, "u32", true};
    return std::vector<TensorArg>{{"x", s.at("n"), false}, {"y", s.at("n"), true}, workspace};
  };
  d.add_scalars = [](detail::KernelArgs& args, const Shape& s) { args.add(static_cast<long long>(s.at("n"))); };
  d.host_reference = [](const std::vector<std::vector<double>>& inputs, const Shape&) {
    std::vector<double> scan(inputs.at(0).size());
    double running = 0;
    for (std::size_t i = 0; i < scan.size(); ++i) scan[i] = running += inputs[0][i];
    return std::vector<std::vector<double>>{std::move(scan)};
  };
  d.work = [](const Config& c, const Shape& s, const DtypeInfo&) {
    Work w;
    w.bytes = 8.0 * static_cast<double>(s.at("n"));
    w.flops = 3.0 * static_cast<double>(s.at("n"));
    w.shared_bytes = (persistent(c) ? ring_bytes(c) : staged_bytes(c)) + 64;
    w.registers = static_cast<int>(c.at("items") / 2 + 24);  // the runs wait in shared memory, not registers
    return w;
  };
  // Tile sums travel in double and every output is rounded once, so the error is a few fp32
  // roundings of in-tile sums (tens at most) against prefixes that grow like 0.6 sqrt(i): near
  // 1e-7 in relative L2, far inside the 1e-5 sqrt(n) per element. A dropped element shifts
  // every later prefix by at least 1/16, about 2.4 / 16 / sqrt(n) in relative L2: 9e-6 at n = 2^28.
  d.tolerance = [](const DtypeInfo&, const Shape&) { return 1e-6; };
  return d;
}

}  // namespace gmjit::templates
