#include <fmt/format.h>

#include "templates/row_kernel.hpp"

namespace gmjit::templates {
namespace {

// torch.nn.functional.layer_norm's and torch.nn.RMSNorm's usual epsilon. The problem keys are
// only rows and cols, so it is fixed here rather than tuned per value.
constexpr float kEps = 1e-5f;

// What rmsnorm and layernorm share: everything but the bias, the statistics and the names.
KernelDescriptor norm_descriptor(const std::string& name, bool layer) {
  KernelDescriptor d;
  d.name = name;
  d.header = "gmjit/norm.cuh";
  describe_row_kernel(d, name, "statistics first", "eps = 1e-5 (fixed); ");
  std::vector<TensorSpec> tensors{{"x", false, {}, R"(["*", "rows", "cols"])"}, {"weight", false, {}, R"("cols")"}};
  if (layer) tensors.push_back({"bias", false, {}, R"("cols")"});
  tensors.push_back({"y", true, {}, R"(["*", "rows", "cols"])"});
  describe_tensors(d, std::move(tensors));
  d.add_scalars = [rows_and_cols = d.add_scalars](detail::KernelArgs& args, const Shape& s) {
    rows_and_cols(args, s);
    args.add(kEps);
  };
  d.reference_expression = [name](const DtypeInfo& t, const Shape&) { return fmt::format("gmjit::reference::{}<{}>", name, t.cpp_type); };
  d.work = [layer](const Config& c, const Shape& s, const DtypeInfo& t) {
    const double n = static_cast<double>(s.at("rows")) * static_cast<double>(s.at("cols"));
    const double cols = static_cast<double>(s.at("cols"));
    const bool cached = c.at("cached") != 0;
    Work w;
    // x read once, y written once, w (and b) once: every later row finds them in L1 or L2. The
    // second read of cached=0 comes from L2 while the rows in flight fit there.
    w.bytes = (2.0 * n + (layer ? 2.0 : 1.0) * cols) * t.bytes;
    if (!cached && second_read_from_dram(s.at("rows"), row_threads(c), s.at("cols"), t)) w.bytes += n * t.bytes;
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
  return d;
}

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

const BuiltinKernel rmsnorm_registered(60, "rmsnorm", rmsnorm_descriptor);
const BuiltinKernel layernorm_registered(70, "layernorm", layernorm_descriptor);

}  // namespace
}  // namespace gmjit::templates
