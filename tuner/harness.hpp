#pragma once
// Runs candidates of one problem on one device: fresh random inputs, a reference computed once
// in double precision, verification with NaN-poisoned outputs and guard bytes, and timing with
// the L2 flushed before every timed launch.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gmjit/types.hpp"
#include "lib/core/device.hpp"
#include "lib/core/module.hpp"
#include "templates/registry.hpp"

namespace gmjit::tuner {

struct Timing {
  double median_ms = 0;
  double spread = 0;  // interquartile range / median
  int repetitions = 0;
};

struct MeasureOptions {
  int min_repetitions = 5;
  int max_repetitions = 100;
  double max_seconds = 2.0;
  double target_spread = 0.01;  // stop once the interquartile range is within 1% of the median
};

// Bit-exact IEEE half conversions, round to nearest even, for host-side data.
std::uint16_t float_to_half(float value);
float half_to_float(std::uint16_t bits);

class Harness {
 public:
  Harness(const templates::KernelDescriptor& kernel, const Shape& shape, const std::string& dtype,
          const DeviceInfo& device, std::uint64_t seed);

  // Relative L2 error of one run of `kernel`; infinity when any output is NaN/inf (unwritten)
  // or a guard byte past an output was overwritten. Launch errors throw Error(launch/driver).
  double verify(detail::Kernel& kernel, const LaunchGeometry& geometry);
  Timing time(detail::Kernel& kernel, const LaunchGeometry& geometry, const MeasureOptions& options);
  double tolerance() const { return tolerance_; }
  CUstream stream() const { return stream_.get(); }

 private:
  struct Tensor {
    templates::TensorArg arg;
    detail::DeviceBuffer buffer;
  };
  detail::KernelArgs arguments(CUdeviceptr reference_output = 0) const;
  void poison_outputs();

  const templates::KernelDescriptor& kernel_;
  Shape shape_;
  templates::DtypeInfo dtype_;
  detail::Stream stream_;
  std::vector<Tensor> tensors_;
  std::vector<std::vector<double>> reference_;  // per output tensor
  detail::DeviceBuffer flush_;
  double tolerance_ = 0;
};

// Bytes of guard placed after every output buffer.
inline constexpr std::size_t kGuardBytes = 256;

}  // namespace gmjit::tuner
