#include <fmt/format.h>

#include "templates/builtin.hpp"

namespace gmjit::templates {
namespace {

// The smallest tile in the domains: the workspace is sized for it, so one workspace serves every
// configuration of a problem.
constexpr std::int64_t kSmallestTile = 128 * 8;

std::int64_t tile(const Config& c) { return c.at("block") * c.at("items"); }
// A block stages its tile with one pad word in 33.
std::int64_t staged_bytes(const Config& c) { return tile(c) * 4 * 33 / 32; }

KernelDescriptor prefix_sum_descriptor() {
  KernelDescriptor d;
  d.name = "prefix_sum";
  d.summary = "y = inclusive scan of fp32 x in one pass (decoupled look-back, tile sums carried in double, "
              "look-back flags in a workspace the library owns)";
  d.header = "gmjit/prefix_sum.cuh";
  d.problem_keys = {"n"};
  d.dtypes = {"fp32"};
  d.params = {
      {"block", {128, 256, 512}, "threads per block, one block per tile of block * items elements"},
      {"items", {8, 16, 32}, "consecutive elements each thread scans"},
  };
  d.default_config = {{"block", 256}, {"items", 16}};
  // Every combination fits: the largest staged tile is 66 KB of the 227 KB a block may hold.
  d.constraints_doc = kNoConstraints;
  d.violation = no_violation;
  // A block per tile, and the grid holds 2^31 - 1 blocks: that many tiles of the smallest.
  d.shape_violation = [](const Shape& s) {
    return product_above("n", s.at("n"), 1, kSmallestTile * 2147483647, "2^31 - 1 tiles of 1024 elements");
  };
  d.name_expression = [](const Config& c, const Shape&, const DtypeInfo&) {
    return fmt::format("gmjit::prefix_sum<{}, {}>", c.at("block"), c.at("items"));
  };
  d.geometry = [](const Config& c, const Shape& s, const DtypeInfo&) {
    return linear_launch(ceil_div(s.at("n"), tile(c)), c.at("block"), staged_bytes(c));
  };
  describe_tensors(d, {{"x", false, {}, R"("n")"}, {"y", true, {}, R"("n")"}});
  d.workspace = [](const Shape& s) { return WorkspaceNeed{4 * prefix_sum_workspace_words(s.at("n")), 0}; };
  d.add_scalars = long_sizes({"n"});
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
    w.shared_bytes = staged_bytes(c) + 64;
    w.registers = static_cast<int>(c.at("items") / 2 + 24);  // the runs wait in shared memory, not registers
    return w;
  };
  // Tile sums travel in double and every output is rounded once, so the error is a few fp32
  // roundings of in-tile sums (tens at most) against prefixes that grow like 0.6 sqrt(i): near
  // 1e-7 in relative L2, far inside the issue's 1e-5 sqrt(n) per element. A dropped element shifts
  // every later prefix by at least 1/16, about 2.4 / 16 / sqrt(n) in relative L2: 9e-6 at n = 2^28.
  d.tolerance = fixed_tolerance(1e-6);
  // Each output is a double tile offset plus an fp32 scan inside the tile, so its error is that
  // of up to tile(c) fp32 additions of partials that grow like 0.6 sqrt(i): a random walk with a
  // standard deviation near 0.25 * tile * 2^-24 (4e-4 for the largest tile of 16384). The bound
  // takes 32 tiles * 2^-24 (0.03 at the largest tile, about 130 deviations: the maximum over 2^28
  // outputs stays inside it), and it cannot see the configuration, so it takes the largest tile;
  // a dropped or doubled element still moves every later prefix by 1/16 or more.
  d.element_bound = [](const DtypeInfo&, const Shape&) {
    constexpr double kLargestTile = 512.0 * 32.0;
    return ElementBound{32.0 * kLargestTile / 16777216.0, 1e-5};
  };
  return d;
}

const BuiltinKernel registered(100, "prefix_sum", prefix_sum_descriptor);

}  // namespace

std::int64_t prefix_sum_workspace_words(std::int64_t n) {
  const std::int64_t tiles = ceil_div(n, kSmallestTile);
  // The epoch, three words of padding, then per tile two 64-bit words (status and value).
  return 4 + 4 * tiles;
}

}  // namespace gmjit::templates
