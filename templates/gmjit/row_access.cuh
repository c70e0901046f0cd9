#pragma once
// What the row kernels (softmax, rmsnorm, layernorm) share about moving elements: accesses of 2 to
// 16 bytes read and written as raw 32-bit words, widened to fp32 for arithmetic and packed back.

#include <cuda_bf16.h>

#include "gmjit/type_traits.cuh"

namespace gmjit {
namespace row_access {

__device__ __forceinline__ unsigned long long address_bits(const void* p) {
  return reinterpret_cast<unsigned long long>(p);
}

// Whether accesses of kVecBytes stay aligned in every row: the base addresses (or-ed together) and
// the row length in bytes are multiples of kVecBytes. The same answer in every thread, so a branch
// on it never diverges.
template <int kVecBytes, typename T>
__device__ __forceinline__ bool rows_aligned(unsigned long long addresses, int cols) {
  return ((addresses | static_cast<unsigned long long>(cols) * sizeof(T)) & (kVecBytes - 1)) == 0;
}

// The template parameters every row kernel takes: T is float or __nv_bfloat16, kRowThreads 32 (a
// warp per row) or kBlock (a block per row), and a thread's kElems elements are whole accesses of
// kVecBytes. Called first in a kernel, so a bad instantiation fails there; it emits no code.
template <typename T, int kRowThreads, int kBlock, int kElems, int kVecBytes>
__device__ __forceinline__ void check_row_kernel() {
  static_assert(IsSame<T, float>::kValue || IsSame<T, __nv_bfloat16>::kValue,
                "row kernel: T must be float or __nv_bfloat16");
  static_assert(kBlock >= 32 && kBlock <= 1024 && kBlock % 32 == 0,
                "row kernel: kBlock must be a multiple of 32 in [32, 1024]");
  static_assert(kRowThreads == 32 || kRowThreads == kBlock, "row kernel: kRowThreads must be 32 or kBlock");
  static_assert(kVecBytes == 2 || kVecBytes == 4 || kVecBytes == 8 || kVecBytes == 16,
                "row kernel: kVecBytes must be 2, 4, 8 or 16");
  static_assert(kVecBytes >= static_cast<int>(sizeof(T)), "row kernel: kVecBytes below one element");
  static_assert(kElems >= 1 && kElems * static_cast<int>(sizeof(T)) % kVecBytes == 0,
                "row kernel: kElems must be whole accesses of kVecBytes");
}

// fp32 holds one element per 32-bit word, bf16 two (low half first).
template <typename T>
struct Elem;
template <>
struct Elem<float> {
  enum : int { kPerWord = 1 };
  __device__ __forceinline__ static void unpack(unsigned w, float* out) { out[0] = __uint_as_float(w); }
  __device__ __forceinline__ static unsigned pack(const float* in) { return __float_as_uint(in[0]); }
};
template <>
struct Elem<__nv_bfloat16> {
  enum : int { kPerWord = 2 };
  // bf16 is the upper half of an fp32, so widening is exact and needs no conversion instruction.
  __device__ __forceinline__ static void unpack(unsigned w, float* out) {
    out[0] = __uint_as_float(w << 16);
    out[1] = __uint_as_float(w & 0xffff0000u);
  }
  __device__ __forceinline__ static unsigned pack(const float* in) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(in[0], in[1]);
    return *reinterpret_cast<const unsigned*>(&h);
  }
};

// One access of kBytes >= 4 at p (aligned to kBytes) as raw 32-bit words.
template <int kBytes, typename T>
__device__ __forceinline__ void load_words(const T* __restrict__ p, unsigned* w) {
  if constexpr (kBytes == 4) {
    w[0] = __ldg(reinterpret_cast<const unsigned*>(p));
  } else if constexpr (kBytes == 8) {
    const uint2 r = __ldg(reinterpret_cast<const uint2*>(p));
    w[0] = r.x;
    w[1] = r.y;
  } else {
    const uint4 r = __ldg(reinterpret_cast<const uint4*>(p));
    w[0] = r.x;
    w[1] = r.y;
    w[2] = r.z;
    w[3] = r.w;
  }
}

// One access of kBytes at p (aligned to kBytes) into kBytes / sizeof(T) floats.
template <typename T, int kBytes>
__device__ __forceinline__ void load_access(const T* __restrict__ p, float* out) {
  if constexpr (kBytes == 2) {
    const unsigned short bits = __ldg(reinterpret_cast<const unsigned short*>(p));
    out[0] = __uint_as_float(static_cast<unsigned>(bits) << 16);
  } else {
    unsigned w[kBytes / 4];
    load_words<kBytes>(p, w);
#pragma unroll
    for (int i = 0; i < kBytes / 4; ++i) Elem<T>::unpack(w[i], out + i * Elem<T>::kPerWord);
  }
}

template <typename T, int kBytes>
__device__ __forceinline__ void store_access(T* __restrict__ p, const float* in) {
  if constexpr (kBytes == 2) {
    *reinterpret_cast<unsigned short*>(p) = __bfloat16_as_ushort(__float2bfloat16_rn(in[0]));
  } else {
    unsigned w[kBytes / 4];
#pragma unroll
    for (int i = 0; i < kBytes / 4; ++i) w[i] = Elem<T>::pack(in + i * Elem<T>::kPerWord);
    if constexpr (kBytes == 4) {
      *reinterpret_cast<unsigned*>(p) = w[0];
    } else if constexpr (kBytes == 8) {
      *reinterpret_cast<uint2*>(p) = make_uint2(w[0], w[1]);
    } else {
      *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
    }
  }
}

}  // namespace row_access
}  // namespace gmjit
