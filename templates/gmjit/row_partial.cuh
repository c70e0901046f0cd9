#pragma once
// How the threads that own a row (softmax, rmsnorm, layernorm) merge their partials: a butterfly
// across the warp, and for a block per row one more through shared memory. A partial P travels
// between lanes and through shared memory as a value V (P itself, or what P converts to and is
// assigned from), and comes with three functions, found beside it by argument-dependent lookup:
//   shfl_xor(const P& p, int offset)  the V of the lane `offset` away (__shfl_xor_sync)
//   merge(P& p, const V& q)           p becomes p + q; symmetric, so a butterfly leaves the same
//                                     partial in every lane
//   clear(P& p)                       the empty partial, which merging leaves unchanged

namespace gmjit {
namespace row_partial {

template <typename P>
__device__ __forceinline__ void warp_merge(P& p) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) merge(p, shfl_xor(p, offset));
}

// Every thread of the block ends with the block's partial. scratch holds kWarps values;
// callers alternate between two scratch arrays on consecutive rows, so the next row's writes
// cannot overtake a slow warp's reads of this row without a second barrier (the next row's
// barrier separates them from the row after).
template <int kWarps, typename P, typename V>
__device__ __forceinline__ void block_merge(P& p, V* scratch) {
  warp_merge(p);
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  if (lane == 0) scratch[warp] = p;
  __syncthreads();
  if (lane < kWarps) {
    p = scratch[lane];
  } else {
    clear(p);
  }
  warp_merge(p);
}

// The row's partial in every thread that owns it: a warp (kRowThreads == 32, no barrier) or the
// block, which merges through scratch[parity] (see block_merge).
template <int kRowThreads, int kBlock, typename P, typename V>
__device__ __forceinline__ void row_merge(P& p, V (*scratch)[kBlock / 32], int parity) {
  if constexpr (kRowThreads == 32) {
    warp_merge(p);
  } else {
    block_merge<kBlock / 32>(p, scratch[parity]);
  }
}

// The rows that a thread's warp (kRowThreads == 32) or block owns: kBlock / kRowThreads rows a
// block, the grid striding over them, so any grid covers any row count. The first row is uniform
// across the threads that own it, and so is every later one, so every thread of a row reaches its
// shuffles and barriers.
struct OwnedRows {
  int t;             // the thread's index among the row's owners
  long long stride;  // rows from one to the next
  long long first;   // the first row
};

template <int kRowThreads, int kBlock>
__device__ __forceinline__ OwnedRows owned_rows() {
  constexpr int kRowsPerBlock = kBlock / kRowThreads;
  return OwnedRows{static_cast<int>(threadIdx.x) % kRowThreads, static_cast<long long>(gridDim.x) * kRowsPerBlock,
                   static_cast<long long>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kRowThreads};
}

}  // namespace row_partial
}  // namespace gmjit
