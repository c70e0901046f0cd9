#pragma once
// y = softmax(x) along the last dimension of a row-major rows x cols matrix; fp32 arithmetic for
// every storage type. A memory-bound stream: at best each element is read once and written once.
//
// A row is owned by kRowThreads threads: one warp (short rows, no barriers) or the whole block
// (long rows). Each thread keeps a partial (max m, sum s of e^(x - m)) over its elements; partial
// pairs merge exactly, (m1, s1) + (m2, s2) = (M, s1 e^(m1 - M) + s2 e^(m2 - M)), so the row needs
// a single reduction, and no exponent ever sees a positive argument at any row length.
//
// kCached: the row's slice of each thread (kElems elements) stays in registers between the read
// and the write, so x is read once; the caller guarantees cols <= kRowThreads * kElems.
// Otherwise the row is streamed twice in chunks of kRowThreads * kElems: the first pass keeps a
// running (max, sum), rescaling the sum when the max grows; the second rereads (from L2 when the
// rows in flight fit there) and writes.

#include "gmjit/row_access.cuh"
#include "gmjit/row_partial.cuh"

namespace gmjit {
namespace softmax_detail {

using row_access::address_bits;
using row_access::rows_aligned;
using row_access::load_access;
using row_access::store_access;
using row_partial::owned_rows;

// The lowest finite float, not -inf, starts every partial maximum: merging two empty partials
// then computes e^(lowest - lowest) * 0 = 0, where -inf - -inf would give NaN.
__device__ __forceinline__ float lowest() { return -3.40282347e+38f; }
__device__ __forceinline__ float minus_infinity() { return __int_as_float(static_cast<int>(0xff800000u)); }

// One MUFU.EX2: relative error about 2^-22 (PTX ISA, ex2.approx), far inside the tolerances, and
// the arguments here are never positive, so it cannot overflow. Flushing results below 2^-126 to
// zero changes a sum that is at least 1 by less than 2^-126.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// e^(a - b); a = -inf (a masked element) gives 0.
__device__ __forceinline__ float exp_diff(float a, float b) {
  return exp2_approx((a - b) * 1.44269504088896341f);
}

// A thread's partial (max m, sum s of e^(x - m)) as references to the two floats it is kept in; a
// float2 carries it through shuffles and shared memory.
struct MaxSumRef {
  float& m;
  float& s;
  __device__ __forceinline__ operator float2() const { return make_float2(m, s); }
  __device__ __forceinline__ MaxSumRef& operator=(const float2& q) {
    m = q.x;
    s = q.y;
    return *this;
  }
};

__device__ __forceinline__ void clear(MaxSumRef& p) {
  p.m = lowest();
  p.s = 0.f;
}

// Merges partial (m2, s2) into (m, s). Only the smaller maximum needs rescaling, so one exponent.
__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
  const float hi = fmaxf(m, m2);
  const float d = exp_diff(fminf(m, m2), hi);
  s = m >= m2 ? fmaf(s2, d, s) : fmaf(s, d, s2);
  m = hi;
}

__device__ __forceinline__ void merge(MaxSumRef& p, const float2& q) { merge(p.m, p.s, q.x, q.y); }

__device__ __forceinline__ float2 shfl_xor(const MaxSumRef& p, int offset) {
  return make_float2(__shfl_xor_sync(0xffffffffu, p.m, offset), __shfl_xor_sync(0xffffffffu, p.s, offset));
}

// The butterfly over the slices' pairs (softmax_slice) stays on the two floats: through
// row_partial::warp_merge, NVVM numbered their registers the other way round in kernels that
// inline both slice paths (softmax_split<float, 256, 8, 16, 16, false>), which changed the PTX.
__device__ __forceinline__ void warp_merge(float& m, float& s) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    merge(m, s, __shfl_xor_sync(0xffffffffu, m, offset), __shfl_xor_sync(0xffffffffu, s, offset));
  }
}

// row_partial::row_merge of the partial (m, s) in place. Every merge goes through this one
// function, where NVVM turns the references into register updates before inlining it: merged
// that way the kernels compile to the PTX they had before the merge was shared.
template <int kRowThreads, int kBlock>
__device__ __forceinline__ void row_merge(float& m, float& s, float2 (*scratch)[kBlock / 32], int parity) {
  MaxSumRef p{m, s};
  row_partial::row_merge<kRowThreads, kBlock>(p, scratch, parity);
}

// The partial (m, s) of a thread's elements held in v, which become e^(v - m).
template <int kElems>
__device__ __forceinline__ void exponentiate(float (&v)[kElems], float& m, float& s) {
  m = lowest();
#pragma unroll
  for (int j = 0; j < kElems; ++j) m = fmaxf(m, v[j]);
  s = 0.f;
#pragma unroll
  for (int j = 0; j < kElems; ++j) {
    v[j] = exp_diff(v[j], m);
    s += v[j];
  }
}

// A thread's kElems elements of one chunk: access a of thread t starts at column
// base + (a * kRowThreads + t) * (elements per access), so each access instruction of a warp is
// contiguous. Accesses divide cols, so an access is wholly inside the row or wholly past it;
// elements past it read as -inf, which adds e^-inf = 0 to the sum. One pointer and one bound per
// thread, with compile-time offsets per access: per-access 64-bit addresses would cost two
// registers each (measured with ptxas 13.0: 128 registers and spills for 32 bf16 scalars).
template <typename T, int kRowThreads, int kElems, int kBytes>
__device__ __forceinline__ void load_chunk(const T* __restrict__ row, int cols, int base, int t,
                                           float (&v)[kElems]) {
  constexpr int kPer = kBytes / static_cast<int>(sizeof(T));
  const int first = base + t * kPer;
  const T* __restrict__ p = row + first;
  const int left = cols - first;
#pragma unroll
  for (int a = 0; a < kElems / kPer; ++a) {
    constexpr int kStride = kRowThreads * kPer;
    if (a * kStride < left) {
      load_access<T, kBytes>(p + a * kStride, v + a * kPer);
    } else {
#pragma unroll
      for (int e = 0; e < kPer; ++e) v[a * kPer + e] = minus_infinity();
    }
  }
}

template <typename T, int kRowThreads, int kElems, int kBytes>
__device__ __forceinline__ void store_chunk(T* __restrict__ row, int cols, int base, int t,
                                            const float (&v)[kElems]) {
  constexpr int kPer = kBytes / static_cast<int>(sizeof(T));
  const int first = base + t * kPer;
  T* __restrict__ p = row + first;
  const int left = cols - first;
#pragma unroll
  for (int a = 0; a < kElems / kPer; ++a) {
    constexpr int kStride = kRowThreads * kPer;
    if (a * kStride < left) store_access<T, kBytes>(p + a * kStride, v + a * kPer);
  }
}

// The first pass of a streamed row (or slice): this thread's running (max m, sum s) over its
// elements, chunk by chunk, the sum rescaled when the max grows.
template <typename T, int kThreads, int kElems, int kBytes>
__device__ __forceinline__ void stream_partial(const T* __restrict__ row, int cols, int t, float& m, float& s) {
  constexpr int kChunk = kThreads * kElems;
  float v[kElems];
  m = lowest();
  s = 0.f;
  // Memory-level parallelism comes from kElems; unrolling the chunks as well would only
  // multiply the registers.
#pragma unroll 1
  for (int base = 0; base < cols; base += kChunk) {
    load_chunk<T, kThreads, kElems, kBytes>(row, cols, base, t, v);
    float chunk_m = m;
#pragma unroll
    for (int j = 0; j < kElems; ++j) chunk_m = fmaxf(chunk_m, v[j]);
    s *= exp_diff(m, chunk_m);
    m = chunk_m;
#pragma unroll
    for (int j = 0; j < kElems; ++j) s += exp_diff(v[j], m);
  }
}

// The second pass: rereads the row (from L2 when the rows in flight fit there) and writes
// e^(x - m) * inverse, with the whole row's m and 1 / sum.
template <typename T, int kThreads, int kElems, int kBytes>
__device__ __forceinline__ void stream_normalize(const T* __restrict__ x, T* __restrict__ y, int cols, int t, float m,
                                                 float inverse) {
  constexpr int kChunk = kThreads * kElems;
  float v[kElems];
#pragma unroll 1
  for (int base = 0; base < cols; base += kChunk) {
    load_chunk<T, kThreads, kElems, kBytes>(x, cols, base, t, v);
#pragma unroll
    for (int j = 0; j < kElems; ++j) v[j] = exp_diff(v[j], m) * inverse;
    store_chunk<T, kThreads, kElems, kBytes>(y, cols, base, t, v);
  }
}

template <typename T, int kRowThreads, int kBlock, int kElems, int kBytes, bool kCached>
__device__ __forceinline__ void softmax_rows(const T* __restrict__ x, T* __restrict__ y, long long rows,
                                             int cols, float2 (*scratch)[kBlock / 32]) {
  const auto [t, stride, first] = owned_rows<kRowThreads, kBlock>();
  int parity = 0;
  for (long long row = first; row < rows; row += stride, parity ^= 1) {
    const T* __restrict__ xr = x + row * cols;
    T* __restrict__ yr = y + row * cols;
    if constexpr (kCached) {
      float v[kElems];
      load_chunk<T, kRowThreads, kElems, kBytes>(xr, cols, 0, t, v);
      float m, s;
      exponentiate(v, m, s);
      // The registers hold e^(x - m) for this thread's own m; one factor per thread rescales
      // them to e^(x - M) / S.
      float row_m = m, row_s = s;
      row_merge<kRowThreads, kBlock>(row_m, row_s, scratch, parity);
      const float scale = exp_diff(m, row_m) / row_s;
#pragma unroll
      for (int j = 0; j < kElems; ++j) v[j] *= scale;
      store_chunk<T, kRowThreads, kElems, kBytes>(yr, cols, 0, t, v);
    } else {
      float m, s;
      stream_partial<T, kRowThreads, kElems, kBytes>(xr, cols, t, m, s);
      row_merge<kRowThreads, kBlock>(m, s, scratch, parity);
      stream_normalize<T, kRowThreads, kElems, kBytes>(xr, yr, cols, t, m, 1.f / s);
    }
  }
}

// The rare path of offset pointers, kept small and out of line: streaming works at any row
// length, and inlined beside the main path it sets the register allocation of the whole kernel
// (measured with ptxas 13.0: spills at 48 registers, or twice the main path's registers for a
// full copy of it).
template <typename T, int kRowThreads, int kBlock>
__device__ __noinline__ void softmax_rows_unaligned(const T* __restrict__ x, T* __restrict__ y, long long rows,
                                                    int cols, float2 (*scratch)[kBlock / 32]) {
  softmax_rows<T, kRowThreads, kBlock, 4, static_cast<int>(sizeof(T)), false>(x, y, rows, cols, scratch);
}

// A row split over kSplit blocks, one slice each, held in registers (kCached) or streamed twice.
// Each block publishes its slice's (max, sum) in the workspace and waits for the row's other
// slices, so a row longer than a block's registers is read from DRAM once: cached, the slice
// stays in registers; streamed, it is reread from L2 where the slices in flight fit there, and
// the smaller register footprint lets more blocks per SM keep loads in flight through the waits.
// The workspace (zeroed once) holds a ticket counter, then per row an arrival count and kSplit
// pairs.
//
// Slices are handed out in ticket order, not by blockIdx: a block only ever waits for slices of
// its own row, which are taken by blocks that already run or by the next blocks to start, so the
// wait cannot deadlock while kSplit blocks fit the GPU at once. A row's arrival count only grows,
// by 32 a launch whatever kSplit (each slice adds 32 / kSplit), so a block's own arrival tells it
// which multiple of 32 completes its row, also on a workspace that launches of another kSplit
// used before, and neither a reset nor wrapping at 2^32 disturbs it.
struct SplitWorkspace {
  unsigned* tickets;
  unsigned* arrivals;
  float2* pairs;
  __device__ SplitWorkspace(unsigned* words, long long rows)
      : tickets(words), arrivals(words + 2), pairs(reinterpret_cast<float2*>(words + 2 + ((rows + 1) & ~1ll))) {}
};

__device__ __forceinline__ unsigned load_acquire(const unsigned* address) {
  unsigned value;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(value) : "l"(address) : "memory");
  return value;
}

template <typename T, int kBlock, int kElems, int kBytes, int kSplit, bool kCached>
__device__ __forceinline__ void softmax_slice(const T* __restrict__ x, T* __restrict__ y, unsigned* __restrict__ words,
                                              long long rows, int cols, float2 (*scratch)[kBlock / 32]) {
  constexpr int kPer = kBytes / static_cast<int>(sizeof(T));
  __shared__ unsigned ticket_shared;
  __shared__ float2 row_shared;
  const SplitWorkspace workspace(words, rows);
  const int t = static_cast<int>(threadIdx.x);
  if (t == 0) {
    const unsigned ticket = atomicAdd(workspace.tickets, 1u);
    // Every block takes exactly one ticket, so the last one is taken after all the others.
    if (ticket == static_cast<unsigned>(rows * kSplit) - 1u) atomicExch(workspace.tickets, 0u);
    ticket_shared = ticket;
  }
  __syncthreads();
  const long long row = ticket_shared / kSplit;
  const int part = static_cast<int>(ticket_shared % kSplit);
  // Slices are whole accesses, so each starts on an access boundary.
  const int span = (cols + kSplit * kPer - 1) / (kSplit * kPer) * kPer;
  const int begin = part * span;
  const int length = max(0, min(span, cols - begin));
  const T* __restrict__ xs = x + row * cols + begin;
  T* __restrict__ ys = y + row * cols + begin;
  float v[kCached ? kElems : 1];
  float m, s;
  if constexpr (kCached) {
    load_chunk<T, kBlock, kElems, kBytes>(xs, length, 0, t, v);
    exponentiate(v, m, s);
  } else {
    stream_partial<T, kBlock, kElems, kBytes>(xs, length, t, m, s);
  }
  float slice_m = m, slice_s = s;
  row_merge<kBlock, kBlock>(slice_m, slice_s, scratch, 0);
  if (t < 32) {
    float2* pairs = workspace.pairs + row * kSplit;
    unsigned* arrivals = workspace.arrivals + row;
    unsigned generation = 0;
    if (t == 0) {
      pairs[part] = make_float2(slice_m, slice_s);
      __threadfence();  // the pair is visible before the arrival that announces it
      const unsigned before = atomicAdd(arrivals, 32u / kSplit);
      generation = before - before % 32u;
    }
    generation = __shfl_sync(0xffffffffu, generation, 0);
    // Each lane acquires the count itself, so its read of a pair below is ordered after it.
    while (load_acquire(arrivals) - generation < 32u) {
    }
    float row_m = lowest(), row_s = 0.f;
    if (t < kSplit) {
      const float2 pair = __ldcg(pairs + t);
      row_m = pair.x;
      row_s = pair.y;
    }
    warp_merge(row_m, row_s);
    if (t == 0) row_shared = make_float2(row_m, row_s);
  }
  __syncthreads();
  if constexpr (kCached) {
    const float scale = exp_diff(m, row_shared.x) / row_shared.y;
#pragma unroll
    for (int j = 0; j < kElems; ++j) v[j] *= scale;
    store_chunk<T, kBlock, kElems, kBytes>(ys, length, 0, t, v);
  } else {
    // From L2 where the slices in flight fit it. Measured on the H200 at 4096 x 393216 fp32 (split
    // 32): blocks of 1024 (13 MB in flight) 4.10 ms, blocks of 256 (52 MB) 4.53 ms, the cached
    // slices 3.74 ms.
    stream_normalize<T, kBlock, kElems, kBytes>(xs, ys, length, t, row_shared.x, 1.f / row_shared.y);
  }
}

}  // namespace softmax_detail

// T is float or __nv_bfloat16. kRowThreads is 32 (a warp per row) or kBlock (a block per row).
// kElems: elements per thread per pass (see above). kVecBytes: bytes per access, at least
// sizeof(T) and at most kElems * sizeof(T); where cols * sizeof(T) or either pointer is not a
// multiple of it, the kernel falls back to streaming single-element accesses (correct, slower).
// Always: cols + kRowThreads * kElems < 2^31. The grid strides over rows, so any grid works.
template <typename T, int kRowThreads, int kBlock, int kElems, int kVecBytes, bool kCached>
__global__ void __launch_bounds__(kBlock)
    softmax(const T* __restrict__ x, T* __restrict__ y, unsigned* __restrict__, long long rows, int cols) {
  using namespace softmax_detail;
  row_access::check_row_kernel<T, kRowThreads, kBlock, kElems, kVecBytes>();

  // Only the block-per-row reduction uses it; two arrays, alternating by row (see
  // row_partial::block_merge).
  __shared__ float2 scratch[kRowThreads == 32 ? 1 : 2][kBlock / 32];
  constexpr int kBytes = static_cast<int>(sizeof(T));
  if constexpr (kVecBytes == kBytes) {
    softmax_rows<T, kRowThreads, kBlock, kElems, kBytes, kCached>(x, y, rows, cols, scratch);
  } else {
    if (rows_aligned<kVecBytes, T>(address_bits(x) | address_bits(y), cols)) {
      softmax_rows<T, kRowThreads, kBlock, kElems, kVecBytes, kCached>(x, y, rows, cols, scratch);
    } else {
      softmax_rows_unaligned<T, kRowThreads, kBlock>(x, y, rows, cols, scratch);
    }
  }
}

// The same softmax with each row split over kSplit blocks (see softmax_slice): one block per
// slice, rows * kSplit blocks; a slice of at most kBlock * kElems elements when kCached, of any
// length streamed. kSplit is a power of two up to 32 and must not exceed the blocks the GPU runs
// at once. The workspace holds 2 + rows (rounded up to even) + 2 * kSplit * rows words, zeroed
// before the first launch.
template <typename T, int kBlock, int kElems, int kVecBytes, int kSplit, bool kCached>
__global__ void __launch_bounds__(kBlock)
    softmax_split(const T* __restrict__ x, T* __restrict__ y, unsigned* __restrict__ workspace, long long rows,
                  int cols) {
  using namespace softmax_detail;
  static_assert(kSplit >= 2 && kSplit <= 32 && (kSplit & (kSplit - 1)) == 0,
                "softmax_split: kSplit must be a power of two in [2, 32]");
  static_assert(kBlock >= 32 && kBlock <= 1024 && kBlock % 32 == 0,
                "softmax_split: kBlock must be a multiple of 32 in [32, 1024]");
  static_assert(kElems >= 1 && kElems * static_cast<int>(sizeof(T)) % kVecBytes == 0,
                "softmax_split: kElems must be whole accesses of kVecBytes");
  __shared__ float2 scratch[1][kBlock / 32];
  constexpr int kBytes = static_cast<int>(sizeof(T));
  if constexpr (kVecBytes == kBytes) {
    softmax_slice<T, kBlock, kElems, kBytes, kSplit, kCached>(x, y, workspace, rows, cols, scratch);
  } else {
    if (rows_aligned<kVecBytes, T>(address_bits(x) | address_bits(y), cols)) {
      softmax_slice<T, kBlock, kElems, kVecBytes, kSplit, kCached>(x, y, workspace, rows, cols, scratch);
    } else {
      softmax_slice<T, kBlock, kElems, kBytes, kSplit, kCached>(x, y, workspace, rows, cols, scratch);
    }
  }
}

}  // namespace gmjit
