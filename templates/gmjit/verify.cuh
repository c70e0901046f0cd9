#pragma once
// Verification on the device: a candidate's output against the float64 reference, reduced to
// a few sums and the first element outside its bound, so checking a candidate costs one kernel
// and a 40-byte copy, not a copy of the whole output and a host loop over it.
#include "gmjit/to_double.cuh"

namespace gmjit {
namespace verify {

__device__ inline double warp_sum(double value) {
  for (int offset = 16; offset > 0; offset >>= 1) value += __shfl_down_sync(0xffffffffu, value, offset);
  return value;
}

// What compare accumulates; zeroed before the launch.
struct Sums {
  double diff;                    // (out - ref)^2 over finite outputs
  double norm;                    // ref^2
  double non_finite;              // outputs that are NaN or infinite (a NaN left by the poison: never written)
  unsigned long long bad;         // outputs outside |out - ref| <= atol + rtol |ref|, non-finite ones included
  unsigned long long first_bad;   // n - (index of the first such output), 0 when none: atomicMax finds it
};

// Beside the relative L2 error, every element against its own bound: the L2 error of a whole
// output hides a few wrong elements (a tail of 12 zeros in 2^24 fp16 elements stays under 1e-3).
template <typename T>
__global__ void compare(const T* out, const double* ref, long long n, double atol, double rtol, Sums* sums) {
  double diff = 0.0, norm = 0.0, bad = 0.0;
  unsigned long long outside = 0, first = 0;
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
    // Written so that a NaN fails it.
    if (!(fabs(value - expected) <= atol + rtol * fabs(expected))) {
      ++outside;
      if (first == 0) first = static_cast<unsigned long long>(n - i);
    }
  }
  diff = warp_sum(diff);
  norm = warp_sum(norm);
  bad = warp_sum(bad);
  if (__any_sync(0xffffffffu, outside != 0)) {
    for (int offset = 16; offset > 0; offset >>= 1) {
      outside += __shfl_down_sync(0xffffffffu, outside, offset);
      const unsigned long long other = __shfl_down_sync(0xffffffffu, first, offset);
      first = other > first ? other : first;
    }
  }
  if ((threadIdx.x & 31) == 0) {
    atomicAdd(&sums->diff, diff);
    atomicAdd(&sums->norm, norm);
    atomicAdd(&sums->non_finite, bad);
    if (outside != 0) {
      atomicAdd(&sums->bad, outside);
      atomicMax(&sums->first_bad, first);
    }
  }
}

}  // namespace verify
}  // namespace gmjit
