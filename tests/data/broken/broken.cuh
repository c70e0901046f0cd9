#pragma once
// out[i] = 2 * a[i] + b[i], deliberately broken in every way a candidate can fail, so the tuner's
// isolation (compile errors, device limits, crashed and hung workers, wrong results) can be
// tested on a real GPU. The `mode` parameter picks the failure:
//   0  correct
//   1  does not compile: a static_assert that fires only for this instantiation
//   2  asks for 300 KiB of dynamic shared memory (broken.json's geometry), more than any GPU
//      offers (227 KiB opt-in on sm_90); the kernel really uses it
//   3  writes 2^40 elements (4 TiB) past `out` through a 64-bit index: an illegal address that
//      poisons the context; 2^40 rather than 2^30 so the address lies beyond any allocation
//      even on a 141 GB H200
//   4  never terminates: every thread spins on a volatile read of a global nothing writes
//   5  wrong result: 2 * a[i] + b[i] + 1
// `block` is the block size the kernel is compiled for (64, 128 or 256).

namespace user {
namespace broken_detail {

// Only mode 4 reads it, and nothing ever writes it.
__device__ int never_set = 0;

}  // namespace broken_detail

template <typename T, int kMode, int kBlock>
__global__ void __launch_bounds__(kBlock)
    broken(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ out, long long n) {
  static_assert(kMode != 1, "broken: mode 1 fails to compile on purpose");
  static_assert(kMode >= 0 && kMode <= 5, "broken: mode must be in [0, 5]");
  extern __shared__ unsigned char broken_dynamic_shared[];

  if (kMode == 4) {
    const volatile int* flag = &broken_detail::never_set;
    while (*flag == 0) {
    }
  }
  const long long stride = static_cast<long long>(gridDim.x) * kBlock;
  for (long long i = static_cast<long long>(blockIdx.x) * kBlock + threadIdx.x; i < n; i += stride) {
    T value = T(2) * a[i] + b[i];
    if (kMode == 2) {
      T* staged = reinterpret_cast<T*>(broken_dynamic_shared);
      staged[threadIdx.x] = value;
      value = staged[threadIdx.x];
    }
    if (kMode == 5) value = value + T(1);
    if (kMode == 3) {
      out[i + (1LL << 40)] = value;
    } else {
      out[i] = value;
    }
  }
}

// The reference: same inputs and scalar, one double output per element (templates/gmjit/
// reference.cuh's convention).
template <typename T>
__global__ void broken_reference(const T* a, const T* b, double* out, long long n) {
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = 2.0 * static_cast<double>(a[i]) + static_cast<double>(b[i]);
  }
}

}  // namespace user
