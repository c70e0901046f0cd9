#pragma once
// Verification on the device: a candidate's output against the float64 reference, reduced to
// three sums, so checking a candidate costs one kernel and a 24-byte copy, not a copy of the
// whole output and a host loop over it.
#include "gmjit/to_double.cuh"

namespace gmjit {
namespace verify {

__device__ inline double warp_sum(double value) {
  for (int offset = 16; offset > 0; offset >>= 1) value += __shfl_down_sync(0xffffffffu, value, offset);
  return value;
}

// sums[0] += (out - ref)^2 over finite outputs, sums[1] += ref^2, sums[2] += non-finite outputs
// (a NaN left by the poison means an element was never written). sums must start at zero.
template <typename T>
__global__ void compare(const T* out, const double* ref, long long n, double* sums) {
  double diff = 0.0, norm = 0.0, bad = 0.0;
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const double value = to_double(out[i]);
    const double expected = ref[i];
    if (isfinite(value)) {
      const double d = value - expected;
      diff += d * d;
    } else {
      bad += 1.0;
    }
    norm += expected * expected;
  }
  diff = warp_sum(diff);
  norm = warp_sum(norm);
  bad = warp_sum(bad);
  if ((threadIdx.x & 31) == 0) {
    atomicAdd(&sums[0], diff);
    atomicAdd(&sums[1], norm);
    atomicAdd(&sums[2], bad);
  }
}

}  // namespace verify
}  // namespace gmjit
