#pragma once
// Runs candidates of one problem on one device: fresh random inputs, a reference computed once
// in double precision, verification with NaN-poisoned outputs and guard bytes, and timing with
// the L2 flushed before every timed launch.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "codegen/compiler.hpp"
#include "gmjit/types.hpp"
#include "core/device.hpp"
#include "core/module.hpp"
#include "core/workspace.hpp"
#include "templates/registry.hpp"

namespace gmjit::tuner {

struct Timing {
  double median_ms = 0;
  double spread = 0;      // interquartile range / median
  double ci_percent = 0;  // half-width of the median's 95% confidence interval, % of the median
  int repetitions = 0;
  int batch = 1;          // launches per sample
  bool gave_up = false;   // stopped early: clearly slower than give_up_above_ms
};

struct MeasureOptions {
  int min_repetitions = 10;
  int max_repetitions = 400;
  double max_seconds = 0.5;
  double target_ci_percent = 1.0;
  // A kernel faster than this is timed in batches: each launch after its own L2 flush, between
  // its own pair of events, one synchronize a batch. The batch averages out the event timer's
  // half-microsecond resolution; the flushes keep every launch as cold as bench_gemm's and as a
  // workload's first (a chain of 32 dependent loads: 17.6 us a launch either way on an H100, where
  // launches after the first of a batch that shares one flush find the chain in L2).
  double batch_below_ms = 0.02;
  double batch_sample_ms = 0.1;  // the length a batched sample aims for
  int max_batch = 512;
  // The best median so far (with a margin): a candidate whose first samples are slower stops
  // there. 0: time every candidate to the confidence target.
  double give_up_above_ms = 0;
};

// Median, IQR and a distribution-free 95% confidence interval of the median (the order
// statistics n/2 -+ 0.98 sqrt(n)), from samples in any order.
Timing summarize(std::vector<double> samples);
// Launches per sample for a kernel whose single launch took `single_ms`.
int batch_size(double single_ms, const MeasureOptions& options);

// Bit-exact IEEE half conversions, round to nearest even, for host-side data.
std::uint16_t float_to_half(float value);
float half_to_float(std::uint16_t bits);
std::uint16_t float_to_bf16(float value);
float bf16_to_float(std::uint16_t bits);

// One output against its reference, as the device's compare kernel (gmjit/verify.cuh) and
// check_output on the host both reduce it.
struct OutputCheck {
  double l2_error = 0;         // ||out - ref|| / ||ref|| over finite outputs (||out - ref|| when ref is 0)
  std::int64_t non_finite = 0; // NaN or infinite outputs: never written, or overflowed
  std::int64_t outside = 0;    // outputs outside the element bound, non-finite ones included
  std::int64_t first = -1;     // index of the first of those, -1 when none
  double value = 0;            // the output at `first`
  double expected = 0;         // the reference at `first`
};
// The compare kernel (gmjit/verify.cuh) for outputs of `dtype`, as the Harness compiles it.
codegen::GeneratedSource compare_source(const templates::DtypeInfo& dtype);
// The host's version of the device's compare: `out` holds `n` elements of `dtype`.
OutputCheck check_output(const templates::DtypeInfo& dtype, const unsigned char* out, const double* ref,
                         std::int64_t n, const templates::ElementBound& bound);
// Why output `tensor` (n elements) fails verification, naming the first element outside `bound`
// with its value and reference; empty when every element is finite and within `bound` and the
// relative L2 error is within `tolerance`.
std::string output_failure(const std::string& tensor, std::int64_t n, const OutputCheck& check,
                           const templates::ElementBound& bound, double tolerance);

class Harness {
 public:
  // `expected` replaces the reference kernel for kernels verified by a host function: one
  // vector of doubles per output tensor, computed from random_inputs() with the same seed.
  Harness(const templates::KernelDescriptor& kernel, const Shape& shape, const std::string& dtype,
          const DeviceInfo& device, std::uint64_t seed,
          std::optional<std::vector<std::vector<double>>> expected = std::nullopt);

  // Relative L2 error of one run of `kernel` (the worst output's); infinity when any output is
  // NaN/inf (unwritten), any element lies outside its bound (templates::element_bound), or a guard
  // byte past an output was overwritten. failure() then says why. Launch errors throw
  // Error(launch/driver).
  // `config` is the configuration `kernel` was compiled for: a kernel whose descriptor derives
  // arguments from the tensors' addresses (add_address_args) gets them for it.
  double verify(detail::Kernel& kernel, const LaunchGeometry& geometry, const Config& config);
  // Why the last verify() failed (output_failure's message, or the guard's), empty when it
  // passed: every element within its bound and the L2 error within tolerance().
  const std::string& failure() const { return failure_; }
  // The worst relative L2 error of the last verify(), finite also when an element failed.
  double last_l2_error() const { return last_l2_error_; }
  // Milliseconds the last verify() launch took (no L2 flush): enough to size a batch.
  double last_verify_ms() const { return last_verify_ms_; }
  // `single_ms`: a time already known for one launch of this kernel that ran just before (the
  // verification launch); it then also served as the warm-up, and neither is repeated.
  Timing time(detail::Kernel& kernel, const LaunchGeometry& geometry, const Config& config,
              const MeasureOptions& options, double single_ms = 0);
  struct Entrant {
    detail::Kernel* kernel;
    LaunchGeometry geometry;
    Config config;
    int batch;
  };
  // Times the entrants in turn, `rounds` samples each, rotating the order every round, so a
  // drift in clocks or temperature lands on all of them alike.
  std::vector<Timing> retime(const std::vector<Entrant>& entrants, int rounds);
  double tolerance() const { return tolerance_; }
  CUstream stream() const { return stream_.get(); }
  // One sample of any work on stream(), timed as candidates are: L2 flushed, then `work` between
  // two events; milliseconds. Baselines measured beside a kernel (a device copy) use it.
  double sample(const std::function<void(CUstream)>& work);
  std::size_t flush_bytes() const { return flush_.bytes(); }
  // Where the harness keeps tensor `name` (the descriptor's spelling): a baseline run on the
  // candidates' own random inputs sees the same data, and so the same power draw and clocks.
  // Throws Error(usage) for a name the kernel does not have.
  CUdeviceptr tensor_address(const std::string& name) const;

 private:
  struct Tensor {
    templates::TensorArg arg;
    const templates::DtypeInfo* dtype;
    detail::DeviceBuffer buffer;
  };
  struct Compare {
    std::unique_ptr<detail::Module> module;
    std::unique_ptr<detail::Kernel> kernel;
  };
  // A candidate's arguments: tensors, workspace, scalars, then those its descriptor derives from
  // the addresses for `config`.
  detail::KernelArgs arguments(const Config& config) const;
  // The reference kernel's: the same buffers and scalars, its double output in place of the output.
  detail::KernelArgs reference_arguments(CUdeviceptr reference_output) const;
  void poison_outputs();
  // One sample of `batch` launches, each after an L2 flush and between its own two events;
  // milliseconds per launch.
  double sample(detail::Kernel& kernel, const LaunchGeometry& geometry, detail::KernelArgs& args, int batch);

  const templates::KernelDescriptor& kernel_;
  Shape shape_;
  templates::DtypeInfo dtype_;
  detail::Stream stream_;
  std::vector<Tensor> tensors_;
  std::optional<templates::WorkspaceNeed> workspace_need_;
  detail::Workspace workspace_;
  std::vector<detail::DeviceBuffer> reference_;  // float64, per output tensor
  std::map<std::string, Compare> compare_kernels_;  // by output dtype
  detail::DeviceBuffer sums_;  // a gmjit::verify::Sums
  detail::DeviceBuffer flush_;
  detail::Event start_, stop_;
  std::vector<detail::Event> launch_events_;  // a start and a stop per launch of the largest batch yet
  unsigned flush_value_ = 0;
  double last_verify_ms_ = 0;
  double tolerance_ = 0;
  std::string failure_;
  double last_l2_error_ = 0;
};

// The inputs a Harness with this seed uploads, host-side: one byte vector per input tensor.
std::vector<std::vector<unsigned char>> random_inputs(const templates::KernelDescriptor& kernel, const Shape& shape,
                                                      const templates::DtypeInfo& dtype, std::uint64_t seed);
// Those inputs widened to double, each in its tensor's dtype: what a host reference takes.
std::vector<std::vector<double>> widen_inputs(const templates::KernelDescriptor& kernel, const Shape& shape,
                                              const templates::DtypeInfo& dtype,
                                              const std::vector<std::vector<unsigned char>>& inputs);
// Stores `value` as element i of a host buffer of `dtype`: rounded to nearest for floats, floored
// and clamped for integers.
void store_element(const templates::DtypeInfo& dtype, unsigned char* bytes, std::int64_t i, double value);
// Element i of a host buffer of `dtype`, widened to double.
double element(const templates::DtypeInfo& dtype, const unsigned char* bytes, std::int64_t i);

// Bytes of guard placed after every output buffer.
inline constexpr std::size_t kGuardBytes = 256;

}  // namespace gmjit::tuner
