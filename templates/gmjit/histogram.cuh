#pragma once
// counts[b] = number of bytes of x equal to b, for b in 0..255: exact, in one launch and one pass.
//
// Each block counts into a shared-memory histogram with kStripes copies of every bin: bin b of
// stripe s lives at word b * kStripes + s, and lane l of a warp uses stripe l % kStripes. Shared
// memory has 32 banks of 4-byte words (CUDA C Programming Guide, shared memory, cc 5.x and
// later), so with 32 stripes lane l always hits bank l: no bank conflicts and no two lanes on one
// address, even when a whole warp sees the same byte (a skewed input). Fewer stripes take less
// shared memory (more blocks per SM, a cheaper fold) and serialize only on repeated values.
//
// After its share of x, a block folds the stripes (each warp takes 32 consecutive words, i.e.
// 32 / kStripes bins) and adds its non-zero bins into a 256-word accumulator in the workspace with
// global atomics. The last block to finish moves the accumulator into counts with atomicExch,
// which also zeroes it, and resets the completion counter: each launch leaves the workspace as
// the next one needs it, and counts is written whole by one block, never accumulated into.
//
// Workspace (unsigned words, zeroed once by the caller before the first launch): words 0..255
// the accumulator, word 256 the completion counter.

#include "gmjit/vector_stream.cuh"

namespace gmjit {
namespace histogram_detail {

enum : int { kBins = 256, kCounterWord = 256 };

template <int kStripes>
__device__ __forceinline__ void count_word(unsigned* stripe, unsigned word) {
#pragma unroll
  for (int k = 0; k < 4; ++k) atomicAdd(stripe + ((word >> (8 * k)) & 0xffu) * kStripes, 1u);
}

template <int kStripes>
__device__ __forceinline__ void count_vector(unsigned* stripe, uint4 v) {
  count_word<kStripes>(stripe, v.x);
  count_word<kStripes>(stripe, v.y);
  count_word<kStripes>(stripe, v.z);
  count_word<kStripes>(stripe, v.w);
}

}  // namespace histogram_detail

// TCount: unsigned int or long long (torch's dtype for counts; the accumulator stays 32-bit,
// since n < 2^32). kBlock threads per block; kStripes copies of the histogram per block (1, 2, 4, 8, 16 or 32);
// kUnroll 16-byte loads each thread issues before it counts any. Any grid size works (the loop
// strides over the grid). x may start at any byte: up to 15 bytes before the first 16-byte
// boundary and up to 15 after the last whole vector are counted one by one. n < 2^32, so that
// no count overflows.
template <typename TCount, int kBlock, int kStripes, int kUnroll>
__global__ void __launch_bounds__(kBlock)
    histogram(const unsigned char* __restrict__ x, TCount* __restrict__ counts, unsigned* __restrict__ workspace,
              long long n) {
  static_assert(kBlock >= 32 && kBlock <= 1024 && kBlock % 32 == 0,
                "histogram: kBlock must be a multiple of 32 in [32, 1024]");
  static_assert(kStripes >= 1 && kStripes <= 32 && (kStripes & (kStripes - 1)) == 0,
                "histogram: kStripes must be a power of two up to 32");
  static_assert(kUnroll >= 1, "histogram: kUnroll must be positive");
  using namespace histogram_detail;

  __shared__ unsigned hist[kBins * kStripes];
  for (int i = threadIdx.x; i < kBins * kStripes; i += kBlock) hist[i] = 0u;
  __syncthreads();
  unsigned* const stripe = hist + (threadIdx.x % kStripes);

  const auto xv = vector_stream::split<uint4>(x, n);
  vector_stream::for_each_step<kBlock, kUnroll>(xv.vectors, [&](long long first, bool full) {
    if (full) {
      uint4 v[kUnroll];
      vector_stream::load_step<kBlock>(xv.data, first, v);
#pragma unroll
      for (int j = 0; j < kUnroll; ++j) count_vector<kStripes>(stripe, v[j]);
    } else {
#pragma unroll
      for (int j = 0; j < kUnroll; ++j) {
        if (first + j * kBlock < xv.vectors) count_vector<kStripes>(stripe, __ldcs(xv.data + first + j * kBlock));
      }
    }
  });
  // The peeled head (threads 0..14) and the tail past the last whole vector (threads 16..30).
  if (blockIdx.x == gridDim.x - 1) {
    const long long tail_start = xv.peel + 16 * xv.vectors;
    const long long t = threadIdx.x;
    if (t < xv.peel) {
      atomicAdd(stripe + static_cast<unsigned>(x[t]) * kStripes, 1u);
    } else if (t >= 16 && t - 16 < n - tail_start) {
      atomicAdd(stripe + static_cast<unsigned>(x[tail_start + t - 16]) * kStripes, 1u);
    }
  }
  __syncthreads();

  // Word w = b * kStripes + s, so a warp's 32 consecutive words are 32 / kStripes whole bins,
  // each in kStripes adjacent lanes.
  unsigned* const accumulator = workspace;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  for (int base = (static_cast<int>(threadIdx.x) >> 5) * 32; base < kBins * kStripes; base += kBlock) {
    unsigned v = hist[base + lane];
    if (kStripes == 32) {
      v = __reduce_add_sync(0xffffffffu, v);
    } else {
#pragma unroll
      for (int offset = kStripes / 2; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    }
    if (lane % kStripes == 0 && v != 0u) atomicAdd(accumulator + (base + lane) / kStripes, v);
  }
  // Every thread's additions reach L2 before the counter says this block is done.
  __threadfence();
  __syncthreads();
  __shared__ int is_last;
  if (threadIdx.x == 0) is_last = atomicAdd(workspace + kCounterWord, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!is_last) return;
  __threadfence();
  for (int b = threadIdx.x; b < kBins; b += kBlock) counts[b] = static_cast<TCount>(atomicExch(accumulator + b, 0u));
  if (threadIdx.x == 0) workspace[kCounterWord] = 0u;
}

}  // namespace gmjit
