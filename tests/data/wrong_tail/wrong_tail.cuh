#pragma once
// c[i] = a[i] + b[i], except that `kTail` > 0 writes 0 to the last kTail elements: the fault a
// relative L2 error over the whole output does not see, which the per-element bound must.
//
// At n = 2^24 fp16 with kTail = 12 the L2 error passes even a tolerance of 1e-3. The inputs are
// uniform in +-[1/16, 1) (the tuner's default), so E[(a + b)^2] = 2 (1 - 16^-3) / (3 * 15/16)
// = 0.711 and ||ref|| = sqrt(2^24 * 0.711) = 3454. The 12 zeros err by their references, each
// below 2 in magnitude: at most sqrt(12 * 4) = 6.9, about sqrt(12 * 0.711) = 2.9. Every other
// element errs by its fp16 rounding alone (a + b is exact in float), at most 2^-11 relative.
// Both act on different elements, so the relative L2 error is at most
// sqrt((6.9 / 3454)^2 + (2^-11)^2) = 2.1e-3 for any inputs, and about
// sqrt((2.9 / 3454)^2 + (2.8e-4)^2) = 8.9e-4 for these: below wrong_tail.json's tolerance of 4e-3
// always, below vector_add's 1e-3 as well. Yet each zero misses its reference a + b, typically
// 0.7 in magnitude, by far more than the fp16 bound 4e-3 + 4e-3 |ref|.

#include <cuda_fp16.h>

namespace user {

template <typename T, int kTail, int kBlock>
__global__ void __launch_bounds__(kBlock) wrong_tail(const T* __restrict__ a, const T* __restrict__ b,
                                                       T* __restrict__ c, long long n) {
  const long long stride = static_cast<long long>(gridDim.x) * kBlock;
  for (long long i = static_cast<long long>(blockIdx.x) * kBlock + threadIdx.x; i < n; i += stride) {
    // The sum of two fp16 values is exact in float, so this rounds once, as vector_add does.
    const float sum = static_cast<float>(a[i]) + static_cast<float>(b[i]);
    c[i] = i >= n - kTail ? static_cast<T>(0.0f) : static_cast<T>(sum);
  }
}

// The reference: same inputs and scalar, one double per output element.
template <typename T>
__global__ void wrong_tail_reference(const T* a, const T* b, double* c, long long n) {
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    c[i] = static_cast<double>(static_cast<float>(a[i])) + static_cast<double>(static_cast<float>(b[i]));
  }
}

}  // namespace user
