#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "templates/builtin.hpp"

namespace gmjit::templates {
namespace {

// 256 accumulator words, the completion counter, padding to 16 bytes.
constexpr std::int64_t kWorkspaceWords = 256 + 4;
const PersistentGrid kGrid({132, 264, 528, 1056}, 16, "16 bytes");

bool i64_counts(const Shape& s) {
  const auto flag = s.find("i64_counts");
  return flag != s.end() && flag->second == 1;
}

KernelDescriptor histogram_descriptor() {
  KernelDescriptor d;
  d.name = "histogram";
  d.summary = "counts[b] = number of bytes of x equal to b (u8 in, 256 u32 counts out, or i64 with i64_counts=1; "
              "exact): striped "
              "shared-memory histograms per block, folded into global atomics in a workspace the library owns; "
              "fast also when most bytes share one value";
  d.header = "gmjit/histogram.cuh";
  d.problem_keys = {"n"};
  // Only the input distribution and the work model read it; the kernel serves any input. 1 (almost
  // uniform bytes) when a launch leaves it out.
  d.data_keys = {{"contention", 1,
                  "percentage of bytes of the tuning input forced to one value (above 100 reads as 100); "
                  "optional at launch"},
                 {"i64_counts", 0,
                  "1: counts are i64 (torch's dtype for counts), written by the same kernel; 0: u32. Optional at "
                  "launch"}};
  d.flag_keys = {"i64_counts"};
  d.dtypes = {"u8"};
  d.params = {
      {"block", {256, 512, 1024}, "threads per block"},
      {"stripes", {1, 8, 32},
       "copies of each bin per block, lane l counting into copy l % stripes: 32 has no bank conflicts and no "
       "same-address collisions at any input (32 KiB of shared memory per block), 1 is 1 KiB but serializes "
       "on repeated values"},
      {"unroll", {1, 2, 4}, "16-byte loads each thread issues before it counts (memory-level parallelism)"},
      {"blocks", kGrid.blocks(), "grid size (132 SMs on an H200), capped where x runs out"},
  };
  d.default_config = {{"block", 1024}, {"stripes", 32}, {"unroll", 2}, {"blocks", 132}};
  d.constraints_doc = "n < 2^32 (u32 counts); " + kGrid.constraints_doc();
  d.shape_violation = [](const Shape& s) -> std::string {
    if (s.at("n") >= (std::int64_t{1} << 32)) {
      return fmt::format("n={} could overflow a u32 count (n < 2^32)", s.at("n"));
    }
    return {};
  };
  d.violation = [shape_violation = d.shape_violation](const Config& c, const Shape& s) -> std::string {
    if (auto why = shape_violation(s); !why.empty()) return why;
    return kGrid.violation(c, s);
  };
  d.name_expression = [](const Config& c, const Shape& s, const DtypeInfo&) {
    return fmt::format("gmjit::histogram<{}, {}, {}, {}>", i64_counts(s) ? "long long" : "unsigned int",
                       c.at("block"), c.at("stripes"), c.at("unroll"));
  };
  d.geometry = [](const Config& c, const Shape& s, const DtypeInfo&) { return kGrid.launch(c, s); };
  describe_tensors(d, {{"x", false, "u8", R"("n")"}, {"counts", true, "u32", "256", "i64_counts", "i64"}});
  d.workspace = [](const Shape&) { return WorkspaceNeed{4 * kWorkspaceWords, 0}; };
  d.add_scalars = long_sizes({"n"});
  // GPU MODE's histogram data: with probability contention% a byte is the tensor's hot value,
  // otherwise uniform in 0..255. The hot decision takes the high 32 bits, the byte the low 8.
  d.input_value = [](const Shape& s, std::size_t, std::uint64_t tensor_bits, std::uint64_t element_bits) {
    const double u = static_cast<double>(element_bits >> 32) / 4294967296.0;
    if (u * 100.0 < static_cast<double>(s.at("contention"))) return static_cast<double>(tensor_bits & 0xffu);
    return static_cast<double>(element_bits & 0xffu);
  };
  d.host_reference = [](const std::vector<std::vector<double>>& inputs, const Shape&) {
    std::vector<double> counts(256, 0.0);
    for (const double v : inputs.at(0)) counts[static_cast<std::size_t>(v)] += 1.0;
    return std::vector<std::vector<double>>{counts};
  };
  d.work = [](const Config& c, const Shape& s, const DtypeInfo&) {
    const double n = static_cast<double>(s.at("n"));
    const double stripes = static_cast<double>(c.at("stripes"));
    Work w;
    w.bytes = n + 256.0 * (i64_counts(s) ? 8 : 4);
    // One shared atomic per byte. Assumed: 16 conflict-free lanes per SM per clock, a sixteenth of
    // the FMA lanes' 2 flops each; lanes on one address serialize, and of a warp's 32 lanes about
    // 32 * contention% share the hot value, spread over `stripes` addresses.
    const double hot_lanes = 32.0 * static_cast<double>(std::min<std::int64_t>(s.at("contention"), 100)) / 100.0;
    const double serialized = std::max(1.0, hot_lanes / stripes);
    w.flops = n;
    w.compute_efficiency = 1.0 / (16.0 * serialized);
    w.shared_bytes = 256 * 4 * c.at("stripes");
    w.registers = static_cast<int>(24 + 4 * c.at("unroll"));
    return w;
  };
  // Counts are whole numbers: anything but an exact match is wrong.
  d.tolerance = fixed_tolerance(0.0);
  return d;
}

const BuiltinKernel registered(90, "histogram", histogram_descriptor);

}  // namespace
}  // namespace gmjit::templates
