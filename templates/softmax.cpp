#include <fmt/format.h>

#include <algorithm>

#include "templates/registry.hpp"

namespace gmjit::templates {
namespace {

constexpr const char* kConstraints =
    "vec=0 only for an even cols (for an odd one it duplicates vec=1); cached=1 needs cols <= row threads (32 for strategy=0, block for "
    "strategy=1) * elems; cols < 2^30";

// Threads that share one row.
std::int64_t row_threads(const Config& c) { return c.at("strategy") == 0 ? 32 : c.at("block"); }

// The widest access (bytes) that a thread's elems hold whole and that divides a row's bytes, so
// every row starts on an access boundary. An even cols gives fp32 at least 8 bytes and bf16 at
// least 4; an odd one a single element, as vec=0 would.
std::int64_t access_bytes(const Config& c, const Shape& s, const DtypeInfo& t) {
  if (c.at("vec") == 0) return t.bytes;
  const std::int64_t row_bytes = s.at("cols") * t.bytes;
  for (const std::int64_t bytes : {16, 8, 4}) {
    if (bytes <= c.at("elems") * t.bytes && row_bytes % bytes == 0) return bytes;
  }
  return t.bytes;
}

}  // namespace

KernelDescriptor softmax_descriptor() {
  KernelDescriptor d;
  d.name = "softmax";
  d.summary = "y = softmax(x) along the last dim of a row-major rows x cols matrix, fp32 math; "
              "a warp or a block per row, row held in registers or streamed twice";
  d.header = "gmjit/softmax.cuh";
  d.problem_keys = {"rows", "cols"};
  d.dtypes = {"fp32", "bf16"};
  d.params = {
      {"strategy", {0, 1}, "0: a warp per row (short rows), 1: a block per row (long rows)"},
      {"block", {128, 256, 512, 1024}, "threads per block"},
      {"elems", {4, 8, 16, 32}, "elements each thread holds per pass over its row"},
      {"vec", {0, 1}, "0: one element per access; 1: the widest access up to 16 bytes that divides the row bytes"},
      {"cached", {0, 1}, "1: the row stays in registers (one read); 0: online max/sum, then a second read"},
  };
  d.default_config = {{"strategy", 1}, {"block", 256}, {"elems", 8}, {"vec", 1}, {"cached", 0}};
  d.constraints_doc = kConstraints;
  d.violation = [](const Config& c, const Shape& s) -> std::string {
    const std::int64_t cols = s.at("cols");
    // In-row offsets are 32-bit and run up to a chunk (at most 32K elements) past the row end.
    if (cols >= (std::int64_t{1} << 30)) return "cols of 2^30 or more need 64-bit in-row offsets, which this template lacks";
    // Rows of odd length start at any element, so vec=1 compiles to single-element accesses
    // there; rejecting the copy keeps vec=1 (the default) valid for every shape without tuning
    // the same kernel twice.
    if (c.at("vec") == 0 && cols % 2 != 0) {
      return fmt::format("vec=0 is what vec=1 compiles to for an odd cols (cols={}): single-element accesses; "
                         "use vec=1",
                         cols);
    }
    const std::int64_t capacity = row_threads(c) * c.at("elems");
    if (c.at("cached") != 0 && cols > capacity) {
      return fmt::format("cached=1 keeps a row in registers: at most {} threads x elems={} = {} elements, but "
                         "cols={}; use cached=0 or more threads or elems",
                         row_threads(c), c.at("elems"), capacity, cols);
    }
    return {};
  };
  d.name_expression = [](const Config& c, const Shape& s, const DtypeInfo& t) {
    return fmt::format("gmjit::softmax<{}, {}, {}, {}, {}, {}>", t.cpp_type, row_threads(c), c.at("block"),
                       c.at("elems"), access_bytes(c, s, t), c.at("cached") != 0 ? "true" : "false");
  };
  d.geometry = [](const Config& c, const Shape& s, const DtypeInfo&) {
    const std::int64_t rows_per_block = c.at("block") / row_threads(c);
    LaunchGeometry g;
    // The kernel strides over rows, so capping the grid keeps any row count launchable.
    g.grid[0] = static_cast<unsigned>(std::min<std::int64_t>(ceil_div(s.at("rows"), rows_per_block), 2147483647));
    g.block[0] = static_cast<unsigned>(c.at("block"));
    return g;
  };
  d.tensors = [](const Shape& s) {
    const std::int64_t n = s.at("rows") * s.at("cols");
    return std::vector<TensorArg>{{"x", n, false}, {"y", n, true}};
  };
  d.add_scalars = [](detail::KernelArgs& args, const Shape& s) {
    args.add(static_cast<long long>(s.at("rows"))).add(static_cast<int>(s.at("cols")));
  };
  d.reference_expression = [](const DtypeInfo& t) { return fmt::format("gmjit::reference::softmax<{}>", t.cpp_type); };
  d.reference_geometry = [](const Shape& s) {
    LaunchGeometry g;
    g.grid[0] = static_cast<unsigned>(std::min<std::int64_t>(s.at("rows"), 65535));
    g.block[0] = 256;  // reference::block_reduce needs a power of two up to 256
    return g;
  };
  d.work = [](const Config& c, const Shape& s, const DtypeInfo& t) {
    const double n = static_cast<double>(s.at("rows")) * static_cast<double>(s.at("cols"));
    const bool cached = c.at("cached") != 0;
    Work w;
    // Read once, written once. The second read of cached=0 comes from L2 while the rows in flight
    // fit there: about 2048 threads per SM on 132 SMs, against half of a 50 MB L2 (H200) for the
    // inputs; longer rows (4096 x 393216 fp32: 264 rows of 1.5 MB at a time) come from DRAM twice.
    w.bytes = 2.0 * n * t.bytes;
    const double rows_in_flight = std::min(static_cast<double>(s.at("rows")), 132.0 * 2048.0 / static_cast<double>(row_threads(c)));
    if (!cached && rows_in_flight * static_cast<double>(s.at("cols")) * t.bytes > 25e6) w.bytes += n * t.bytes;
    // Per element, cached: max, subtract, scale, exponent, add, multiply; streamed: one more
    // subtract, scale and exponent in the second pass.
    w.flops = (cached ? 6.0 : 9.0) * n;
    // An exponent is one MUFU.EX2, 16 per SM per clock against 128 FMA lanes (CUDA C Programming
    // Guide, arithmetic instructions, cc 9.0): it costs 8 lane slots and the other operations one
    // each, where peak counts 2 flops per slot.
    const double slots = cached ? 5.0 + 8.0 : 7.0 + 16.0;
    w.compute_efficiency = (cached ? 6.0 : 9.0) / (2.0 * slots);
    w.shared_bytes = c.at("strategy") == 0 ? 0 : 2 * (c.at("block") / 32) * 8;
    // The row's slice as floats plus about 30 for addresses, the partial pair and loop state
    // (ptxas 13.0 gives 32 to 64 across elems = 4..32).
    w.registers = static_cast<int>(c.at("elems") + 30);
    return w;
  };
  // fp32: e^x to ~2^-22 relative and fp32 sums of up to cols / threads terms per thread, then a
  // tree: well under 1e-5 at 393216 columns. bf16: the inputs are exact in both kernel and
  // reference, so the error is the output rounding: half an ulp, at most 2^-8 relative per element
  // (8 significant bits), about 2^-8 / sqrt(3) ~ 2.3e-3 in relative L2 at worst; 1e-2 leaves
  // headroom while a wrong max, sum or missing element is off by far more.
  d.tolerance = [](const DtypeInfo& t, const Shape&) { return t.name == "bf16" ? 1e-2 : 1e-5; };
  return d;
}

}  // namespace gmjit::templates
