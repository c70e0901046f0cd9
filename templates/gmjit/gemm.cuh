#pragma once
// Tensor-core GEMM for bf16 and fp16 on mma.sync (sm_80 and later: also compiles for sm_89 and
// sm_90a, where it is the portable fallback beside a wgmma kernel).
//
// A block computes a kBM x kBN tile of C; its kWarpsM x kWarpsN warps each own a warp tile of
// (kBM/kWarpsM) x (kBN/kWarpsN) fp32 accumulators in registers, stepped in
// mma.sync.aligned.m16n8k16 (fp32 accumulation). Operands reach the tensor cores through
// ldmatrix.x4 (.trans for B stored K x N) from shared memory whose 16-byte chunks are XOR-swizzled
// per row, so every 8-address phase of an ldmatrix and of the cp.async stores touches 8 distinct
// 16-byte bank groups. Global -> shared copies are cp.async.cg of 16 bytes in a ring of kStages
// buffers (commit_group per k-tile, wait_group kStages-2); out-of-bounds chunks are zero-filled
// through cp.async's src-size. Without kAligned the chunks are gathered element by element with
// predicated loads and stored with st.shared (correct for any M, N, K and any alignment of the
// pointers; slower, the tuner only picks it for shapes that leave no choice).
//
// Tiles are visited in a grouped raster (kGroupM tile-rows per group) so blocks running together
// share rows of A and columns of B in L2. gridDim.z > 1 splits the k-tiles over z; slices
// red.add their fp32 partials into the workspace and the last slice of a tile, found through a
// per-tile arrival counter, converts the sums into C and leaves workspace and counter at zero.
//
// Measured: compiled with NVRTC/ptxas 13.0 for sm_80, sm_89 and sm_90a (every valid configuration
// of the tuner's domain per architecture, the dtype / layout / path / kGroupM / split variants
// rotating: tests/nvrtc/test_gemm_kernel_compile.cpp), the aligned path keeps nothing in local
// memory; the element-wise path spilled 8 bytes in two fp16 split-K configurations of 8 warps on
// sm_80 (ptxas holding the 128-register step). 64 x 64 warp tiles take 220-255 registers.
// On an H200 (tests/standalone/gemm_mma_check.cu, random data checked against a double reference
// at 74 (configuration, shape) pairs, both paths, split-K included), bf16 4096^3 x @ W^T ran at
// 436 TFLOP/s with 128x128x64, 2x2 warps, 3 stages, kGroupM 8 (407-416 at kBK 32; 310-327 for
// 128x256 tiles, whose 8 warps of 64x64 leave one block an SM).
//
// Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k16" and "ldmatrix"):
//   A (16x16, row): a0a1 = (g, 2t..2t+1), a2a3 = (g+8, 2t..), a4a5 = (g, 2t+8..), a6a7 = (g+8, 2t+8..)
//   B (16x8, col):  b0b1 = (k 2t..2t+1, n g), b2b3 = (k 2t+8.., n g)
//   C (16x8):       c0c1 = (g, 2t..2t+1), c2c3 = (g+8, 2t..)
// with g = lane / 4, t = lane % 4. ldmatrix gives lane l the elements (row l/4, cols 2(l%4)..+1)
// of each 8x8 matrix, and with .trans those at (rows 2(l%4)..+1, col l/4); lanes 8i..8i+7 supply
// the row addresses of matrix i.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "gmjit/type_traits.cuh"

namespace gmjit {
namespace gemm_detail {

// Enumerators rather than constexpr variables: NVRTC emits namespace-scope constants as device
// globals. kSmemLimitBytes is sm_90's opt-in maximum per block (227 KiB); sm_80 allows 163 KiB
// (166912 bytes) and sm_86/sm_89 99 KiB (101376), so a launch must also fit the device's own
// opt-in limit, which only the host knows. The kernel keeps no static shared memory, so all of it
// is available to the stages.
enum : int {
  kSmemLimitBytes = 232448,
  kMaxWarpDim = 64,  // warp tile extent in M and in N: at most 64 x 64 = 128 accumulators a thread
  kMinWarps = 2,
  kMaxWarps = 8,
};

// dynamic shared memory bytes the kernel needs
__host__ __device__ constexpr int mma_smem_bytes(int bm, int bn, int bk, int stages) {
  return stages * (bm + bn) * bk * 2;
}

// 0 when (bm, bn, bk, warps_m, warps_n, stages) is a configuration gemm_mma accepts (for every T,
// kTransB, kGroupM >= 1, kAligned and split); otherwise the first rule broken:
//   1  bk is not 32 or 64 (one k-tile row is 4 or 8 16-byte chunks: the A / B^T swizzles)
//   2  bm or bn is not a positive multiple of 64 (a K x N row of B must span >= 8 chunks for its
//      swizzle)
//   3  warps_m or warps_n < 1, or warps_m * warps_n outside [2, 8]
//   4  the warp tile (bm / warps_m) x (bn / warps_n) is not a whole multiple of 16 x 16
//      (ldmatrix.x4 steps: 16 rows of A, 16 columns of B)
//   5  a warp tile extent exceeds 64 (more than 128 fp32 accumulators a thread spill)
//   6  the 16-byte chunks of an A or B stage do not divide evenly among the block's threads
//   7  stages < 2
//   8  shared memory mma_smem_bytes(bm, bn, bk, stages) exceeds 232448 bytes (227 KiB)
__host__ __device__ constexpr int mma_config_violation_code(int bm, int bn, int bk, int warps_m, int warps_n,
                                                            int stages) {
  return (bk != 32 && bk != 64)                                                   ? 1
         : (bm <= 0 || bn <= 0 || bm % 64 != 0 || bn % 64 != 0)                  ? 2
         : (warps_m < 1 || warps_n < 1 || warps_m * warps_n < kMinWarps ||
            warps_m * warps_n > kMaxWarps)                                        ? 3
         : (bm % (16 * warps_m) != 0 || bn % (16 * warps_n) != 0)                 ? 4
         : (bm / warps_m > kMaxWarpDim || bn / warps_n > kMaxWarpDim)             ? 5
         : ((bm * bk / 8) % (warps_m * warps_n * 32) != 0 ||
            (bn * bk / 8) % (warps_m * warps_n * 32) != 0)                        ? 6
         : (stages < 2)                                                           ? 7
         : (mma_smem_bytes(bm, bn, bk, stages) > kSmemLimitBytes)                 ? 8
                                                                                  : 0;
}

// Element offset of 16-byte chunk `chunk` of row `row` in a [rows][cols] tile of 2-byte elements,
// with the chunk index XOR-swizzled so that 8 consecutive rows read at one logical chunk land in
// 8 distinct 16-byte slots of a 128-byte bank line. Rows of 8 or more chunks (128 bytes or a
// multiple) flip the low 3 chunk bits by row % 8; rows of 4 chunks (64 bytes, two rows per line)
// flip by (row / 2) % 4, the pair's slot in the line coming from row % 2.
template <int kCols>
__device__ __forceinline__ int swizzle(int row, int chunk) {
  static_assert(kCols == 32 || kCols % 64 == 0, "gemm swizzle: rows of 4 or of 8k chunks");
  return kCols == 32 ? row * kCols + ((chunk ^ ((row >> 1) & 3)) << 3)
                     : row * kCols + ((chunk ^ (row & 7)) << 3);
}

__device__ __forceinline__ unsigned smem_u32(const void* p) {
  unsigned r;
  asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(r) : "l"(p));
  return r;
}

// 16 bytes global -> shared, bypassing L1; src_bytes 0 writes 16 zero bytes and reads nothing.
__device__ __forceinline__ void cp_async_16(unsigned dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
// The same for a chunk known to lie inside the tensor: no size operand to compute.
__device__ __forceinline__ void cp_async_16_all(unsigned dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

template <typename T>
struct MmaOp;

template <>
struct MmaOp<__nv_bfloat16> {
  __device__ __forceinline__ static void run(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  __device__ __forceinline__ static __nv_bfloat162 pack(float x, float y) {
    return __floats2bfloat162_rn(x, y);
  }
  __device__ __forceinline__ static __nv_bfloat16 one(float x) { return __float2bfloat16_rn(x); }
  typedef __nv_bfloat162 Pair;
};

template <>
struct MmaOp<__half> {
  __device__ __forceinline__ static void run(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  __device__ __forceinline__ static __half2 pack(float x, float y) { return __floats2half2_rn(x, y); }
  __device__ __forceinline__ static __half one(float x) { return __float2half_rn(x); }
  typedef __half2 Pair;
};

// Up to 8 consecutive 2-byte elements from `src`, zeros past `count` (count <= 0: all zeros).
__device__ __forceinline__ uint4 gather8(const unsigned short* __restrict__ src, int count) {
  unsigned short e[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) e[i] = i < count ? src[i] : static_cast<unsigned short>(0);
  uint4 v;
  v.x = static_cast<unsigned>(e[0]) | (static_cast<unsigned>(e[1]) << 16);
  v.y = static_cast<unsigned>(e[2]) | (static_cast<unsigned>(e[3]) << 16);
  v.z = static_cast<unsigned>(e[4]) | (static_cast<unsigned>(e[5]) << 16);
  v.w = static_cast<unsigned>(e[6]) | (static_cast<unsigned>(e[7]) << 16);
  return v;
}

}  // namespace gemm_detail

// C[M,N] = A[M,K] @ B; A and C row-major. kTransB=false: B stored K x N row-major (a @ b).
// kTransB=true: B stored N x K row-major (x @ W^T, weights). fp32 accumulation, C in T.
// T is __nv_bfloat16 or __half.
// Block: kWarpsM*kWarpsN*32 threads (1-D). Grid: x = ceil(M/kBM)*ceil(N/kBN) (tile index, mapped to
// (tile_m, tile_n) in a grouped raster of kGroupM tile-rows; kGroupM=1 is a row-major raster),
// y = 1, z = the split (any z >= 1; one compiled kernel serves every split). Dynamic shared memory = gemm_detail::mma_smem_bytes(kBM,kBN,kBK,kStages).
// kAligned: the caller guarantees K % 8 == 0, N % 8 == 0 and A, B, C 16-byte aligned; otherwise
// any M, N, K >= 1 and any 2-byte alignment. Tails in M, N, K are always handled.
// gridDim.z > 1: workspace holds M*N floats (zero) followed by ceil(M/16)*ceil(N/16) unsigned
// counters (zero); slices add into the floats, the last slice of tile (tile_m, tile_n) (counter
// tile_m * ceil(N/kBN) + tile_n) writes C and zeroes its floats and counter again.
// gridDim.z == 1 never touches workspace (it may be null).
// Offsets inside one block's tile rows are 32-bit: kBM * K, kBN * K and kBK * N below 2^31.
template <typename T, bool kTransB, int kBM, int kBN, int kBK, int kWarpsM, int kWarpsN, int kStages,
          int kGroupM, bool kAligned>
__global__ void __launch_bounds__(kWarpsM * kWarpsN * 32)
    gemm_mma(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C, float* __restrict__ workspace,
             int M, int N, int K) {
  using namespace gemm_detail;
  typedef MmaOp<T> Op;
  static_assert(IsSame<T, __nv_bfloat16>::kValue || IsSame<T, __half>::kValue, "gemm_mma: T must be __nv_bfloat16 or __half");
  static_assert(kBK == 32 || kBK == 64, "gemm_mma: kBK must be 32 or 64 (violation 1)");
  static_assert(kBM > 0 && kBN > 0 && kBM % 64 == 0 && kBN % 64 == 0,
                "gemm_mma: kBM and kBN must be multiples of 64 (violation 2)");
  static_assert(kWarpsM >= 1 && kWarpsN >= 1 && kWarpsM * kWarpsN >= kMinWarps && kWarpsM * kWarpsN <= kMaxWarps,
                "gemm_mma: kWarpsM * kWarpsN must be in [2, 8] (violation 3)");
  static_assert(kBM % (16 * kWarpsM) == 0 && kBN % (16 * kWarpsN) == 0,
                "gemm_mma: the warp tile must be a multiple of 16 x 16 (violation 4)");
  static_assert(kBM / kWarpsM <= kMaxWarpDim && kBN / kWarpsN <= kMaxWarpDim,
                "gemm_mma: the warp tile must be at most 64 x 64 (violation 5)");
  static_assert((kBM * kBK / 8) % (kWarpsM * kWarpsN * 32) == 0 && (kBN * kBK / 8) % (kWarpsM * kWarpsN * 32) == 0,
                "gemm_mma: a stage's 16-byte chunks must divide among the threads (violation 6)");
  static_assert(kStages >= 2, "gemm_mma: kStages must be at least 2 (violation 7)");
  static_assert(mma_smem_bytes(kBM, kBN, kBK, kStages) <= kSmemLimitBytes,
                "gemm_mma: shared memory over 227 KiB (violation 8)");
  static_assert(mma_config_violation_code(kBM, kBN, kBK, kWarpsM, kWarpsN, kStages) == 0,
                "gemm_mma: mma_config_violation_code disagrees with the static_asserts");
  static_assert(kGroupM >= 1, "gemm_mma: kGroupM must be at least 1");

  enum : int {
    kThreads = kWarpsM * kWarpsN * 32,
    kWM = kBM / kWarpsM,  // warp tile
    kWN = kBN / kWarpsN,
    kMT = kWM / 16,  // m16 steps of a warp tile
    kNT = kWN / 8,   // n8 steps
    kNB = kWN / 16,  // ldmatrix.x4 loads of B per k16 step
    kAChunkRow = kBK / 8,
    kAPasses = kBM * kBK / 8 / kThreads,
    kBRows = kTransB ? kBN : kBK,  // B stage in shared memory: [n][k] (kTransB) or [k][n]
    kBCols = kTransB ? kBK : kBN,
    kBChunkRow = kBCols / 8,
    kBPasses = kBN * kBK / 8 / kThreads,
    kAStageElems = kBM * kBK,
    kBStageElems = kBN * kBK,
  };

  extern __shared__ __align__(128) unsigned char gemm_smem[];
  T* const a_smem = reinterpret_cast<T*>(gemm_smem);
  T* const b_smem = a_smem + kStages * kAStageElems;
  const unsigned a_smem_u32 = smem_u32(a_smem);
  const unsigned b_smem_u32 = smem_u32(b_smem);

  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int warp_m = warp / kWarpsN;
  const int warp_n = warp % kWarpsN;

  // Grouped raster: kGroupM consecutive tile-rows are walked column by column.
  const int tiles_m = (M + kBM - 1) / kBM;
  const int tiles_n = (N + kBN - 1) / kBN;
  int tile_m;
  int tile_n;
  {
    const int t = static_cast<int>(blockIdx.x);
    if (kGroupM == 1) {
      tile_m = t / tiles_n;
      tile_n = t % tiles_n;
    } else {
      const int group_size = kGroupM * tiles_n;
      const int first_m = (t / group_size) * kGroupM;
      const int rows = min(tiles_m - first_m, static_cast<int>(kGroupM));
      const int in_group = t % group_size;
      tile_m = first_m + in_group % rows;
      tile_n = in_group / rows;
    }
  }
  if (tile_m >= tiles_m) return;  // a grid larger than the tile count
  const int block_m = tile_m * kBM;
  const int block_n = tile_n * kBN;

  // This slice's k-tiles: a contiguous range, possibly empty (it still reports to the counter).
  // The split is the grid's depth, not a template argument: every split of a tile configuration
  // runs one compiled kernel.
  const int split_k = static_cast<int>(gridDim.z);
  const int k_tiles = (K + kBK - 1) / kBK;
  int kt_begin = 0;
  int kt_count = k_tiles;
  if (split_k > 1) {
    const int per_slice = (k_tiles + split_k - 1) / split_k;
    kt_begin = static_cast<int>(blockIdx.z) * per_slice;
    kt_count = max(0, min(k_tiles, kt_begin + per_slice) - kt_begin);
  }

  // Stage loads: thread tid copies chunk tid % chunks-per-row of rows tid / chunks-per-row +
  // p * kXRowStep, p < kXPasses (consecutive threads take consecutive chunks of a row). Each pass
  // steps one pointer by a row stride rather than recomputing its address: ptxas would hoist every
  // pass's 64-bit address out of the k loop as an invariant, which spilled the 64 x 64 warp tiles
  // of 2- and 4-warp blocks (16 passes a stage).
  enum : int {
    kARowStep = kThreads / kAChunkRow,  // a multiple of 8: the A swizzle repeats every pass
    kBRowStep = kThreads / kBChunkRow,
  };
  static_assert(kThreads % kAChunkRow == 0 && kThreads % kBChunkRow == 0, "gemm_mma: pass mapping");
  static_assert(kARowStep % 8 == 0, "gemm_mma: A pass step keeps the swizzle phase");
  const int a_row0 = tid / kAChunkRow;
  const int a_ch = tid % kAChunkRow;
  const int b_row0 = tid / kBChunkRow;
  const int b_ch = tid % kBChunkRow;
  const int a_rows_left = M - block_m - a_row0;  // pass p is in bounds while p * kARowStep < this
  const int a_soff = swizzle<kBK>(a_row0, a_ch);
  // A: rows are m, K elements apart. B: rows are n (kTransB, K apart) or k (N apart).
  const int b_ld = kTransB ? K : N;
  const int b_rows_left = kTransB ? N - block_n - b_row0 : K - b_row0;  // !kTransB: minus k0 below
  const unsigned short* const a_gmem =
      reinterpret_cast<const unsigned short*>(A) + (static_cast<long long>(block_m + a_row0) * K + a_ch * 8);
  const unsigned short* const b_gmem =
      reinterpret_cast<const unsigned short*>(B) +
      (kTransB ? static_cast<long long>(block_n + b_row0) * K + b_ch * 8
               : static_cast<long long>(b_row0) * N + block_n + b_ch * 8);

  // A block whose tile lies inside M and N copies each k-tile that lies inside K without a bounds
  // test or fallback address per chunk: at 128x128x64 those were 48 of the k-loop's 382
  // instructions (an ISETP and two IMAD.MOV per cp.async).
  const bool interior = kAligned && block_m + kBM <= M && block_n + kBN <= N;

  // Copies k-tile `kt` into ring slot `stage`.
  auto load_stage = [&](int stage, int kt) {
    const int k0 = kt * kBK;
    if (interior && k0 + kBK <= K) {
      const unsigned short* a_src = a_gmem + k0;
#pragma unroll
      for (int p = 0; p < kAPasses; ++p) {
        cp_async_16_all(a_smem_u32 + 2 * (stage * kAStageElems + a_soff + p * kARowStep * kBK), a_src);
        a_src += kARowStep * K;
      }
      const unsigned short* b_src =
          b_gmem + (kTransB ? static_cast<long long>(k0) : static_cast<long long>(k0) * N);
#pragma unroll
      for (int p = 0; p < kBPasses; ++p) {
        cp_async_16_all(b_smem_u32 + 2 * (stage * kBStageElems + swizzle<kBCols>(b_row0 + p * kBRowStep, b_ch)),
                        b_src);
        b_src += kBRowStep * b_ld;
      }
      return;
    }
    {
      const unsigned short* src = a_gmem + k0;
      const int cols_left = K - k0 - a_ch * 8;  // elements of this chunk's row still inside K
      T* const dst = a_smem + stage * kAStageElems + a_soff;
      if (kAligned) {
#pragma unroll
        for (int p = 0; p < kAPasses; ++p) {
          const bool ok = p * kARowStep < a_rows_left && cols_left > 0;
          cp_async_16(a_smem_u32 + 2 * (stage * kAStageElems + a_soff + p * kARowStep * kBK),
                      ok ? static_cast<const void*>(src) : static_cast<const void*>(A), ok ? 16 : 0);
          src += kARowStep * K;
        }
      } else {
        // Correctness over speed: one pass at a time keeps 8 loads in flight, not a stage's worth.
#pragma unroll 1
        for (int p = 0; p < kAPasses; ++p) {
          *reinterpret_cast<uint4*>(dst + p * kARowStep * kBK) =
              gather8(src, p * kARowStep < a_rows_left ? cols_left : 0);
          src += kARowStep * K;
        }
      }
    }
    {
      const unsigned short* src = b_gmem + (kTransB ? static_cast<long long>(k0) : static_cast<long long>(k0) * N);
      const int rows_left = kTransB ? b_rows_left : b_rows_left - k0;
      const int cols_left = kTransB ? K - k0 - b_ch * 8 : N - block_n - b_ch * 8;
      T* const dst = b_smem + stage * kBStageElems;
      if (kAligned) {
#pragma unroll
        for (int p = 0; p < kBPasses; ++p) {
          const bool ok = p * kBRowStep < rows_left && cols_left > 0;
          cp_async_16(b_smem_u32 + 2 * (stage * kBStageElems + swizzle<kBCols>(b_row0 + p * kBRowStep, b_ch)),
                      ok ? static_cast<const void*>(src) : static_cast<const void*>(B), ok ? 16 : 0);
          src += kBRowStep * b_ld;
        }
      } else {
#pragma unroll 1
        for (int p = 0; p < kBPasses; ++p) {
          *reinterpret_cast<uint4*>(dst + swizzle<kBCols>(b_row0 + p * kBRowStep, b_ch)) =
              gather8(src, p * kBRowStep < rows_left ? cols_left : 0);
          src += kBRowStep * b_ld;
        }
      }
    }
  };

  float acc[kMT][kNT][4];
#pragma unroll
  for (int i = 0; i < kMT; ++i) {
#pragma unroll
    for (int j = 0; j < kNT; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;
    }
  }

  // Per-lane ldmatrix row addresses (see the fragment layouts at the top). A: lane l supplies row
  // l % 16, chunk l / 16 of a 16 x 16 block (matrices: rows 0-7 / 8-15 x k 0-7, then k 8-15).
  const int a_row = warp_m * kWM + (lane & 15);
  const int a_chunk = lane >> 4;
  // B^T stored [n][k] (non-transposed ldmatrix): matrices (n 0-7, k 0-7), (n 0-7, k 8-15),
  // (n 8-15, k 0-7), (n 8-15, k 8-15), so registers 0,1 feed n8 tile 0 and 2,3 tile 1.
  // B stored [k][n] (ldmatrix.trans): matrices (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15),
  // (k 8-15, n 8-15): the same register order.
  const int b_row = kTransB ? warp_n * kWN + (lane & 7) + ((lane >> 4) << 3) : (lane & 15);
  const int b_chunk = kTransB ? ((lane >> 3) & 1) : (warp_n * kWN) / 8 + (lane >> 4);

  auto compute_stage = [&](int stage) {
    const unsigned a_base = a_smem_u32 + stage * kAStageElems * 2;
    const unsigned b_base = b_smem_u32 + stage * kBStageElems * 2;
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
      unsigned bf[kNB][4];
#pragma unroll
      for (int j = 0; j < kNB; ++j) {
        if (kTransB) {
          ldmatrix_x4(bf[j], b_base + swizzle<kBCols>(b_row + j * 16, kk * 2 + b_chunk) * 2);
        } else {
          ldmatrix_x4_trans(bf[j], b_base + swizzle<kBCols>(kk * 16 + b_row, b_chunk + j * 2) * 2);
        }
      }
#pragma unroll
      for (int i = 0; i < kMT; ++i) {
        unsigned af[4];
        ldmatrix_x4(af, a_base + swizzle<kBK>(a_row + i * 16, kk * 2 + a_chunk) * 2);
#pragma unroll
        for (int j = 0; j < kNT; ++j) Op::run(acc[i][j], af, bf[j >> 1][(j & 1) * 2], bf[j >> 1][(j & 1) * 2 + 1]);
      }
    }
  };

  // The ring: k-tile i lives in slot i % kStages. One commit group per k-tile slot, empty ones
  // included, so wait_group kStages-2 always means "k-tile i has landed".
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < kt_count) load_stage(s, kt_begin + s);
    cp_async_commit();
  }
  int read_stage = 0;
  int write_stage = kStages - 1;
  for (int i = 0; i < kt_count; ++i) {
    cp_async_wait<kStages - 2>();
    // Publishes k-tile i to every warp, and retires slot write_stage (read in iteration i - 1).
    __syncthreads();
    if (i + kStages - 1 < kt_count) load_stage(write_stage, kt_begin + i + kStages - 1);
    cp_async_commit();
    compute_stage(read_stage);
    read_stage = read_stage == kStages - 1 ? 0 : read_stage + 1;
    write_stage = write_stage == kStages - 1 ? 0 : write_stage + 1;
  }
  cp_async_wait<0>();

  // Accumulator (i, j, e) sits at row warp_m*kWM + i*16 + g + 8*(e/2), column warp_n*kWN + j*8 +
  // 2t + e%2 of the block tile.
  const int g = lane >> 2;
  const int t4 = lane & 3;
  const int row0 = block_m + warp_m * kWM + g;
  const int col0 = block_n + warp_n * kWN + 2 * t4;

  auto store_pair = [&](int row, int col, float x, float y) {
    if (row >= M) return;
    T* dst = C + (static_cast<long long>(row) * N + col);
    if (kAligned) {
      // N is even and col is even: the pair is wholly in or out, and 4-byte aligned.
      if (col < N) *reinterpret_cast<typename Op::Pair*>(dst) = Op::pack(x, y);
    } else {
      if (col < N) dst[0] = Op::one(x);
      if (col + 1 < N) dst[1] = Op::one(y);
    }
  };

  if (split_k == 1) {
#pragma unroll
    for (int i = 0; i < kMT; ++i) {
#pragma unroll
      for (int j = 0; j < kNT; ++j) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          store_pair(row0 + i * 16 + h * 8, col0 + j * 8, acc[i][j][2 * h], acc[i][j][2 * h + 1]);
        }
      }
    }
    return;
  }

  // Split-K: add this slice's partials (an empty slice adds nothing but still arrives).
  if (kt_count > 0) {
#pragma unroll
    for (int i = 0; i < kMT; ++i) {
#pragma unroll
      for (int j = 0; j < kNT; ++j) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = row0 + i * 16 + h * 8;
          const int col = col0 + j * 8;
          if (row < M) {
            float* w = workspace + (static_cast<long long>(row) * N + col);
            if (col < N) atomicAdd(w, acc[i][j][2 * h]);
            if (col + 1 < N) atomicAdd(w + 1, acc[i][j][2 * h + 1]);
          }
        }
      }
    }
  }
  // The threadFenceReduction pattern: every thread's adds are visible device-wide before the
  // block's arrival is counted, so the slice that sees split_k - 1 earlier arrivals reads the
  // complete sums.
  __threadfence();
  unsigned* const counter =
      reinterpret_cast<unsigned*>(workspace + static_cast<long long>(M) * N) + (tile_m * tiles_n + tile_n);
  bool last = false;
  if (tid == 0) last = atomicAdd(counter, 1u) == static_cast<unsigned>(split_k - 1);
  if (!__syncthreads_or(last)) return;
  __threadfence();
  if (tid == 0) *counter = 0u;
#pragma unroll
  for (int i = 0; i < kMT; ++i) {
#pragma unroll
    for (int j = 0; j < kNT; ++j) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = row0 + i * 16 + h * 8;
        const int col = col0 + j * 8;
        if (row >= M) continue;
        float* w = workspace + (static_cast<long long>(row) * N + col);
        // L2 reads (ld.global.cg): L1 is not coherent with the other slices' atomics.
        const float x = col < N ? __ldcg(w) : 0.f;
        const float y = col + 1 < N ? __ldcg(w + 1) : 0.f;
        if (col < N) __stcg(w, 0.f);
        if (col + 1 < N) __stcg(w + 1, 0.f);
        store_pair(row, col, x, y);
      }
    }
  }
}

}  // namespace gmjit
