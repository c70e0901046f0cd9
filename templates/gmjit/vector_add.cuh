#pragma once
// c[i] = a[i] + b[i], a memory-bound stream: wide loads, several in flight per thread.

#include <cuda_fp16.h>

#include "gmjit/type_traits.cuh"

namespace gmjit {
namespace vector_add_detail {

// Accesses move raw bits; the adds then work on 32-bit words, so one code path serves float and
// __half at every access width.
template <int kBytes>
struct Raw;
template <>
struct Raw<2> {
  using Type = unsigned short;
};
template <>
struct Raw<4> {
  using Type = unsigned;
};
template <>
struct Raw<8> {
  using Type = uint2;
};
template <>
struct Raw<16> {
  using Type = uint4;
};

template <typename T>
__device__ __forceinline__ unsigned add_word(unsigned x, unsigned y);

template <>
__device__ __forceinline__ unsigned add_word<float>(unsigned x, unsigned y) {
  return __float_as_uint(__uint_as_float(x) + __uint_as_float(y));
}

template <>
__device__ __forceinline__ unsigned add_word<__half>(unsigned x, unsigned y) {
  const __half2 sum =
      __hadd2(*reinterpret_cast<const __half2*>(&x), *reinterpret_cast<const __half2*>(&y));
  return *reinterpret_cast<const unsigned*>(&sum);
}

// Only the unaligned __half fallback moves single 2-byte elements.
template <typename T>
__device__ __forceinline__ unsigned short add_raw(unsigned short x, unsigned short y) {
  return __half_as_ushort(__hadd(__ushort_as_half(x), __ushort_as_half(y)));
}

template <typename T>
__device__ __forceinline__ unsigned add_raw(unsigned x, unsigned y) {
  return add_word<T>(x, y);
}

template <typename T>
__device__ __forceinline__ uint2 add_raw(uint2 x, uint2 y) {
  return make_uint2(add_word<T>(x.x, y.x), add_word<T>(x.y, y.y));
}

template <typename T>
__device__ __forceinline__ uint4 add_raw(uint4 x, uint4 y) {
  return make_uint4(add_word<T>(x.x, y.x), add_word<T>(x.y, y.y), add_word<T>(x.z, y.z),
                    add_word<T>(x.w, y.w));
}

// Loads in flight per thread between adds: all kItems unless their registers (two operands of
// kBytes each) would not fit next to ~32 of bookkeeping in the per-thread share that
// __launch_bounds__(kBlock) leaves; only kBlock = 1024 with 8 x 16-byte items hits that.
__host__ __device__ constexpr int items_in_flight(int block, int items, int bytes) {
  int regs = 65536 / block > 255 ? 255 : 65536 / block;
  while (items > 1 && 2 * items * (bytes / 4) + 32 > regs) items /= 2;
  return items;
}

// Adds n_access accesses of kBytes each. A block takes kBlock * kItems consecutive accesses per
// step, thread-interleaved so every load instruction of a warp is fully coalesced; a group's
// loads are all issued before its first add, so 2 * kGroup requests are in flight per thread.
template <typename T, int kBlock, int kItems, int kBytes>
__device__ __forceinline__ void add_stream(const T* __restrict__ a, const T* __restrict__ b,
                                           T* __restrict__ c, long long n_access) {
  using R = typename Raw<kBytes>::Type;
  const R* __restrict__ ra = reinterpret_cast<const R*>(a);
  const R* __restrict__ rb = reinterpret_cast<const R*>(b);
  R* __restrict__ rc = reinterpret_cast<R*>(c);
  constexpr int kGroup = items_in_flight(kBlock, kItems, kBytes);
  static_assert(kItems % kGroup == 0, "add_stream: groups must tile kItems");

  constexpr long long kPerStep = static_cast<long long>(kBlock) * kItems;
  const long long grid_step = static_cast<long long>(gridDim.x) * kPerStep;
  for (long long step = static_cast<long long>(blockIdx.x) * kPerStep; step < n_access;
       step += grid_step) {
    const long long first = step + threadIdx.x;
    // Only a block's last step can be partial; keeping full steps unpredicated lets them issue
    // back to back.
    const bool full = step + kPerStep <= n_access;
#pragma unroll
    for (int g = 0; g < kItems; g += kGroup) {
      R va[kGroup];
      R vb[kGroup];
      if (full) {
#pragma unroll
        for (int j = 0; j < kGroup; ++j) {
          va[j] = __ldg(ra + first + (g + j) * kBlock);
          vb[j] = __ldg(rb + first + (g + j) * kBlock);
        }
#pragma unroll
        for (int j = 0; j < kGroup; ++j) rc[first + (g + j) * kBlock] = add_raw<T>(va[j], vb[j]);
      } else {
#pragma unroll
        for (int j = 0; j < kGroup; ++j) {
          if (first + (g + j) * kBlock < n_access) {
            va[j] = __ldg(ra + first + (g + j) * kBlock);
            vb[j] = __ldg(rb + first + (g + j) * kBlock);
          }
        }
#pragma unroll
        for (int j = 0; j < kGroup; ++j) {
          if (first + (g + j) * kBlock < n_access) {
            rc[first + (g + j) * kBlock] = add_raw<T>(va[j], vb[j]);
          }
        }
      }
    }
  }
}

template <typename T>
__device__ __forceinline__ void add_one(const T* __restrict__ a, const T* __restrict__ b,
                                        T* __restrict__ c, long long i) {
  using R = typename Raw<sizeof(T)>::Type;
  reinterpret_cast<R*>(c)[i] = add_raw<T>(__ldg(reinterpret_cast<const R*>(a) + i),
                                          __ldg(reinterpret_cast<const R*>(b) + i));
}

}  // namespace vector_add_detail

// T is float or __half. kVecBytes is the bytes per vector access: 4, 8 or 16.
template <typename T, int kBlock, int kItems, int kVecBytes>
__global__ void __launch_bounds__(kBlock)
    vector_add(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ c, long long n) {
  static_assert(IsSame<T, float>::kValue || IsSame<T, __half>::kValue,
                "vector_add: T must be float or __half");
  static_assert(kBlock >= 32 && kBlock <= 1024 && kBlock % 32 == 0,
                "vector_add: kBlock must be a multiple of 32 in [32, 1024]");
  static_assert(kItems >= 1, "vector_add: kItems must be positive");
  static_assert(kVecBytes == 4 || kVecBytes == 8 || kVecBytes == 16,
                "vector_add: kVecBytes must be 4, 8 or 16");
  static_assert(kVecBytes % sizeof(T) == 0, "vector_add: kVecBytes must hold whole elements");
  // The tail below is covered by the first kBlock threads of block 0.
  static_assert(kVecBytes / sizeof(T) <= kBlock, "vector_add: tail larger than a block");

  constexpr int kElems = kVecBytes / static_cast<int>(sizeof(T));
  if constexpr (kElems == 1) {
    vector_add_detail::add_stream<T, kBlock, kItems, kVecBytes>(a, b, c, n);
  } else {
    // Same answer in every thread, so the branch never diverges.
    const unsigned long long misaligned = (reinterpret_cast<unsigned long long>(a) |
                                           reinterpret_cast<unsigned long long>(b) |
                                           reinterpret_cast<unsigned long long>(c)) &
                                          (kVecBytes - 1);
    if (misaligned == 0) {
      const long long n_vec = n / kElems;
      vector_add_detail::add_stream<T, kBlock, kItems, kVecBytes>(a, b, c, n_vec);
      // Fewer than kElems elements remain past the last whole vector.
      const long long i = n_vec * kElems + static_cast<long long>(blockIdx.x) * kBlock + threadIdx.x;
      if (i < n) vector_add_detail::add_one(a, b, c, i);
    } else {
      vector_add_detail::add_stream<T, kBlock, kItems, sizeof(T)>(a, b, c, n);
    }
  }
}

}  // namespace gmjit
