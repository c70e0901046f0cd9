#pragma once
// Row normalizations of a row-major rows x cols matrix, fp32 arithmetic for every storage type:
//   rmsnorm:   y = x / sqrt(mean(x^2) + eps) * w
//   layernorm: y = (x - mean(x)) / sqrt(var(x) + eps) * w + b   (biased variance, as torch)
// Memory-bound streams: at best x is read once and y written once; w and b (one row each) are
// re-read by every row from L1/L2.
//
// A row is owned by kRowThreads threads: one warp (short rows, no barriers) or the whole block
// (long rows). rmsnorm sums squares in a single reduction. layernorm never lets a sum of squares
// cancel against a squared mean: with the row in registers it reduces the sum, then the squared
// deviations from the mean; streamed, each thread keeps (count, mean, M2) over its elements,
// computed two-pass over its registers and merged pairwise (Chan, Golub and LeVeque 1979).
//
// kCached: the row's slice of each thread (kElems elements) stays in registers between the read
// and the write, so x is read once; the caller guarantees cols <= kRowThreads * kElems.
// Otherwise the row is streamed twice in chunks of kRowThreads * kElems: the first pass merges
// each chunk's partial into a running one; the second rereads (from L2 when the rows in flight
// fit there) and writes.

#include "gmjit/row_access.cuh"
#include "gmjit/row_partial.cuh"

namespace gmjit {
namespace norm_detail {

using row_access::Elem;
using row_access::address_bits;
using row_access::rows_aligned;
using row_access::load_access;
using row_access::load_words;
using row_access::store_access;
using row_partial::owned_rows;
using row_partial::row_merge;

// A thread's kElems elements of one chunk: access a of thread t starts at column
// base + (a * kRowThreads + t) * (elements per access), so each access instruction of a warp is
// contiguous. Accesses divide cols, so an access is wholly inside the row or wholly past it;
// elements past it read as 0, which adds nothing to a sum. One pointer and one bound per thread,
// with compile-time offsets per access (per-access 64-bit addresses cost two registers each).
template <typename T, int kRowThreads, int kElems, int kBytes>
__device__ __forceinline__ void load_chunk(const T* __restrict__ row, int cols, int base, int t,
                                           float (&v)[kElems]) {
  constexpr int kPer = kBytes / static_cast<int>(sizeof(T));
  constexpr int kStride = kRowThreads * kPer;
  const int first = base + t * kPer;
  const T* __restrict__ p = row + first;
  const int left = cols - first;
#pragma unroll
  for (int a = 0; a < kElems / kPer; ++a) {
    if (a * kStride < left) {
      load_access<T, kBytes>(p + a * kStride, v + a * kPer);
    } else {
#pragma unroll
      for (int e = 0; e < kPer; ++e) v[a * kPer + e] = 0.f;
    }
  }
}

// load_chunk as raw words (kBytes >= 4): bf16 stays packed, two elements a register.
template <typename T, int kRowThreads, int kElems, int kBytes>
__device__ __forceinline__ void load_chunk_words(const T* __restrict__ row, int cols, int t,
                                                 unsigned (&words)[kElems * sizeof(T) / 4]) {
  constexpr int kPer = kBytes / static_cast<int>(sizeof(T));
  constexpr int kStride = kRowThreads * kPer;
  const T* __restrict__ p = row + t * kPer;
  const int left = cols - t * kPer;
#pragma unroll
  for (int a = 0; a < kElems / kPer; ++a) {
    if (a * kStride < left) {
      load_words<kBytes>(p + a * kStride, words + a * (kBytes / 4));
    } else {
#pragma unroll
      for (int i = 0; i < kBytes / 4; ++i) words[a * (kBytes / 4) + i] = 0u;
    }
  }
}

// How many of a thread's accesses in the chunk at `base` lie inside the row: the first ones.
template <typename T, int kRowThreads, int kElems, int kBytes>
__device__ __forceinline__ int accesses_in_row(int cols, int base, int t) {
  constexpr int kPer = kBytes / static_cast<int>(sizeof(T));
  constexpr int kStride = kRowThreads * kPer;
  const int left = cols - base - t * kPer;
  return left <= 0 ? 0 : min(kElems / kPer, (left + kStride - 1) / kStride);
}

// rmsnorm's partial: a sum of squares.
struct SquareSum {
  float s;
};
// layernorm's partial: element count, mean, and sum of squared deviations from the mean.
struct Moments {
  float n, mean, m2;
};

template <bool kLayer>
struct PartialOf {
  typedef SquareSum Type;
};
template <>
struct PartialOf<true> {
  typedef Moments Type;
};

__device__ __forceinline__ void clear(SquareSum& p) { p.s = 0.f; }
__device__ __forceinline__ void clear(Moments& p) {
  p.n = 0.f;
  p.mean = 0.f;
  p.m2 = 0.f;
}

__device__ __forceinline__ void merge(SquareSum& p, const SquareSum& q) { p.s += q.s; }
// Chan's pairwise update, written symmetric in p and q (IEEE + and * commute; the _rn
// intrinsics forbid contraction into an asymmetric fma), so both lanes of a butterfly exchange
// compute the same bits and every lane of a row ends with the same statistics. Counts are exact
// in fp32 up to 2^24; beyond that their rounding moves a weight by 2^-24 relative.
__device__ __forceinline__ void merge(Moments& p, const Moments& q) {
  const float n = __fadd_rn(p.n, q.n);
  const float inverse = __frcp_rn(fmaxf(n, 1.f));  // empty + empty stays empty, not NaN
  const float d = __fsub_rn(q.mean, p.mean);
  const float sign_free_d2 = __fmul_rn(d, d);
  p.mean = __fmul_rn(__fadd_rn(__fmul_rn(p.n, p.mean), __fmul_rn(q.n, q.mean)), inverse);
  p.m2 = __fadd_rn(__fadd_rn(p.m2, q.m2), __fmul_rn(sign_free_d2, __fmul_rn(__fmul_rn(p.n, q.n), inverse)));
  p.n = n;
}

__device__ __forceinline__ SquareSum shfl_xor(const SquareSum& p, int offset) {
  return SquareSum{__shfl_xor_sync(0xffffffffu, p.s, offset)};
}
__device__ __forceinline__ Moments shfl_xor(const Moments& p, int offset) {
  return Moments{__shfl_xor_sync(0xffffffffu, p.n, offset), __shfl_xor_sync(0xffffffffu, p.mean, offset),
                 __shfl_xor_sync(0xffffffffu, p.m2, offset)};
}

// The thread's partial over the chunk it holds in v (elements past the row are 0).
template <typename T, int kRowThreads, int kElems, int kBytes>
__device__ __forceinline__ void chunk_partial(const float (&v)[kElems], int, int, int, SquareSum& p) {
  float s = 0.f;
#pragma unroll
  for (int j = 0; j < kElems; ++j) s = fmaf(v[j], v[j], s);
  p.s = s;
}
template <typename T, int kRowThreads, int kElems, int kBytes>
__device__ __forceinline__ void chunk_partial(const float (&v)[kElems], int cols, int base, int t, Moments& p) {
  constexpr int kPer = kBytes / static_cast<int>(sizeof(T));
  const int valid = accesses_in_row<T, kRowThreads, kElems, kBytes>(cols, base, t);
  float s = 0.f;
#pragma unroll
  for (int j = 0; j < kElems; ++j) s += v[j];
  const float n = static_cast<float>(valid * kPer);
  const float mean = s / fmaxf(n, 1.f);
  float m2 = 0.f;
#pragma unroll
  for (int a = 0; a < kElems / kPer; ++a) {
#pragma unroll
    for (int e = 0; e < kPer; ++e) {
      const float d = a < valid ? v[a * kPer + e] - mean : 0.f;
      m2 = fmaf(d, d, m2);
    }
  }
  p.n = n;
  p.mean = mean;
  p.m2 = m2;
}

// y = (x - shift) * scale * w (+ b): the row's statistics turned into a shift and a scale.
__device__ __forceinline__ void finish(const SquareSum& p, int cols, float eps, float& shift, float& scale) {
  shift = 0.f;
  scale = rsqrtf(p.s / static_cast<float>(cols) + eps);
}
__device__ __forceinline__ void finish(const Moments& p, int cols, float eps, float& shift, float& scale) {
  shift = p.mean;
  scale = rsqrtf(p.m2 / static_cast<float>(cols) + eps);
}

// Normalizes and stores the accesses of a chunk that lie inside the row, reading w (and b) with
// the same accesses: one access of each at a time, so the weights never need a second copy of
// the thread's slice in registers.
template <bool kLayer, typename T, int kRowThreads, int kElems, int kBytes>
__device__ __forceinline__ void write_chunk(const float (&v)[kElems], const T* __restrict__ w,
                                            const T* __restrict__ b, T* __restrict__ row, int cols, int base,
                                            int t, float shift, float scale) {
  constexpr int kPer = kBytes / static_cast<int>(sizeof(T));
  constexpr int kStride = kRowThreads * kPer;
  const int first = base + t * kPer;
  const int left = cols - first;
  T* __restrict__ p = row + first;
  const T* __restrict__ pw = w + first;
#pragma unroll
  for (int a = 0; a < kElems / kPer; ++a) {
    if (a * kStride < left) {
      float weight[kPer];
      load_access<T, kBytes>(pw + a * kStride, weight);
      float out[kPer];
      if constexpr (kLayer) {
        float bias[kPer];
        load_access<T, kBytes>(b + first + a * kStride, bias);
#pragma unroll
        for (int e = 0; e < kPer; ++e) out[e] = fmaf((v[a * kPer + e] - shift) * scale, weight[e], bias[e]);
      } else {
#pragma unroll
        for (int e = 0; e < kPer; ++e) out[e] = v[a * kPer + e] * scale * weight[e];
      }
      store_access<T, kBytes>(p + a * kStride, out);
    }
  }
}

// write_chunk of the first chunk with its weights (and biases) already in registers as words.
template <bool kLayer, typename T, int kRowThreads, int kElems, int kBytes>
__device__ __forceinline__ void write_loaded(const float (&v)[kElems], const unsigned (&weight)[kElems * sizeof(T) / 4],
                                             const unsigned (&bias)[kElems * sizeof(T) / 4], T* __restrict__ row,
                                             int cols, int t, float shift, float scale) {
  constexpr int kPer = kBytes / static_cast<int>(sizeof(T));
  constexpr int kStride = kRowThreads * kPer;
  constexpr int kWords = kBytes / 4;
  const int left = cols - t * kPer;
  T* __restrict__ p = row + t * kPer;
#pragma unroll
  for (int a = 0; a < kElems / kPer; ++a) {
    if (a * kStride < left) {
      float w[kPer], b[kPer], out[kPer];
#pragma unroll
      for (int i = 0; i < kWords; ++i) {
        Elem<T>::unpack(weight[a * kWords + i], w + i * Elem<T>::kPerWord);
        if constexpr (kLayer) Elem<T>::unpack(bias[a * kWords + i], b + i * Elem<T>::kPerWord);
      }
#pragma unroll
      for (int e = 0; e < kPer; ++e) {
        const int j = a * kPer + e;
        if constexpr (kLayer) {
          out[e] = fmaf((v[j] - shift) * scale, w[e], b[e]);
        } else {
          out[e] = v[j] * scale * w[e];
        }
      }
      store_access<T, kBytes>(p + a * kStride, out);
    }
  }
}

// The row's shift and scale from the slice of it each thread holds in v (kCached: the whole row
// is in registers). layernorm can then afford the exact two-pass: a plain sum gives the mean, and
// the squared deviations from it are summed from the registers. Two merges of one float cost fewer
// dependent instructions than one of (count, mean, M2) with a division a step. Each merge has its
// own scratch array, so consecutive merges alternate arrays as block_merge needs. Where the slice
// takes half of a thread's registers or more (1024 threads x 32 fp32: 64 registers), the second
// pass's live values made ptxas 13.0 spill 48 bytes, so those keep the single (count, mean, M2)
// merge.
template <bool kLayer, typename T, int kRowThreads, int kBlock, int kElems, int kBytes>
__device__ __forceinline__ void cached_statistics(const float (&v)[kElems], int cols, int t, float eps,
                                                  typename PartialOf<kLayer>::Type (*scratch)[kBlock / 32],
                                                  int parity, float& shift, float& scale) {
  if constexpr (kLayer && 2 * kElems < 65536 / kBlock) {
    constexpr int kPer = kBytes / static_cast<int>(sizeof(T));
    __shared__ SquareSum sums[2][kBlock / 32];
    SquareSum sum{0.f};
#pragma unroll
    for (int j = 0; j < kElems; ++j) sum.s += v[j];
    row_merge<kRowThreads, kBlock>(sum, sums, 0);
    const float mean = sum.s / static_cast<float>(cols);
    const int valid = accesses_in_row<T, kRowThreads, kElems, kBytes>(cols, 0, t);
    SquareSum deviations{0.f};
#pragma unroll
    for (int a = 0; a < kElems / kPer; ++a) {
#pragma unroll
      for (int e = 0; e < kPer; ++e) {
        const float d = a < valid ? v[a * kPer + e] - mean : 0.f;
        deviations.s = fmaf(d, d, deviations.s);
      }
    }
    row_merge<kRowThreads, kBlock>(deviations, sums, 1);
    shift = mean;
    scale = rsqrtf(deviations.s / static_cast<float>(cols) + eps);
  } else {
    typename PartialOf<kLayer>::Type p;
    chunk_partial<T, kRowThreads, kElems, kBytes>(v, cols, 0, t, p);
    row_merge<kRowThreads, kBlock>(p, scratch, parity);
    finish(p, cols, eps, shift, scale);
  }
}

template <bool kLayer, typename T, int kRowThreads, int kBlock, int kElems, int kBytes, bool kCached>
__device__ __forceinline__ void norm_rows(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                                          T* __restrict__ y, long long rows, int cols, float eps,
                                          typename PartialOf<kLayer>::Type (*scratch)[kBlock / 32]) {
  typedef typename PartialOf<kLayer>::Type Partial;
  constexpr int kChunk = kRowThreads * kElems;
  const auto [t, stride, first] = owned_rows<kRowThreads, kBlock>();
  int parity = 0;
  for (long long row = first; row < rows; row += stride, parity ^= 1) {
    const T* __restrict__ xr = x + row * cols;
    T* __restrict__ yr = y + row * cols;
    float v[kElems];
    float shift, scale;
    if constexpr (kCached && kBytes >= 4 && kElems * sizeof(T) / 4 * (kLayer ? 2 : 1) <= 8) {
      // Weights loaded before the row's reduction wait for memory alongside x instead of after
      // the barrier; where they fit in 8 more registers (bf16 packed two a register): 16 made
      // ptxas 13.0 spill 32 cached bf16 at 1024 threads (64 registers).
      constexpr int kWords = kElems * sizeof(T) / 4;
      load_chunk<T, kRowThreads, kElems, kBytes>(xr, cols, 0, t, v);
      unsigned weight[kWords], bias[kLayer ? kWords : 1];
      load_chunk_words<T, kRowThreads, kElems, kBytes>(w, cols, t, weight);
      if constexpr (kLayer) load_chunk_words<T, kRowThreads, kElems, kBytes>(b, cols, t, bias);
      cached_statistics<kLayer, T, kRowThreads, kBlock, kElems, kBytes>(v, cols, t, eps, scratch, parity, shift, scale);
      if constexpr (kLayer) {
        write_loaded<kLayer, T, kRowThreads, kElems, kBytes>(v, weight, bias, yr, cols, t, shift, scale);
      } else {
        write_loaded<kLayer, T, kRowThreads, kElems, kBytes>(v, weight, weight, yr, cols, t, shift, scale);
      }
    } else if constexpr (kCached) {
      load_chunk<T, kRowThreads, kElems, kBytes>(xr, cols, 0, t, v);
      cached_statistics<kLayer, T, kRowThreads, kBlock, kElems, kBytes>(v, cols, t, eps, scratch, parity, shift, scale);
      write_chunk<kLayer, T, kRowThreads, kElems, kBytes>(v, w, b, yr, cols, 0, t, shift, scale);
    } else {
      Partial p;
      clear(p);
      // Memory-level parallelism comes from kElems; unrolling the chunks as well would only
      // multiply the registers.
#pragma unroll 1
      for (int base = 0; base < cols; base += kChunk) {
        load_chunk<T, kRowThreads, kElems, kBytes>(xr, cols, base, t, v);
        Partial q;
        chunk_partial<T, kRowThreads, kElems, kBytes>(v, cols, base, t, q);
        merge(p, q);
      }
      row_merge<kRowThreads, kBlock>(p, scratch, parity);
      finish(p, cols, eps, shift, scale);
#pragma unroll 1
      for (int base = 0; base < cols; base += kChunk) {
        load_chunk<T, kRowThreads, kElems, kBytes>(xr, cols, base, t, v);
        write_chunk<kLayer, T, kRowThreads, kElems, kBytes>(v, w, b, yr, cols, base, t, shift, scale);
      }
    }
  }
}

// The rare path of single-element accesses, kept small: streaming works at any row length.
// Unlike softmax's, it is inlined: out of line, the call made ptxas 13.0 cap the whole kernel at
// 32 to 40 registers and spill up to 24 bytes of loop state; inlined, at most 16 (measured on
// rmsnorm<float, 128, 128, 16, 16, false> and layernorm<bf16, 512, 512, 8, 16, true>).
template <bool kLayer, typename T, int kRowThreads, int kBlock>
__device__ __forceinline__ void norm_rows_unaligned(const T* __restrict__ x, const T* __restrict__ w,
                                                 const T* __restrict__ b, T* __restrict__ y, long long rows, int cols,
                                                 float eps, typename PartialOf<kLayer>::Type (*scratch)[kBlock / 32]) {
  norm_rows<kLayer, T, kRowThreads, kBlock, 4, static_cast<int>(sizeof(T)), false>(x, w, b, y, rows, cols, eps,
                                                                                    scratch);
}

template <bool kLayer, typename T, int kRowThreads, int kBlock, int kElems, int kVecBytes, bool kCached>
__device__ __forceinline__ void norm(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                                     T* __restrict__ y, long long rows, int cols, float eps) {
  row_access::check_row_kernel<T, kRowThreads, kBlock, kElems, kVecBytes>();
  typedef typename PartialOf<kLayer>::Type Partial;
  // Only the block-per-row reduction uses it; two arrays, alternating by row (see
  // row_partial::block_merge).
  __shared__ Partial scratch[kRowThreads == 32 ? 1 : 2][kBlock / 32];
  constexpr int kBytes = static_cast<int>(sizeof(T));
  if constexpr (kVecBytes == kBytes) {
    norm_rows<kLayer, T, kRowThreads, kBlock, kElems, kBytes, kCached>(x, w, b, y, rows, cols, eps, scratch);
  } else {
    unsigned long long addresses = address_bits(x) | address_bits(w) | address_bits(y);
    if constexpr (kLayer) addresses |= address_bits(b);
    if (rows_aligned<kVecBytes, T>(addresses, cols)) {
      norm_rows<kLayer, T, kRowThreads, kBlock, kElems, kVecBytes, kCached>(x, w, b, y, rows, cols, eps, scratch);
    } else {
      norm_rows_unaligned<kLayer, T, kRowThreads, kBlock>(x, w, b, y, rows, cols, eps, scratch);
    }
  }
}

}  // namespace norm_detail

// T is float or __nv_bfloat16. kRowThreads is 32 (a warp per row) or kBlock (a block per row).
// kElems: elements per thread per pass (see above). kVecBytes: bytes per access, at least
// sizeof(T) and at most kElems * sizeof(T); where cols * sizeof(T) or any pointer is not a
// multiple of it, the kernel falls back to streaming single-element accesses (correct, slower).
// Always: cols + kRowThreads * kElems < 2^31. The grid strides over rows, so any grid works.
// x and y are rows x cols; w (and b) hold cols elements.
template <typename T, int kRowThreads, int kBlock, int kElems, int kVecBytes, bool kCached>
__global__ void __launch_bounds__(kBlock)
    rmsnorm(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y, long long rows, int cols, float eps) {
  norm_detail::norm<false, T, kRowThreads, kBlock, kElems, kVecBytes, kCached>(x, w, nullptr, y, rows, cols, eps);
}

template <typename T, int kRowThreads, int kBlock, int kElems, int kVecBytes, bool kCached>
__global__ void __launch_bounds__(kBlock)
    layernorm(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b, T* __restrict__ y,
              long long rows, int cols, float eps) {
  norm_detail::norm<true, T, kRowThreads, kBlock, kElems, kVecBytes, kCached>(x, w, b, y, rows, cols, eps);
}

}  // namespace gmjit
