#include <fmt/format.h>

#include <cmath>

#include "templates/builtin.hpp"

namespace gmjit::templates {
namespace {

// The largest `blocks` in the domain: the workspace holds a partial for each block of it.
constexpr std::int64_t kMaxBlocks = 2112;
constexpr std::int64_t kWorkspaceWords = 4 + 2 * kMaxBlocks;
const PersistentGrid kGrid({132, 264, 528, 1056, kMaxBlocks}, 4, "4 elements");

KernelDescriptor vector_sum_descriptor() {
  KernelDescriptor d;
  d.name = "vector_sum";
  d.summary = "y[0] = sum of x (fp32 in, fp32 out, double accumulation): a persistent grid of 16-byte loads, "
              "per-block double partials in a workspace the library owns, the last block adds them in a fixed "
              "order (deterministic)";
  d.header = "gmjit/vector_sum.cuh";
  d.problem_keys = {"n"};
  d.dtypes = {"fp32"};
  d.params = {
      {"block", {256, 512, 1024}, "threads per block"},
      {"unroll", {1, 2, 4, 8}, "16-byte loads each thread issues before it adds (memory-level parallelism)"},
      {"blocks", kGrid.blocks(), "grid size (132 SMs on an H200: 1 to 16 blocks per SM), capped where x runs out"},
  };
  d.default_config = {{"block", 1024}, {"unroll", 4}, {"blocks", 132}};
  d.constraints_doc = kGrid.constraints_doc();
  d.shape_violation = [](const Shape& s) { return product_above("n", s.at("n"), 1, kMaxElements, kMaxElementsText); };
  d.violation = [](const Config& c, const Shape& s) { return kGrid.violation(c, s); };
  d.name_expression = [](const Config& c, const Shape&, const DtypeInfo&) {
    return fmt::format("gmjit::vector_sum<{}, {}>", c.at("block"), c.at("unroll"));
  };
  d.geometry = [](const Config& c, const Shape& s, const DtypeInfo&) { return kGrid.launch(c, s); };
  describe_tensors(d, {{"x", false, "fp32", R"("n")"}, {"y", true, "fp32", "1"}});
  d.workspace = [](const Shape&) { return WorkspaceNeed{4 * kWorkspaceWords, 0}; };
  d.add_scalars = long_sizes({"n"});
  // GPU MODE's vectorsum data: randn * scale + offset, with offset uniform in [-100, 100] and scale
  // uniform in (0.1, 10] per tensor, so sums of the same sign but very different spreads.
  d.input_value = [](const Shape&, std::size_t, std::uint64_t tensor_bits, std::uint64_t element_bits) {
    const double offset = -100.0 + 200.0 * static_cast<double>(tensor_bits >> 32) / 4294967295.0;
    const double scale = 10.0 - 9.9 * static_cast<double>(tensor_bits & 0xffffffffu) / 4294967296.0;
    // Box-Muller on the element's two 32-bit halves; u1 in (0, 1] keeps the logarithm finite.
    const double u1 = (static_cast<double>(element_bits >> 32) + 1.0) / 4294967296.0;
    const double u2 = static_cast<double>(element_bits & 0xffffffffu) / 4294967296.0;
    const double normal = std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
    return offset + scale * normal;
  };
  d.host_reference = [](const std::vector<std::vector<double>>& inputs, const Shape&) {
    // Neumaier's compensated sum: the reference stays exact to about 2^-53 of the largest
    // partial, whatever n.
    double sum = 0.0;
    double lost = 0.0;
    for (const double v : inputs.at(0)) {
      const double t = sum + v;
      lost += std::abs(sum) >= std::abs(v) ? (sum - t) + v : (v - t) + sum;
      sum = t;
    }
    return std::vector<std::vector<double>>{{sum + lost}};
  };
  d.work = [](const Config& c, const Shape& s, const DtypeInfo&) {
    const double n = static_cast<double>(s.at("n"));
    Work w;
    w.bytes = 4.0 * n + 4.0;
    w.flops = n;
    w.shared_bytes = (c.at("block") / 32) * 8 + 4;
    // Four floats per load in flight, the double accumulator, addresses and loop state.
    w.registers = static_cast<int>(24 + 4 * c.at("unroll"));
    return w;
  };
  // The fp32 part of the error is three roundings per 4-element partial (at most ~2^-22 of 4 *
  // |x|), random in sign, then double: near 1e-8 relative for the benchmark data, and the output's
  // own rounding is 2^-24. 1e-5 is GPU MODE's rtol, which a dropped or doubled element of a
  // 52M-element sum (offset ~100, sum ~5e9) would still not reveal alone, but a dropped vector
  // per block or a lost block partial does.
  d.tolerance = fixed_tolerance(1e-5);
  return d;
}

const BuiltinKernel registered(80, "vector_sum", vector_sum_descriptor);

}  // namespace
}  // namespace gmjit::templates
