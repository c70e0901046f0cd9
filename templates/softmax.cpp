#include <fmt/format.h>

#include <algorithm>

#include "templates/registry.hpp"
#include "templates/row_kernel.hpp"

namespace gmjit::templates {

KernelDescriptor softmax_descriptor() {
  KernelDescriptor d;
  d.name = "softmax";
  d.summary = "y = softmax(x) along the last dim of a row-major rows x cols matrix, fp32 math; "
              "a warp or a block per row, row held in registers or streamed twice";
  d.header = "gmjit/softmax.cuh";
  describe_row_kernel(d, "softmax", "online max/sum");
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
