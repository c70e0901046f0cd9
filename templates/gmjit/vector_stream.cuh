#pragma once
// How the persistent reductions (vector_sum, histogram) stream x: 16-byte vectors from its first
// 16-byte boundary on, in block steps of kBlock * kUnroll vectors over which the grid strides.
// The elements before that boundary (the peel) and after the last whole vector are left to the
// caller.

namespace gmjit {
namespace vector_stream {

// x (n elements of T) split at its first 16-byte boundary.
template <typename V>
struct Split {
  long long peel;     // elements before the boundary, at most n
  long long vectors;  // whole 16-byte vectors from the boundary on
  const V* data;      // the first of them
};

template <typename V, typename T>
__device__ __forceinline__ Split<V> split(const T* x, long long n) {
  constexpr int kPer = 16 / static_cast<int>(sizeof(T));
  const unsigned misaligned =
      static_cast<unsigned>(reinterpret_cast<unsigned long long>(x) & 15u) / static_cast<unsigned>(sizeof(T));
  long long peel = misaligned == 0 ? 0 : kPer - misaligned;
  if (peel > n) peel = n;
  return Split<V>{peel, (n - peel) / kPer, reinterpret_cast<const V*>(x + peel)};
}

// Calls step(first, full) for each block step this block takes: `first` is this thread's first
// vector of the step, its others follow kBlock vectors apart; only a block's last step can be
// partial (full false), so full steps can issue their loads unpredicated.
template <int kBlock, int kUnroll, typename Step>
__device__ __forceinline__ void for_each_step(long long vectors, Step&& step) {
  constexpr long long kPerStep = static_cast<long long>(kBlock) * kUnroll;
  const long long grid_step = static_cast<long long>(gridDim.x) * kPerStep;
  for (long long base = static_cast<long long>(blockIdx.x) * kPerStep; base < vectors; base += grid_step) {
    step(base + threadIdx.x, base + kPerStep <= vectors);
  }
}

// This thread's kUnroll vectors of a full step, streamed (x is read once).
template <int kBlock, int kUnroll, typename V>
__device__ __forceinline__ void load_step(const V* __restrict__ data, long long first, V (&v)[kUnroll]) {
#pragma unroll
  for (int j = 0; j < kUnroll; ++j) v[j] = __ldcs(data + first + j * kBlock);
}

}  // namespace vector_stream
}  // namespace gmjit
