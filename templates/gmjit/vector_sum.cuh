#pragma once
// y[0] = x[0] + ... + x[n-1] for fp32 x, in one launch and one pass over x: a persistent grid
// streams x with 16-byte loads, each block leaves a double partial in a workspace, and the last
// block to finish adds the partials in a fixed order, so the result is the same on every launch.
//
// Accuracy: the four floats of one 16-byte load are added in fp32 (3 roundings of at most
// 2^-24 of a 4-element partial), everything after that in double. The fp32 error is then that
// of 4-element sums, independent of n, where a plain fp32 accumulator loses digits as it grows
// (52M elements of magnitude ~100 would leave it 2^-24 * 5e9 ~ 300 off per add).
//
// Workspace (unsigned words, zeroed once by the caller before the first launch): word 0 counts
// the blocks that finished; from word 4 (byte 16, 8-byte aligned) one double per block. The last
// block resets the counter, so each launch leaves the workspace as the next one needs it.

#include "gmjit/vector_stream.cuh"

namespace gmjit {
namespace vector_sum_detail {

// Enumerators rather than static constexpr members: NVRTC emits those as device globals.
enum : int { kCounterWord = 0, kPartialsWord = 4 };

__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// The block's total in thread 0 (other threads: partial sums). A fixed tree, so the rounding does
// not depend on timing. Callers separate two uses of `scratch` by a barrier.
template <int kBlock>
__device__ __forceinline__ double block_sum(double v, double* scratch) {
  constexpr int kWarps = kBlock / 32;
  v = warp_sum(v);
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = 0.0;
  if (warp == 0) {
    v = lane < kWarps ? scratch[lane] : 0.0;
    v = warp_sum(v);
  }
  return v;
}

__device__ __forceinline__ double sum4(float4 v) { return static_cast<double>((v.x + v.y) + (v.z + v.w)); }

}  // namespace vector_sum_detail

// kBlock threads per block; kUnroll 16-byte loads each thread issues before it adds any (bytes in
// flight: kUnroll * 16 per thread). Any grid size works (the loop strides over the grid); the
// workspace holds 4 + 2 * gridDim.x words at least. x needs only the 4-byte alignment of a float:
// up to 3 elements before the first 16-byte boundary and up to 3 after the last whole vector are
// added one by one.
template <int kBlock, int kUnroll>
__global__ void __launch_bounds__(kBlock)
    vector_sum(const float* __restrict__ x, float* __restrict__ y, unsigned* __restrict__ workspace, long long n) {
  static_assert(kBlock >= 32 && kBlock <= 1024 && kBlock % 32 == 0,
                "vector_sum: kBlock must be a multiple of 32 in [32, 1024]");
  static_assert(kUnroll >= 1, "vector_sum: kUnroll must be positive");
  using namespace vector_sum_detail;

  const auto xv = vector_stream::split<float4>(x, n);
  double acc = 0.0;
  vector_stream::for_each_step<kBlock, kUnroll>(xv.vectors, [&](long long first, bool full) {
    float4 v[kUnroll];
    if (full) {
      vector_stream::load_step<kBlock>(xv.data, first, v);
    } else {
#pragma unroll
      for (int j = 0; j < kUnroll; ++j) {
        v[j] = first + j * kBlock < xv.vectors ? __ldcs(xv.data + first + j * kBlock) : make_float4(0.f, 0.f, 0.f, 0.f);
      }
    }
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) acc += sum4(v[j]);
  });
  // The peeled head (threads 0..2) and the tail past the last whole vector (threads 4..6).
  if (blockIdx.x == gridDim.x - 1) {
    const long long tail_start = xv.peel + 4 * xv.vectors;
    const long long t = threadIdx.x;
    if (t < xv.peel) {
      acc += static_cast<double>(x[t]);
    } else if (t >= 4 && t - 4 < n - tail_start) {
      acc += static_cast<double>(x[tail_start + t - 4]);
    }
  }

  __shared__ double scratch[kBlock / 32];
  __shared__ int is_last;
  double* const partials = reinterpret_cast<double*>(workspace + kPartialsWord);
  const double block_total = block_sum<kBlock>(acc, scratch);
  if (threadIdx.x == 0) {
    partials[blockIdx.x] = block_total;
    // The partial reaches L2 before the counter says it is there.
    __threadfence();
    is_last = atomicAdd(workspace + kCounterWord, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!is_last) return;
  __threadfence();
  double total = 0.0;
  // L1 is not coherent across SMs: the other blocks' partials are read from L2.
  for (unsigned b = threadIdx.x; b < gridDim.x; b += kBlock) total += __ldcg(partials + b);
  total = block_sum<kBlock>(total, scratch);
  if (threadIdx.x == 0) {
    y[0] = static_cast<float>(total);
    workspace[kCounterWord] = 0u;
  }
}

}  // namespace gmjit
