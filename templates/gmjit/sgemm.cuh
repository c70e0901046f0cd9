#pragma once
// CUDA-core fp32 GEMM with 2-D register blocking (the SGEMM_CUDA kernel 6/7 design): a block
// computes a kBM x kBN tile of C, each thread a kTM x kTN sub-tile held in registers, fed from
// shared-memory tiles of A (stored transposed) and B through float4 reads.
//
// Shared memory holds kStages stages of [A^T: kBK x (kBM + kAPad)][B: kBK x kBN] floats, with
// kStages = 2 when two stages fit in 48 KiB and 1 otherwise. The next k-tile's global loads are
// issued into registers before the current tile is computed, so their latency hides behind the
// FMAs either way; two stages also save one __syncthreads per k-tile.

namespace gmjit {
namespace sgemm_detail {

// Keeps the rows of A^T 16-byte aligned for float4 reads while shifting consecutive rows by four
// banks, which makes the transposing scalar stores of A conflict-free (see a_* mapping below).
// Enumerators rather than constexpr variables (here and below): NVRTC emits namespace-scope and
// static member constants as device globals.
enum : int { kAPad = 4, kSmemLimitBytes = 48 * 1024 };

__host__ __device__ constexpr int stage_floats(int bm, int bn, int bk) {
  return bk * (bm + kAPad + bn);
}

__host__ __device__ constexpr int stages(int bm, int bn, int bk) {
  return 2 * stage_floats(bm, bn, bk) * static_cast<int>(sizeof(float)) <= kSmemLimitBytes ? 2 : 1;
}

__host__ __device__ constexpr int smem_bytes(int bm, int bn, int bk) {
  return stages(bm, bn, bk) * stage_floats(bm, bn, bk) * static_cast<int>(sizeof(float));
}

__host__ __device__ constexpr bool is_pow2(int x) { return x > 0 && (x & (x - 1)) == 0; }

// Splits access index v = tid + pass * kStride (0 <= tid < kStride) into v / kDiv and v % kDiv as
// a per-thread base plus a per-pass constant. Block sizes and tile extents are powers of two, so
// one of kStride, kDiv divides the other and no per-pass division or register is needed.
template <int kStride, int kDiv>
struct PassSplit {
  static_assert(kStride % kDiv == 0 || kDiv % kStride == 0, "PassSplit: strides must nest");
  enum : bool { kWhole = kStride % kDiv == 0 };
  __device__ __forceinline__ static int div_base(int tid) { return kWhole ? tid / kDiv : 0; }
  __device__ __forceinline__ static int mod_base(int tid) { return kWhole ? tid % kDiv : tid; }
  __host__ __device__ static constexpr int div_step(int pass) {
    return kWhole ? pass * (kStride / kDiv) : pass * kStride / kDiv;
  }
  __host__ __device__ static constexpr int mod_step(int pass) {
    return kWhole ? 0 : pass * kStride % kDiv;
  }
};

}  // namespace sgemm_detail

// C (MxN) = A (MxK) * B (KxN), all row-major fp32, fp32 accumulation. Block = (kBM/kTM)*(kBN/kTN)
// threads, 1-D threadIdx.x. Grid: x = ceil(N / kBN), y = ceil(M / kBM). Static shared memory only.
// kVecLoads: the caller guarantees K % 4 == 0, N % 4 == 0 and 16-byte aligned A, B, C.
// kEvenTiles: the caller guarantees M % kBM == 0, N % kBN == 0, K % kBK == 0.
// Always: kBM * K and kBK * N below 2^31 (in-tile offsets are 32-bit).
template <int kBM, int kBN, int kBK, int kTM, int kTN, bool kVecLoads, bool kEvenTiles>
__global__ void __launch_bounds__((kBM / kTM) * (kBN / kTN))
    sgemm(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M,
          int N, int K) {
  using namespace sgemm_detail;

  static_assert(kBM == 32 || kBM == 64 || kBM == 128, "sgemm: kBM must be 32, 64 or 128");
  static_assert(kBN == 32 || kBN == 64 || kBN == 128, "sgemm: kBN must be 32, 64 or 128");
  static_assert(kBK == 8 || kBK == 16 || kBK == 32, "sgemm: kBK must be 8, 16 or 32");
  static_assert(kTM == 4 || kTM == 8, "sgemm: kTM must be 4 or 8");
  static_assert(kTN == 4 || kTN == 8, "sgemm: kTN must be 4 or 8");

  constexpr int kThreadsN = kBN / kTN;
  constexpr int kThreadsM = kBM / kTM;
  constexpr int kThreads = kThreadsM * kThreadsN;
  static_assert(kThreads >= 32 && kThreads <= 1024,
                "sgemm: (kBM/kTM)*(kBN/kTN) must be in [32, 1024]");
  static_assert(is_pow2(kThreads), "sgemm: the load mappings assume a power-of-two block");

  // A thread's kTM x kTN sub-tile is split into 4 x 4 pieces spaced kMSpan rows and kNSpan columns
  // apart, so that a warp's float4 shared-memory reads and float4 stores of C are contiguous.
  constexpr int kMSpan = kThreadsM * 4;
  constexpr int kNSpan = kThreadsN * 4;

  constexpr int kW = kVecLoads ? 4 : 1;  // floats per global access
  constexpr int kAStride = kBM + kAPad;
  constexpr int kStages = stages(kBM, kBN, kBK);
  constexpr int kStageFloats = stage_floats(kBM, kBN, kBK);
  static_assert(smem_bytes(kBM, kBN, kBK) <= kSmemLimitBytes, "sgemm: shared memory over 48 KiB");

  // A tile: consecutive threads cover 8 consecutive k (one 32-byte sector) of a row, then the next
  // rows. Stored transposed with the padded stride, a warp's 32 scalar stores then hit 32 banks.
  constexpr int kARun = 8 / kW;
  constexpr int kARowStep = kThreads / kARun;
  constexpr int kAAccesses = kBM * kBK / kW;
  constexpr int kAPasses = (kAAccesses + kThreads - 1) / kThreads;
  // B tile: plain row-major copy, consecutive threads along n.
  constexpr int kBRow = kBN / kW;
  constexpr int kBAccesses = kBK * kBN / kW;
  constexpr int kBPasses = (kBAccesses + kThreads - 1) / kThreads;
  // Powers of two: either the accesses split evenly or there is a single, partial pass.
  static_assert(kAAccesses % kThreads == 0 || kAPasses == 1, "sgemm: uneven A passes");
  static_assert(kBAccesses % kThreads == 0 || kBPasses == 1, "sgemm: uneven B passes");
  // Beyond 48 staged floats next to kTM * kTN accumulators, small blocks run into the
  // 255-register limit and spill.
  static_assert((kBM + kBN) * kBK <= 48 * kThreads,
                "sgemm: (kBM+kBN)*kBK/threads must be <= 48 (next-tile staging registers)");

  __shared__ __align__(16) float smem[kStages * kStageFloats];

  const int tid = static_cast<int>(threadIdx.x);
  const int tc = tid % kThreadsN;
  const int tr = tid / kThreadsN;
  const int block_m = static_cast<int>(blockIdx.y) * kBM;
  const int block_n = static_cast<int>(blockIdx.x) * kBN;

  // Each thread's first access of a tile is (a_m0, a_k0) in A and (b_k0, b_n0) in B; later passes
  // add compile-time offsets.
  using ASplit = PassSplit<kARowStep, kBM>;  // splits the row-group index tid / kARun
  using BSplit = PassSplit<kThreads, kBRow>;
  const int a_group = tid / kARun;
  const int a_m0 = ASplit::mod_base(a_group);
  const int a_k0 = ASplit::div_base(a_group) * 8 + (tid % kARun) * kW;
  const int b_k0 = BSplit::div_base(tid);
  const int b_n0 = BSplit::mod_base(tid) * kW;
  // Past a single, partial pass a thread has nothing to move.
  const bool a_moves = kAAccesses % kThreads == 0 || tid < kAAccesses;
  const bool b_moves = kBAccesses % kThreads == 0 || tid < kBAccesses;
  const int rows_left = M - block_m;
  const int cols_left = N - block_n;

  const float* __restrict__ a_thread = A + static_cast<long long>(block_m + a_m0) * K + a_k0;
  const float* __restrict__ b_thread = B + static_cast<long long>(b_k0) * N + block_n + b_n0;

  // Next k-tile, staged in registers; out-of-range elements are zeros so they add nothing.
  float a_next[kAPasses][kW];
  float b_next[kBPasses][kW];

  // Predicated rather than branched on `valid`: behind a branch the compiler sinks the loads to
  // their stores after the FMAs, which would expose their full latency.
  auto load_tile = [&](int tile, bool valid) {
    const int k0 = tile * kBK;
    const int k_left = K - k0;
    const float* __restrict__ a_tile = a_thread + k0;
    const float* __restrict__ b_tile = b_thread + static_cast<long long>(k0) * N;
#pragma unroll
    for (int p = 0; p < kAPasses; ++p) {
      const int dm = ASplit::mod_step(p);
      const int dk = ASplit::div_step(p) * 8;
      // K % 4 == 0 under kVecLoads, so a float4 starting inside K lies wholly inside.
      const bool ok =
          valid && a_moves && (kEvenTiles || (a_m0 + dm < rows_left && a_k0 + dk < k_left));
      const float* __restrict__ src = a_tile + (dm * K + dk);
      if constexpr (kVecLoads) {
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (ok) v = __ldg(reinterpret_cast<const float4*>(src));
        a_next[p][0] = v.x;
        a_next[p][1] = v.y;
        a_next[p][2] = v.z;
        a_next[p][3] = v.w;
      } else {
        a_next[p][0] = ok ? __ldg(src) : 0.f;
      }
    }
#pragma unroll
    for (int p = 0; p < kBPasses; ++p) {
      const int dk = BSplit::div_step(p);
      const int dn = BSplit::mod_step(p) * kW;
      // N % 4 == 0 under kVecLoads, so a float4 starting inside N lies wholly inside.
      const bool ok =
          valid && b_moves && (kEvenTiles || (b_k0 + dk < k_left && b_n0 + dn < cols_left));
      const float* __restrict__ src = b_tile + (dk * N + dn);
      if constexpr (kVecLoads) {
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (ok) v = __ldg(reinterpret_cast<const float4*>(src));
        b_next[p][0] = v.x;
        b_next[p][1] = v.y;
        b_next[p][2] = v.z;
        b_next[p][3] = v.w;
      } else {
        b_next[p][0] = ok ? __ldg(src) : 0.f;
      }
    }
  };

  auto store_tile = [&](int stage) {
    float* __restrict__ as = smem + stage * kStageFloats + a_k0 * kAStride + a_m0;
    float* __restrict__ bs = smem + stage * kStageFloats + kBK * kAStride + b_k0 * kBN + b_n0;
    if (a_moves) {
#pragma unroll
      for (int p = 0; p < kAPasses; ++p) {
        const int dm = ASplit::mod_step(p);
        const int dk = ASplit::div_step(p) * 8;
#pragma unroll
        for (int e = 0; e < kW; ++e) as[(dk + e) * kAStride + dm] = a_next[p][e];
      }
    }
    if (b_moves) {
#pragma unroll
      for (int p = 0; p < kBPasses; ++p) {
        const int dk = BSplit::div_step(p);
        const int dn = BSplit::mod_step(p) * kW;
        if constexpr (kVecLoads) {
          *reinterpret_cast<float4*>(bs + dk * kBN + dn) =
              make_float4(b_next[p][0], b_next[p][1], b_next[p][2], b_next[p][3]);
        } else {
          bs[dk * kBN + dn] = b_next[p][0];
        }
      }
    }
  };

  float acc[kTM][kTN];
#pragma unroll
  for (int i = 0; i < kTM; ++i) {
#pragma unroll
    for (int j = 0; j < kTN; ++j) acc[i][j] = 0.f;
  }

  auto compute_tile = [&](int stage) {
    const float* __restrict__ as = smem + stage * kStageFloats + tr * 4;
    const float* __restrict__ bs = smem + stage * kStageFloats + kBK * kAStride + tc * 4;
#pragma unroll
    for (int k = 0; k < kBK; ++k) {
      float a_frag[kTM];
      float b_frag[kTN];
#pragma unroll
      for (int p = 0; p < kTM / 4; ++p) {
        const float4 v = *reinterpret_cast<const float4*>(as + k * kAStride + p * kMSpan);
        a_frag[p * 4 + 0] = v.x;
        a_frag[p * 4 + 1] = v.y;
        a_frag[p * 4 + 2] = v.z;
        a_frag[p * 4 + 3] = v.w;
      }
#pragma unroll
      for (int q = 0; q < kTN / 4; ++q) {
        const float4 v = *reinterpret_cast<const float4*>(bs + k * kBN + q * kNSpan);
        b_frag[q * 4 + 0] = v.x;
        b_frag[q * 4 + 1] = v.y;
        b_frag[q * 4 + 2] = v.z;
        b_frag[q * 4 + 3] = v.w;
      }
#pragma unroll
      for (int i = 0; i < kTM; ++i) {
#pragma unroll
        for (int j = 0; j < kTN; ++j) acc[i][j] = fmaf(a_frag[i], b_frag[j], acc[i][j]);
      }
    }
  };

  const int num_tiles = kEvenTiles ? K / kBK : (K + kBK - 1) / kBK;
  if (num_tiles > 0) {
    load_tile(0, true);
    store_tile(0);
  }
  __syncthreads();
  // One k-tile: prefetch the next into registers, multiply this one, publish the next.
  // `has_next` is uniform across the block, so every thread reaches the same barriers.
  auto step = [&](int tile, int stage) {
    const bool has_next = tile + 1 < num_tiles;
    load_tile(tile + 1, has_next);
    compute_tile(stage);
    if constexpr (kStages == 2) {
      // The other stage was last read before the previous step's closing barrier.
      if (has_next) store_tile(stage ^ 1);
      __syncthreads();
    } else {
      __syncthreads();
      if (has_next) {
        store_tile(0);
        __syncthreads();
      }
    }
  };
  if constexpr (kStages == 2 && kTM * kTN == 64) {
    // Unrolled by two so each step's stage, and with it every shared-memory address offset, is a
    // compile-time constant: measured with ptxas 13.0 to keep the 8x8 configs at or below the
    // 128-register occupancy step; smaller thread tiles came out better without it.
    for (int tile = 0; tile < num_tiles; tile += 2) {
      step(tile, 0);
      if (tile + 1 < num_tiles) step(tile + 1, 1);
    }
  } else {
    for (int tile = 0; tile < num_tiles; ++tile) step(tile, kStages == 2 ? (tile & 1) : 0);
  }

#pragma unroll
  for (int p = 0; p < kTM / 4; ++p) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int row = block_m + p * kMSpan + tr * 4 + e;
      if (!kEvenTiles && row >= M) continue;
      float* __restrict__ c_row = C + static_cast<long long>(row) * N;
#pragma unroll
      for (int q = 0; q < kTN / 4; ++q) {
        const int col = block_n + q * kNSpan + tc * 4;
        if constexpr (kVecLoads) {
          // N % 4 == 0, so a float4 starting inside N lies wholly inside.
          if (kEvenTiles || col < N) {
            *reinterpret_cast<float4*>(c_row + col) =
                make_float4(acc[p * 4 + e][q * 4 + 0], acc[p * 4 + e][q * 4 + 1],
                            acc[p * 4 + e][q * 4 + 2], acc[p * 4 + e][q * 4 + 3]);
          }
        } else {
#pragma unroll
          for (int f = 0; f < 4; ++f) {
            if (kEvenTiles || col + f < N) c_row[col + f] = acc[p * 4 + e][q * 4 + f];
          }
        }
      }
    }
  }
}

// ------------------------------------------------------------------------------------------------
// Warp-tiled variant (the SGEMM_CUDA kernel 10 design, plus register double buffering): a block
// computes a kBM x kBN tile of C with 4 or 8 warps; each warp owns a kWM x kWN piece of it, and
// each thread a kTM x kTN sub-tile of its warp's piece, held as (kTM/4) x (kTN/4) pieces of 4 x 4
// ("warp sub-iterations") spaced a warp sub-tile apart. A warp's 32 threads are laid out
// kRowsT x kColsT (4 x 8 or 8 x 4), lane = row * kColsT + col, so the eight lanes of a quarter warp
// read at most two consecutive float4 of A^T and eight consecutive float4 of B per k: no bank
// conflicts.
//
// Per k a thread does kTM * kTN FFMA for (kTM + kTN) / 4 LDS.128 (8 x 16: 128 FFMA per 6 loads,
// 8 x 8: 64 per 4). The fragments of k + 1 are read from shared memory into a second register
// buffer while those of k feed the FMAs, and the last k of a tile reads k = 0 of the next tile
// from the other shared-memory stage, so shared-memory latency stays off the FMA chain. The next
// k-tile is copied from global memory into the other stage by cp.async (16-byte copies of B,
// 4-byte ones of A, which is stored transposed) at the start of a tile, and waited for before its
// last k: one __syncthreads per k-tile, and no registers staged.
//
// Shared memory is dynamic (two stages of [A^T: kBK x (kBM + kAPad)][B: kBK x kBN] floats,
// 24.8 KiB at 128 x 256 x 8, above 48 KiB from 128 x 256 x 16 on), so the launch opts in.
// B and C move in 16-byte accesses (A in 4-byte copies): the caller guarantees K % 4 == 0,
// N % 4 == 0 and 16-byte aligned A, B, C; M, N and K tails are handled (kEvenTiles = false) by
// zero-filled copies and guarded stores.

namespace sgemm_detail {

__host__ __device__ constexpr int warp_smem_bytes(int bm, int bn, int bk) {
  return 2 * stage_floats(bm, bn, bk) * static_cast<int>(sizeof(float));
}

// cp.async (sm_80+) from global to shared memory; a copy that is not `ok` writes zeros and reads
// nothing (src-size 0), so `src` need only be some valid address. The unit tier's host emulation
// of sgemm_warp (tests/unit/test_sgemm_host.cpp) brings its own.
#ifndef GMJIT_SGEMM_HOST_EMULATION
__device__ __forceinline__ void copy_async_4(unsigned dst, const float* src, bool ok) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(ok ? 4 : 0));
}
__device__ __forceinline__ void copy_async_16(unsigned dst, const float* src, bool ok) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(ok ? 16 : 0));
}
__device__ __forceinline__ void copy_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void copy_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }
#endif

// Blocks per SM the register file must hold, for __launch_bounds__: two blocks of 256 threads
// (or four of 128) at up to 128 registers for 64 accumulators, one block of 256 (two of 128) for
// 128 accumulators. 65536 registers per SM on sm_90 (CUDA C Programming Guide, table of
// technical specifications per compute capability).
__host__ __device__ constexpr int warp_min_blocks(int threads, int accumulators) {
  return accumulators <= 64 ? 65536 / (threads * 128) : 65536 / (threads * 256);
}

}  // namespace sgemm_detail

// C (MxN) = A (MxK) * B (KxN), all row-major fp32, fp32 accumulation. Block = (kBM/kTM)*(kBN/kTN)
// threads (128 or 256), 1-D threadIdx.x. Grid: x = ceil(N / kBN), y = ceil(M / kBM). Dynamic
// shared memory: sgemm_detail::warp_smem_bytes(kBM, kBN, kBK).
// The caller guarantees K % 4 == 0, N % 4 == 0 and 16-byte aligned A, B, C.
// kEvenTiles: the caller guarantees M % kBM == 0, N % kBN == 0, K % kBK == 0.
// Always: kBM * K and kBK * N below 2^31 (in-tile offsets are 32-bit).
template <int kBM, int kBN, int kBK, int kWM, int kTM, int kTN, bool kEvenTiles>
__global__ void __launch_bounds__((kBM / kTM) * (kBN / kTN),
                                  sgemm_detail::warp_min_blocks((kBM / kTM) * (kBN / kTN), kTM * kTN))
    sgemm_warp(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M,
               int N, int K) {
  using namespace sgemm_detail;

  static_assert(kBM == 64 || kBM == 128 || kBM == 256, "sgemm_warp: kBM must be 64, 128 or 256");
  static_assert(kBN == 64 || kBN == 128 || kBN == 256, "sgemm_warp: kBN must be 64, 128 or 256");
  static_assert(kBK == 8 || kBK == 16 || kBK == 32, "sgemm_warp: kBK must be 8, 16 or 32");
  static_assert(kTM == 8, "sgemm_warp: kTM must be 8");
  static_assert(kTN == 8 || kTN == 16, "sgemm_warp: kTN must be 8 or 16");

  constexpr int kThreads = (kBM / kTM) * (kBN / kTN);
  static_assert(kThreads == 128 || kThreads == 256, "sgemm_warp: (kBM/kTM)*(kBN/kTN) must be 128 or 256");
  constexpr int kWN = 32 * kTM * kTN / kWM;
  constexpr int kRowsT = kWM / kTM;
  constexpr int kColsT = 32 / kRowsT;
  static_assert(kRowsT == 4 || kRowsT == 8, "sgemm_warp: a warp is 4 x 8 or 8 x 4 threads (kWM = 4 or 8 kTM)");
  static_assert(kBM % kWM == 0 && kBN % kWN == 0, "sgemm_warp: warp tiles must divide the block tile");
  constexpr int kWarpsN = kBN / kWN;
  static_assert((kBM / kWM) * kWarpsN * 32 == kThreads, "sgemm_warp: warp tiles must cover the block tile");
  constexpr int kMIter = kTM / 4;
  constexpr int kNIter = kTN / 4;
  constexpr int kMSub = kRowsT * 4;  // rows of a warp sub-tile
  constexpr int kNSub = kColsT * 4;  // columns of a warp sub-tile

  constexpr int kAStride = kBM + kAPad;
  constexpr int kStageFloats = stage_floats(kBM, kBN, kBK);
  // Global -> shared by cp.async, so no registers hold the next k-tile and nothing lets ptxas
  // sink its loads toward their stores (it did so with register staging: the LDGs of a 128 x 256
  // x 8 tile issued after ~750 of its 1024 FFMAs a thread). A tile: 4-byte copies, a warp covering
  // 8 consecutive k (one 32-byte sector) of 4 rows per instruction, stored transposed: bank
  // 4 * k + m (kAStride is 4 banks off a multiple of 32), 32 distinct banks. B tile: 16-byte
  // copies, consecutive threads along n.
  constexpr int kACopies = kBM * kBK;
  static_assert(kACopies % kThreads == 0, "sgemm_warp: A copies must split evenly");
  constexpr int kAPasses = kACopies / kThreads;
  constexpr int kBRow = kBN / 4;
  constexpr int kBCopies = kBK * kBN / 4;
  static_assert(kBCopies % kThreads == 0, "sgemm_warp: B copies must split evenly");
  constexpr int kBPasses = kBCopies / kThreads;
  static_assert(kThreads % 32 == 0 && kBM % 4 == 0, "sgemm_warp: A copy mapping");

  extern __shared__ __align__(16) float sgemm_warp_smem[];
  float* const smem = sgemm_warp_smem;

  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int block_m = static_cast<int>(blockIdx.y) * kBM;
  const int block_n = static_cast<int>(blockIdx.x) * kBN;
  const int rows_left = M - block_m;
  const int cols_left = N - block_n;

  // A: warp-instruction index w = warp + pass * warps covers rows 4 * (w % (kBM / 4)) + lane / 8
  // of the 8-k group w / (kBM / 4), at k lane % 8. B: copy v = tid + pass * kThreads is k-row
  // v / kBRow, float4 v % kBRow along n. Warps, threads and extents are powers of two, so each
  // pass adds a compile-time offset to a per-thread base, and a tile advances one pointer each.
  using ASplit = PassSplit<kThreads / 32, kBM / 4>;
  using BSplit = PassSplit<kThreads, kBRow>;
  const int a_m0 = ASplit::mod_base(warp) * 4 + lane / 8;
  const int a_k0 = ASplit::div_base(warp) * 8 + lane % 8;
  const int b_k0 = BSplit::div_base(tid);
  const int b_n0 = BSplit::mod_base(tid) * 4;
  const float* __restrict__ a_src = A + static_cast<long long>(block_m + a_m0) * K + a_k0;
  const float* __restrict__ b_src = B + static_cast<long long>(b_k0) * N + block_n + b_n0;
  const unsigned smem_base = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const unsigned a_dst = smem_base + static_cast<unsigned>((a_k0 * kAStride + a_m0) * 4);
  const unsigned b_dst = smem_base + static_cast<unsigned>((kBK * kAStride + b_k0 * kBN + b_n0) * 4);

  // Copies k-tile `tile` into `stage`; a_src and b_src point at that tile and move to the next.
  auto load_tile = [&](int tile, int stage) {
    const int k_left = K - tile * kBK;
#pragma unroll
    for (int p = 0; p < kAPasses; ++p) {
      const int dm = ASplit::mod_step(p) * 4;
      const int dk = ASplit::div_step(p) * 8;
      const bool ok = kEvenTiles || (a_m0 + dm < rows_left && a_k0 + dk < k_left);
      const float* src = a_src + (dm * K + dk);
      copy_async_4(a_dst + static_cast<unsigned>((stage * kStageFloats + dk * kAStride + dm) * 4), ok ? src : A, ok);
    }
#pragma unroll
    for (int p = 0; p < kBPasses; ++p) {
      const int dk = BSplit::div_step(p);
      const int dn = BSplit::mod_step(p) * 4;
      // N % 4 == 0, so a float4 starting inside N lies wholly inside.
      const bool ok = kEvenTiles || (b_k0 + dk < k_left && b_n0 + dn < cols_left);
      const float* src = b_src + (dk * N + dn);
      copy_async_16(b_dst + static_cast<unsigned>((stage * kStageFloats + dk * kBN + dn) * 4), ok ? src : B, ok);
    }
    copy_async_commit();
    a_src += kBK;
    b_src += static_cast<long long>(kBK) * N;
  };
  // This thread's copies have landed; a __syncthreads then publishes everyone's.
  auto wait_tile = [] { copy_async_wait_all(); };

  // This thread's first fragment element in a stage: row warp_m + tr * 4 of A^T's k-row, column
  // warp_n + tc * 4 of B's; sub-iterations add kMSub rows and kNSub columns.
  const int warp_m = (warp / kWarpsN) * kWM;
  const int warp_n = (warp % kWarpsN) * kWN;
  const int tr = lane / kColsT;
  const int tc = lane % kColsT;
  const int a_read = warp_m + tr * 4;
  const int b_read = kBK * kAStride + warp_n + tc * 4;

  float a_frag[2][kTM];
  float b_frag[2][kTN];
  auto load_frag = [&](int buf, int stage, int k) {
    const float* __restrict__ as = smem + stage * kStageFloats + k * kAStride + a_read;
    const float* __restrict__ bs = smem + stage * kStageFloats + k * kBN + b_read;
#pragma unroll
    for (int i = 0; i < kMIter; ++i) {
      const float4 v = *reinterpret_cast<const float4*>(as + i * kMSub);
      a_frag[buf][i * 4 + 0] = v.x;
      a_frag[buf][i * 4 + 1] = v.y;
      a_frag[buf][i * 4 + 2] = v.z;
      a_frag[buf][i * 4 + 3] = v.w;
    }
#pragma unroll
    for (int j = 0; j < kNIter; ++j) {
      const float4 v = *reinterpret_cast<const float4*>(bs + j * kNSub);
      b_frag[buf][j * 4 + 0] = v.x;
      b_frag[buf][j * 4 + 1] = v.y;
      b_frag[buf][j * 4 + 2] = v.z;
      b_frag[buf][j * 4 + 3] = v.w;
    }
  };

  float acc[kTM][kTN];
#pragma unroll
  for (int i = 0; i < kTM; ++i) {
#pragma unroll
    for (int j = 0; j < kTN; ++j) acc[i][j] = 0.f;
  }

  // K >= 1, so there is at least one k-tile.
  const int num_tiles = kEvenTiles ? K / kBK : (K + kBK - 1) / kBK;
  load_tile(0, 0);
  wait_tile();
  __syncthreads();
  load_frag(0, 0, 0);

  // One k-tile: the next tile's copies into the other stage go out first (that stage was last
  // read before the previous tile's closing barrier); each k reads k + 1's fragments before its
  // FMAs; before the last k the next tile is waited for, published by the barrier, and its k = 0
  // fragments are read. kBK is even, so a tile always starts from fragment buffer 0. `has_next`
  // is uniform across the block.
  auto step = [&](int tile, int stage) {
    const bool has_next = tile + 1 < num_tiles;
    if (has_next) load_tile(tile + 1, stage ^ 1);
#pragma unroll
    for (int k = 0; k < kBK; ++k) {
      if (k + 1 < kBK) {
        load_frag((k + 1) & 1, stage, k + 1);
      } else if (has_next) {
        wait_tile();
        __syncthreads();
        load_frag(0, stage ^ 1, 0);
      }
#pragma unroll
      for (int i = 0; i < kTM; ++i) {
#pragma unroll
        for (int j = 0; j < kTN; ++j) acc[i][j] = fmaf(a_frag[k & 1][i], b_frag[k & 1][j], acc[i][j]);
      }
    }
  };
  // Unrolled by two so each step's stage, and with it every shared-memory offset, is a
  // compile-time constant.
  for (int tile = 0; tile < num_tiles; tile += 2) {
    step(tile, 0);
    if (tile + 1 < num_tiles) step(tile + 1, 1);
  }

#pragma unroll
  for (int i = 0; i < kMIter; ++i) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int row = block_m + warp_m + i * kMSub + tr * 4 + e;
      if (!kEvenTiles && row >= M) continue;
      float* __restrict__ c_row = C + static_cast<long long>(row) * N;
#pragma unroll
      for (int j = 0; j < kNIter; ++j) {
        const int col = block_n + warp_n + j * kNSub + tc * 4;
        // N % 4 == 0, so a float4 starting inside N lies wholly inside.
        if (kEvenTiles || col < N) {
          *reinterpret_cast<float4*>(c_row + col) =
              make_float4(acc[i * 4 + e][j * 4 + 0], acc[i * 4 + e][j * 4 + 1], acc[i * 4 + e][j * 4 + 2],
                          acc[i * 4 + e][j * 4 + 3]);
        }
      }
    }
  }
}

}  // namespace gmjit
