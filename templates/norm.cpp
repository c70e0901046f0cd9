#include <fmt/format.h>

#include <algorithm>

#include "templates/registry.hpp"

namespace gmjit::templates {
namespace {

// torch.nn.functional.layer_norm's and torch.nn.RMSNorm's usual epsilon. The problem keys are
// only rows and cols, so it is fixed here rather than tuned per value.
constexpr float kEps = 1e-5f;

constexpr const char* kConstraints =
    "eps = 1e-5 (fixed); vec=0 only for an even cols (for an odd one it duplicates vec=1); cached=1 needs "
    "cols <= row threads (32 for strategy=0, block for strategy=1) * elems; cols < 2^30";

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

// What rmsnorm and layernorm share: everything but the bias, the statistics and the names.
KernelDescriptor norm_descriptor(const std::string& name, bool layer) {
  KernelDescriptor d;
  d.name = name;
  d.header = "gmjit/norm.cuh";
  d.problem_keys = {"rows", "cols"};
  d.dtypes = {"fp32", "bf16"};
  d.params = {
      {"strategy", {0, 1}, "0: a warp per row (short rows), 1: a block per row (long rows)"},
      {"block", {128, 256, 512, 1024}, "threads per block"},
      {"elems", {4, 8, 16, 32}, "elements each thread holds per pass over its row"},
      {"vec", {0, 1}, "0: one element per access; 1: the widest access up to 16 bytes that divides the row bytes"},
      {"cached", {0, 1}, "1: the row stays in registers (one read); 0: statistics first, then a second read"},
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
  d.name_expression = [name](const Config& c, const Shape& s, const DtypeInfo& t) {
    return fmt::format("gmjit::{}<{}, {}, {}, {}, {}, {}>", name, t.cpp_type, row_threads(c), c.at("block"),
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
  d.tensors = [layer](const Shape& s) {
    const std::int64_t n = s.at("rows") * s.at("cols");
    std::vector<TensorArg> tensors{{"x", n, false}, {"weight", s.at("cols"), false}};
    if (layer) tensors.push_back({"bias", s.at("cols"), false});
    tensors.push_back({"y", n, true});
    return tensors;
  };
  d.add_scalars = [](detail::KernelArgs& args, const Shape& s) {
    args.add(static_cast<long long>(s.at("rows"))).add(static_cast<int>(s.at("cols"))).add(kEps);
  };
  d.reference_expression = [name](const DtypeInfo& t) { return fmt::format("gmjit::reference::{}<{}>", name, t.cpp_type); };
  d.reference_geometry = [](const Shape& s) {
    LaunchGeometry g;
    g.grid[0] = static_cast<unsigned>(std::min<std::int64_t>(s.at("rows"), 65535));
    g.block[0] = 256;  // reference::block_reduce needs a power of two up to 256
    return g;
  };
  d.work = [layer](const Config& c, const Shape& s, const DtypeInfo& t) {
    const double n = static_cast<double>(s.at("rows")) * static_cast<double>(s.at("cols"));
    const double cols = static_cast<double>(s.at("cols"));
    const bool cached = c.at("cached") != 0;
    Work w;
    // x read once, y written once, w (and b) once: every later row finds them in L1 or L2. The
    // second read of cached=0 comes from L2 while the rows in flight fit there: about 2048
    // threads per SM on 132 SMs, against half of a 50 MB L2 (H200) for the inputs.
    w.bytes = (2.0 * n + (layer ? 2.0 : 1.0) * cols) * t.bytes;
    const double rows_in_flight = std::min(static_cast<double>(s.at("rows")), 132.0 * 2048.0 / static_cast<double>(row_threads(c)));
    if (!cached && rows_in_flight * cols * t.bytes > 25e6) w.bytes += n * t.bytes;
    // Per element, rmsnorm: square-add, then two multiplies (3 lane slots, 5 flops counting the
    // fma twice); layernorm: add, subtract and square-add for the statistics, then subtract,
    // multiply and fma (6 slots, 8 flops). Widening bf16 and the packing conversion add about
    // one slot each per element; every operation here issues at the full 128 lanes per SM.
    const double flops = layer ? 8.0 : 5.0;
    const double slots = (layer ? 6.0 : 3.0) + (t.bytes == 2 ? 2.0 : 0.0);
    w.flops = flops * n;
    w.compute_efficiency = flops / (2.0 * slots);
    const std::int64_t partial_bytes = layer ? 12 : 4;
    w.shared_bytes = c.at("strategy") == 0 ? 0 : 2 * (c.at("block") / 32) * partial_bytes;
    // The row's slice as floats plus addresses (x, y, w, b), the partial and loop state.
    w.registers = static_cast<int>(c.at("elems") + (layer ? 36 : 32));
    return w;
  };
  // fp32: fp32 sums of up to cols / threads terms per thread, then a tree, and rsqrt to 2 ulp:
  // well under 1e-5 at a million columns for inputs of one sign-mixed magnitude range.
  // bf16: the inputs are exact in both kernel and reference, so the error is the output rounding:
  // half an ulp, at most 2^-8 relative per element (8 significant bits), about 2^-8 / sqrt(3) ~
  // 2.3e-3 in relative L2 at worst; 1e-2 leaves headroom while a wrong mean, scale, weight or
  // missing element is off by far more.
  d.tolerance = [](const DtypeInfo& t, const Shape&) { return t.name == "bf16" ? 1e-2 : 1e-5; };
  return d;
}

}  // namespace

KernelDescriptor rmsnorm_descriptor() {
  KernelDescriptor d = norm_descriptor("rmsnorm", false);
  d.summary = "y = x / sqrt(mean(x^2) + eps) * weight along the last dim of a row-major rows x cols matrix, "
              "eps = 1e-5, fp32 math; a warp or a block per row, row held in registers or streamed twice";
  return d;
}

KernelDescriptor layernorm_descriptor() {
  KernelDescriptor d = norm_descriptor("layernorm", true);
  d.summary = "y = (x - mean) / sqrt(var + eps) * weight + bias along the last dim of a row-major rows x cols "
              "matrix (biased variance, as torch layer_norm), eps = 1e-5, fp32 math; a warp or a block per row, "
              "row held in registers or streamed twice";
  return d;
}

}  // namespace gmjit::templates
