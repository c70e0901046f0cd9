#pragma once
// The skinny-M path of gemm (M <= 16, LLM decode): C (M x N) = A (M x K) * B on CUDA cores, fp32
// accumulation, C in the input dtype (bf16 or fp16). At M <= 16 a GEMM moves about M flops per
// byte of B, far under the H200's ~200 flops per byte of HBM, so it is a bandwidth problem: the
// design keeps many 16-byte loads of B in flight per thread and splits K across the grid's z
// dimension so that even N = 4096 fills the 132 SMs. A (M x K, at most 16 rows) is small and read
// through L1/L2 by every block; B is read once, with loads that do not allocate in L1.
//
// kTransB true (B is N x K, the weight layout, the main case): a warp owns kCols columns of C,
// i.e. kCols contiguous rows of B; its lanes stride along k in 16-byte vectors (8 elements), each
// lane with kUnroll vectors per column in flight, and a warp shuffle sums the lanes.
// kTransB false (B is K x N): a block owns 256 columns of C, a lane 8 of them (one 16-byte vector
// of a row of B, so a warp reads 512 contiguous bytes of a row), and the warps of the block take
// interleaved rows of B, kUnroll rows in flight per lane; the warps' sums meet in shared memory.
//
// Split-K (gridDim.z > 1, a launch choice: one compiled kernel serves every split): block z takes the k-slice [z * S, min(K, (z + 1) * S)) with S a multiple
// of 8 (vectors stay aligned). Every block adds its partial sums to a fp32 workspace of M * N
// floats (atomically), then bumps a counter that follows them (one unsigned per block in x; the
// layout reserves ceil(M/16) * ceil(N/16), and a block covers at least 16 columns); the block
// that arrives last reads its outputs back with atomicExch(0), writes C and resets the counter,
// so the workspace is all zeros again after every launch, as gemm_mma leaves it.
//
// kAligned: the caller guarantees K % 8 == 0, N % 8 == 0 and 16-byte aligned A and B; without it
// every load is a scalar one (coalesced across the warp).
//
// Measured on an H200 (a standalone harness against a double host reference: 664 cases of both
// dtypes and layouts, m 1-16, unaligned and split shapes, all within the descriptor's bounds and
// the workspace all zeros after each launch): 1 x 16384 x 4096 bf16, trans_b=1, 8 warps x 2
// columns x 4 vectors in flight, 34.6 us = 3.88 TB/s of B (81% of HBM3e's 4.8); trans_b=0 with
// split 4, 2.88 TB/s. ptxas 13.0 for sm_90a: at most 254 registers and no spill over every valid
// configuration (16 rows with 8 vectors per column in flight spill; the descriptor rejects them).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace gmjit {
namespace gemm_skinny_detail {

// Enumerators rather than constexpr variables: NVRTC emits namespace-scope constants as device
// globals.
enum : int { kVec = 8, kWarpSize = 32, kColsPerBlockN = kWarpSize * kVec };

__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// B is read once: keep it out of L1 so that A, which every warp re-reads, stays there.
__device__ __forceinline__ uint4 load_stream(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

template <typename T>
__device__ __forceinline__ void widen(const uint4& v, float (&f)[kVec]) {
  const T* e = reinterpret_cast<const T*>(&v);
#pragma unroll
  for (int i = 0; i < kVec; ++i) f[i] = to_float(e[i]);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// The k-slice of block z: a multiple of 8 elements long, clipped to K (empty when z * S >= K).
__device__ __forceinline__ void k_slice(int K, int& k0, int& k1) {
  const int split = static_cast<int>(gridDim.z);
  const int vectors = (K + kVec - 1) / kVec;
  const int per = (vectors + split - 1) / split * kVec;
  k0 = static_cast<int>(blockIdx.z) * per;
  k1 = min(K, k0 + per);
  if (k0 > K) k0 = K;
}

// The last-arriver protocol of split-K (see the opening comment). Every thread of the block
// calls it after adding its partials to the workspace; the block that arrives last writes
// C[m, col0 .. col0 + cols) for m < M and leaves the workspace zeroed.
template <typename T>
__device__ __forceinline__ void finish_split(float* workspace, T* C, int M, int N, int col0, int cols) {
  __shared__ unsigned last;
  unsigned* counters = reinterpret_cast<unsigned*>(workspace + static_cast<long long>(M) * N);
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(&counters[blockIdx.x], 1u) == gridDim.z - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  for (int i = threadIdx.x; i < M * cols; i += blockDim.x) {
    const int m = i / cols, col = col0 + i % cols;
    if (col >= N) continue;
    const long long at = static_cast<long long>(m) * N + col;
    C[at] = from_float<T>(atomicExch(&workspace[at], 0.0f));
  }
  if (threadIdx.x == 0) counters[blockIdx.x] = 0u;
}

template <typename T>
__device__ __forceinline__ void put(T* C, float* workspace, long long at, float value) {
  if (gridDim.z == 1) {
    C[at] = from_float<T>(value);
  } else {
    atomicAdd(&workspace[at], value);
  }
}

}  // namespace gemm_skinny_detail

// Block: kWarps * 32 threads. Grid: x = ceil(N / (kWarps * kCols)) when kTransB, else
// ceil(N / 256); y = 1; z = the split. No dynamic shared memory. kMTile >= M (a power of two up to
// 16: the rows of C a thread accumulates). M * K, N * K and M * N below 2^31.
template <typename T, bool kTransB, int kMTile, int kWarps, int kCols, int kUnroll, bool kAligned>
__global__ void __launch_bounds__(kWarps * 32)
    gemm_skinny(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C, float* workspace, int M, int N,
                int K) {
  using namespace gemm_skinny_detail;
  static_assert(kMTile == 1 || kMTile == 2 || kMTile == 4 || kMTile == 8 || kMTile == 16,
                "gemm_skinny: kMTile must be 1, 2, 4, 8 or 16");
  static_assert(kWarps >= 1 && kWarps <= 32, "gemm_skinny: 1 to 32 warps");
  static_assert(kUnroll >= 1 && kUnroll <= 16, "gemm_skinny: kUnroll must be 1 to 16");

  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  int k0, k1;
  k_slice(K, k0, k1);

  if (kTransB) {
    const int block_col0 = static_cast<int>(blockIdx.x) * kWarps * kCols;
    const int col0 = block_col0 + warp * kCols;
    float acc[kMTile][kCols];
#pragma unroll
    for (int m = 0; m < kMTile; ++m) {
#pragma unroll
      for (int c = 0; c < kCols; ++c) acc[m][c] = 0.0f;
    }
    // A column past N reads row 0 of B instead (always there) and is never written.
    const T* rows[kCols];
#pragma unroll
    for (int c = 0; c < kCols; ++c) rows[c] = B + static_cast<long long>(col0 + c < N ? col0 + c : 0) * K;

    if (kAligned) {
      const int v1 = k1 / kVec;
      for (int v = k0 / kVec + lane; v < v1; v += kWarpSize * kUnroll) {
        uint4 w[kUnroll][kCols];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int at = v + u * kWarpSize;
#pragma unroll
          for (int c = 0; c < kCols; ++c) {
            w[u][c] = at < v1 ? load_stream(rows[c] + static_cast<long long>(at) * kVec) : make_uint4(0, 0, 0, 0);
          }
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int at = v + u * kWarpSize;
          if (at >= v1) break;
          float wf[kCols][kVec];
#pragma unroll
          for (int c = 0; c < kCols; ++c) widen<T>(w[u][c], wf[c]);
#pragma unroll
          for (int m = 0; m < kMTile; ++m) {
            if (m >= M) break;
            float af[kVec];
            widen<T>(__ldg(reinterpret_cast<const uint4*>(A + static_cast<long long>(m) * K) + at), af);
#pragma unroll
            for (int c = 0; c < kCols; ++c) {
#pragma unroll
              for (int e = 0; e < kVec; ++e) acc[m][c] = fmaf(af[e], wf[c][e], acc[m][c]);
            }
          }
        }
      }
    } else {
      for (int k = k0 + lane; k < k1; k += kWarpSize * kUnroll) {
        T w[kUnroll][kCols];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int at = k + u * kWarpSize;
#pragma unroll
          for (int c = 0; c < kCols; ++c) w[u][c] = at < k1 ? rows[c][at] : from_float<T>(0.0f);
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int at = k + u * kWarpSize;
          if (at >= k1) break;
#pragma unroll
          for (int m = 0; m < kMTile; ++m) {
            if (m >= M) break;
            const float a = to_float(A[static_cast<long long>(m) * K + at]);
#pragma unroll
            for (int c = 0; c < kCols; ++c) acc[m][c] = fmaf(a, to_float(w[u][c]), acc[m][c]);
          }
        }
      }
    }

#pragma unroll
    for (int m = 0; m < kMTile; ++m) {
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
        const float sum = warp_sum(acc[m][c]);
        if (lane == 0 && m < M && col0 + c < N) put<T>(C, workspace, static_cast<long long>(m) * N + col0 + c, sum);
      }
    }
    // A split needs kWarps * kCols >= 16: one counter per block of the ceil(N/16) reserved.
    if (gridDim.z > 1) finish_split<T>(workspace, C, M, N, block_col0, kWarps * kCols);
  } else {
    // Lane l owns columns col0 + l * 8 .. + 8 (aligned) or col0 + l + 32 * e (scalar), e < 8.
    const int col0 = static_cast<int>(blockIdx.x) * kColsPerBlockN;
    __shared__ float sums[kMTile][kColsPerBlockN];
    for (int i = threadIdx.x; i < kMTile * kColsPerBlockN; i += blockDim.x) sums[i / kColsPerBlockN][i % kColsPerBlockN] = 0.0f;

    float acc[kMTile][kVec];
#pragma unroll
    for (int m = 0; m < kMTile; ++m) {
#pragma unroll
      for (int e = 0; e < kVec; ++e) acc[m][e] = 0.0f;
    }
    int col_of[kVec];
#pragma unroll
    for (int e = 0; e < kVec; ++e) col_of[e] = kAligned ? col0 + lane * kVec + e : col0 + lane + kWarpSize * e;
    // Aligned: N % 8 == 0, so a vector is wholly inside or wholly past N.
    const bool vector_inside = col_of[0] < N;

    for (int k = k0 + warp; k < k1; k += kWarps * kUnroll) {
      float bf[kUnroll][kVec];
      if (kAligned) {
        uint4 b[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int row = k + u * kWarps;
          b[u] = row < k1 && vector_inside ? load_stream(B + static_cast<long long>(row) * N + col_of[0])
                                           : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) widen<T>(b[u], bf[u]);
      } else {
        T b[kUnroll][kVec];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int row = k + u * kWarps;
#pragma unroll
          for (int e = 0; e < kVec; ++e) {
            b[u][e] = row < k1 && col_of[e] < N ? B[static_cast<long long>(row) * N + col_of[e]] : from_float<T>(0.0f);
          }
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
          for (int e = 0; e < kVec; ++e) bf[u][e] = to_float(b[u][e]);
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int row = k + u * kWarps;
        if (row >= k1) break;
#pragma unroll
        for (int m = 0; m < kMTile; ++m) {
          if (m >= M) break;
          const float a = to_float(A[static_cast<long long>(m) * K + row]);
#pragma unroll
          for (int e = 0; e < kVec; ++e) acc[m][e] = fmaf(a, bf[u][e], acc[m][e]);
        }
      }
    }

    __syncthreads();
#pragma unroll
    for (int m = 0; m < kMTile; ++m) {
      if (m >= M) break;
#pragma unroll
      for (int e = 0; e < kVec; ++e) atomicAdd(&sums[m][col_of[e] - col0], acc[m][e]);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < M * kColsPerBlockN; i += blockDim.x) {
      const int m = i / kColsPerBlockN, col = col0 + i % kColsPerBlockN;
      if (col < N) put<T>(C, workspace, static_cast<long long>(m) * N + col, sums[m][i % kColsPerBlockN]);
    }
    if (gridDim.z > 1) finish_split<T>(workspace, C, M, N, col0, kColsPerBlockN);
  }
}

}  // namespace gmjit
