#pragma once
// Hopper (sm_90a) GEMM for bf16 and fp16: TMA loads into a ring of shared-memory stages guarded by
// mbarriers, wgmma.mma_async on fp32 register accumulators, one producer warpgroup and one or two
// consumer warpgroups, a persistent grid.
//
// A block is (kConsumers + 1) warpgroups. Warpgroup 0 is the producer: it gives registers back
// (setmaxnreg.dec) and one of its threads issues every cp.async.bulk.tensor load, so address
// generation costs the consumers nothing and a stage arrives as two (or 1 + kBN/64) bulk copies
// whose completion the copy engine itself reports on the stage's `full` mbarrier (expect_tx of the
// stage's bytes, which count zero-filled out-of-bounds box elements too: tails need no code).
// Consumer c (warpgroup c + 1) takes the extra registers (setmaxnreg.inc) and owns rows
// [c * kBM / kConsumers, (c + 1) * kBM / kConsumers) of the block tile: kBM / kConsumers / 64
// wgmma m64 blocks, each spanning the whole kBN in one m64nNk16 instruction, so B is read from
// shared memory once per m64 block and there is no n loop. A consumer keeps one wgmma group in
// flight: it issues k-tile i, waits for group i - 1 (wait_group 1) and only then gives i - 1's
// stage back on its `empty` mbarrier (one arrive per consumer warpgroup). The producer runs up to
// kStages k-tiles ahead, across tile boundaries, so the next tile's loads overlap this tile's
// epilogue, which stores straight from the accumulator registers: each quad of lanes transposes
// its column pairs (four shuffles per four chunks) so that every store is 16 bytes of one row;
// with kTmaStore the same octets go to shared memory instead and TMA stores them (see the kernel).
//
// Tiles are walked persistently (gridDim.x = min(tiles, SMs) on the host; tile = blockIdx.x,
// += gridDim.x; with clusters, pairs of tiles by cluster) through the same grouped raster of kGroupM tile-rows as gemm_mma (gemm.cuh), so
// blocks working at the same time share rows of A and columns of B in L2. Producer and consumers
// walk the same sequence and keep one running k-tile counter across tiles: k-tile it uses stage
// it % kStages, and the (it / kStages)-th use of a stage waits `full` on parity (it / kStages) & 1;
// the producer waits `empty` on the opposite parity, which a fresh barrier (phase 0 incomplete,
// phase "-1" counted as complete) passes at once for the first kStages k-tiles.
//
// Shared memory (the dynamic base rounded up to 1024 bytes by hand; the host adds 1024 bytes of
// slack): kStages A buffers of kBM x 64 elements (kBM * 128 bytes), then kStages B buffers of
// kBN * 128 bytes, with kTmaStore two 8 KiB store buffers a consumer, then full[kStages] and
// empty[kStages] (8-byte mbarriers). Every buffer is a multiple of 8 KiB, so each starts
// 1024-aligned: a 128-byte-swizzle atom is 8 rows of 128 bytes and the swizzle (16-byte chunk
// index XOR row % 8, row taken from address bits 7-9) is computed by TMA and by wgmma from the
// absolute address, which then agree with descriptor base offset 0.
//
// Operand layouts and descriptors (PTX ISA "Matrix Descriptor Format"; CUTLASS
// cute/arch/mma_sm90_desc.hpp and cute/atom/mma_traits_sm90_gmma.hpp, whose canonical layouts are
// written in elements with T = 8 elements = 16 bytes):
//   K-major, 128B swizzle: ((8,m),(T,2k)):((8T,SBO),(1,T)). Rows of 64 k (128 bytes) one after
//     another, 8-row groups SBO = 1024 bytes apart; LBO is unused for swizzled K-major layouts
//     (encoded as 1, i.e. 16 bytes). A is always stored so (TMA box {64, kBM}); B too with kTransB
//     (box {64, kBN}). The k16 step j of a 64-wide k-tile starts j * 32 bytes into the row: the
//     hardware applies the XOR swizzle to the final address, so stepping the start address inside
//     the atom is what CUTLASS and DeepGEMM do too. m64 block mb of A starts mb * 64 * 128 bytes in.
//   MN-major, 128B swizzle: ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO)). Along N, 64 contiguous
//     elements (one 128-byte row), then the next 64-wide panel at LBO; along K, 8 rows of 128
//     bytes, then the next 8-row group at SBO. B without kTransB arrives as kBN / 64 TMA panels of
//     64 k-rows x 64 n (box {64, 64} over dims {N, K}) stored 8192 bytes apart, so LBO = 8192 and
//     SBO = 1024; the k16 step j starts 16 rows = 2048 bytes further (a multiple of 1024: the
//     swizzle phase is untouched). The instruction's imm-trans-b = 1 selects this layout.
//
// Accumulator fragment of wgmma m64nNk16 (PTX ISA "Register fragments", D matrix): thread t of the
// warpgroup (warp w = t / 32, lane l) holds, for each n8 chunk q < N / 8, d[4q], d[4q+1] at row
// 16w + l/4, columns 8q + 2(l%4) + {0, 1}, and d[4q+2], d[4q+3] at row 16w + l/4 + 8.
//
// Split-K (gridDim.z > 1, for tile grids that leave SMs idle: decode and small-batch shapes):
// block (x, z) walks the tiles for k-slice z, red.adds (16-byte vector reductions) its partials
// into an fp32 workspace, and the slice that arrives last on a tile's counter writes C.
//
// Measured (bench/NOTES.md, H100): the checks of tests/standalone/gemm_wgmma_check.cu and the gpu
// tier pass for every family member (cooperative, pingpong, split-K, clusters). ncu at 4096^3
// (cooperative 128x256, pairs stored as 4-byte STG): tensor pipe busy 83% of active cycles, and
// 17% of the consumers' stall samples in the epilogue, long-scoreboard waits of the store queue
// (64 STG a thread a tile, each 8 rows x 16 bytes); 14% at 8192^3 waiting on `full` (L2 at 76%).
// With the row octets: 5.7% in the epilogue, tensor pipe 94% (4096^3) and 98% (8192^3) of active
// cycles, 0.99-1.00x the same process's cublasGemmEx at both sizes.
// SASS (nvdisasm, sm_90a): per k-tile one WARPGROUP.ARRIVE, the HGMMAs back to back (.tnspB
// without kTransB) and WARPGROUP.DEPBAR.LE gsb0, 0x1; no local memory; 168 registers a thread
// with two consumers, 232 with one. Through NVRTC 13.0 the header also compiles for sm_80 and
// sm_90 as the trapping fallback.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "gmjit/type_traits.cuh"
#include "gmjit/wgmma_ops.cuh"

namespace gmjit {
namespace wgmma_detail {

// A CUtensorMap's 128 bytes as the kernel receives them (`const __grid_constant__`); the host
// encodes it with cuTensorMapEncodeTiled (no cuda.h under NVRTC).
struct alignas(64) TmaMap {
  unsigned long long words[16];
};

// Enumerators rather than constexpr variables: NVRTC emits namespace-scope constants as device
// globals.
enum : int {
  kSmemLimitBytes = 232448,  // sm_90's opt-in maximum per block (227 KiB)
  kSmemSlackBytes = 1024,    // the dynamic base is rounded up to 1024 bytes inside the kernel
  kBK = 64,                  // one 128-byte swizzle span of 16-bit elements
  kRowBytes = kBK * 2,
  kMaxAccumulators = 128,    // fp32 accumulators a consumer thread (the 232-register budget)
  // Registers after setmaxnreg. With two consumers, __launch_bounds__(384, 1) caps the kernel at
  // 168 a thread (65536 / 384 rounded down to 8), i.e. 64512 for the block, and 40 * 128 +
  // 232 * 256 = 64512 exactly. With one consumer (256 threads) ptxas 13.0 allocates 232 at entry
  // (the largest count the kernel asks for), 59392 for the block: the consumer's inc is then a
  // no-op. The counts must be multiples of 8 in [24, 256].
  kProducerRegs = 40,
  kConsumerRegs = 232,
  // kTmaStore's staging: C leaves in chunks of 64 rows x 64 columns (one TMA box of 128-byte
  // swizzled rows), two buffers a consumer so that one fills while the other's store reads it.
  kStoreChunkBytes = 64 * kRowBytes,
  kStoreBuffers = 2,
};

// Dynamic shared memory bytes the host requests: the alignment slack, kStages (A, B) buffers,
// with tma_store each consumer's store buffers, two 8-byte mbarriers a stage, the two that pass
// the turn between pingpong consumers, and two 4-byte split-K flags (padded to 8).
__host__ __device__ constexpr int wgmma_smem_bytes(int bm, int bn, int stages, int consumers = 1,
                                                   int tma_store = 0) {
  return kSmemSlackBytes + 32 + stages * ((bm + bn) * kRowBytes + 16) +
         (tma_store ? consumers * kStoreBuffers * kStoreChunkBytes : 0);
}

// 0 when (bm, bn, stages, consumers, pingpong) is a configuration gemm_wgmma accepts (for every
// T, kTransB and kGroupM >= 1); otherwise the first rule broken:
//   1  bm is not 64, 128 or 256 (TMA boxes are at most 256 rows; m64 wgmma blocks)
//   2  bn is not 64, 128, 192 or 256 (one m64nNk16 covers the tile's N: wgmma_ops.cuh's shapes;
//      N-major B comes in 64-column panels)
//   3  consumers is not 1 or 2 (the register split above is for 2 or 3 warpgroups)
//   4  bm is not a multiple of 64 * consumers (each consumer takes whole m64 blocks; with
//      pingpong a consumer takes the whole tile)
//   5  stages < 2
//   6  more than 128 fp32 accumulators a consumer thread: (rows a consumer owns / 64) * (bn / 2)
//   7  wgmma_smem_bytes(bm, bn, stages, consumers, tma_store) exceeds 232448 bytes (227 KiB)
//   8  pingpong (consumers taking whole tiles in turn) with fewer than two consumers
//   9  cluster is not 1 or 2, or 2 with bn < 128 (the pair's blocks each load half of B: half a
//      K-major tile of at least 64 rows, or every other 64-column panel)
//  10  tma_store is not 0 or 1
__host__ __device__ constexpr int wgmma_consumer_rows(int bm, int consumers, int pingpong) {
  return pingpong ? bm : bm / consumers;
}
__host__ __device__ constexpr int wgmma_config_violation_code(int bm, int bn, int stages, int consumers,
                                                              int pingpong = 0, int cluster = 1,
                                                              int tma_store = 0) {
  return (bm != 64 && bm != 128 && bm != 256)                                              ? 1
         : (bn != 64 && bn != 128 && bn != 192 && bn != 256)                               ? 2
         : (consumers != 1 && consumers != 2)                                              ? 3
         : (!pingpong && bm % (64 * consumers) != 0)                                       ? 4
         : (stages < 2)                                                                    ? 5
         : ((wgmma_consumer_rows(bm, consumers, pingpong) / 64) * (bn / 2) > kMaxAccumulators) ? 6
         : (wgmma_smem_bytes(bm, bn, stages, consumers, tma_store) > kSmemLimitBytes)      ? 7
         : (pingpong && consumers < 2)                                                     ? 8
         : ((cluster != 1 && cluster != 2) || (cluster == 2 && bn < 128))                  ? 9
         : (tma_store != 0 && tma_store != 1)                                              ? 10
                                                                                           : 0;
}

template <typename T>
struct PairOf;
template <>
struct PairOf<__nv_bfloat16> {
  __device__ __forceinline__ static unsigned pack(float x, float y) {
    const __nv_bfloat162 pair = __floats2bfloat162_rn(x, y);
    return *reinterpret_cast<const unsigned*>(&pair);
  }
};
template <>
struct PairOf<__half> {
  __device__ __forceinline__ static unsigned pack(float x, float y) {
    const __half2 pair = __floats2half2_rn(x, y);
    return *reinterpret_cast<const unsigned*>(&pair);
  }
};

// Accumulator index of the column pair (2 quad_lane + {0, 1}) of n8 chunk 4 g + j in fragment
// half h (rows l/4 + 8 h): the pair that quad_transpose's word j of chunk group g comes from.
__host__ __device__ constexpr int pair_index(int g, int j, int h) { return 16 * g + 4 * j + 2 * h; }

// kTmaStore's chunk of 64 rows x 64 columns in shared memory, 128-byte rows under the 128-byte
// swizzle (16-byte unit u of row r at unit u ^ (r % 8)). After quad_transpose, lane l of warp w
// holds, for fragment half h, the octets of row 16 w + l/4 + 8 h at units l % 4 (columns
// 8 (l % 4) ..: the chunk's first group of 32 columns) and 4 + l % 4 (the second group).
__host__ __device__ constexpr int store_row(int warp, int lane, int h) { return warp * 16 + (lane >> 2) + 8 * h; }
// The unit lane l writes in its store `second` (0 or 1): a quarter warp holds rows r and r + 1 (r
// even), and the odd row writes its second group first, so that each store instruction of the
// quarter covers all 32 banks once instead of the same 64 bytes of them twice.
__host__ __device__ constexpr int store_unit(int lane, int second) {
  return (lane & 3) + 4 * ((((lane >> 2) & 1) != 0) != (second != 0) ? 1 : 0);
}
__host__ __device__ constexpr unsigned store_offset(int row, int unit) {
  return static_cast<unsigned>(row * kRowBytes + 16 * (unit ^ (row & 7)));
}
// The three above write every unit of the chunk exactly once, and each store instruction's quarter
// warps (8 lanes, 16 bytes each) fall in 8 different 16-byte bank groups: checked where the
// header compiles.
__host__ __device__ constexpr bool store_pattern_is_complete_and_conflict_free() {
  bool written[64][8] = {};
  for (int warp = 0; warp < 4; ++warp) {
    for (int h = 0; h < 2; ++h) {
      for (int second = 0; second < 2; ++second) {
        for (int quarter = 0; quarter < 4; ++quarter) {
          bool group_taken[8] = {};
          for (int i = 0; i < 8; ++i) {
            const int lane = 8 * quarter + i;
            const int row = store_row(warp, lane, h), unit = store_unit(lane, second);
            const unsigned group = (store_offset(row, unit) / 16) % 8;
            if (group_taken[group] || written[row][unit]) return false;
            group_taken[group] = true;
            written[row][unit] = true;
          }
        }
      }
    }
  }
  for (int row = 0; row < 64; ++row) {
    for (int unit = 0; unit < 8; ++unit) {
      if (!written[row][unit]) return false;
    }
  }
  return true;
}
static_assert(store_pattern_is_complete_and_conflict_free(),
              "gemm_wgmma: the TMA store chunk's writes must cover it once, without bank conflicts");

// One butterfly step of quad_transpose: a lane whose bit of `kMask` is set (`upper`) gives its
// words kLow0, kLow1 to lane ^ kMask and takes that lane's kHigh0, kHigh1 in their place; the
// other lane does the opposite.
template <int kMask, int kLow0, int kLow1, int kHigh0, int kHigh1, typename Word>
__device__ __forceinline__ void butterfly(Word (&w)[4], bool upper) {
  const Word x = __shfl_xor_sync(0xffffffffu, upper ? w[kLow0] : w[kHigh0], kMask);
  const Word y = __shfl_xor_sync(0xffffffffu, upper ? w[kLow1] : w[kHigh1], kMask);
  if (upper) {
    w[kLow0] = x;
    w[kLow1] = y;
  } else {
    w[kHigh0] = x;
    w[kHigh1] = y;
  }
}

// A 4 x 4 transpose of 32-bit words across the four lanes of a quad (lanes 4r .. 4r + 3, which
// hold the same accumulator rows): lane i enters with word j from n8 chunk j of a group of four
// (its column pair 2i, 2i + 1 of that chunk) and leaves with the four words of chunk i, i.e. eight
// consecutive columns for one 16-byte access instead of four 4-byte ones. Two butterfly steps,
// each swapping with lane i ^ b the two words whose index differs from i in bit b. Word is
// unsigned (packed pairs of C) or float (partial sums): reinterpreting the accumulators as integers
// would make the compiler keep them in integer registers across the k-loop, and the moves between
// wgmmas serialise them (ptxas C7520).
template <typename Word>
__device__ __forceinline__ void quad_transpose(Word (&w)[4], int quad_lane) {
  butterfly<2, 0, 1, 2, 3>(w, (quad_lane & 2) != 0);
  butterfly<1, 0, 2, 1, 3>(w, (quad_lane & 1) != 0);
}

__device__ __forceinline__ unsigned smem_u32(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// Shared-memory matrix descriptor with 128-byte swizzle (layout type 1 in bits 62-63), base
// offset 0. Addresses are below 2^18, so (addr >> 4) fits the 14-bit field, and a later offset
// of `bytes` can be added as `desc + (bytes >> 4)` without carrying out of it.
__device__ __forceinline__ unsigned long long make_smem_desc(unsigned addr, unsigned lbo_bytes,
                                                             unsigned sbo_bytes) {
  return static_cast<unsigned long long>((addr >> 4) & 0x3FFFu) |
         (static_cast<unsigned long long>((lbo_bytes >> 4) & 0x3FFFu) << 16) |
         (static_cast<unsigned long long>((sbo_bytes >> 4) & 0x3FFFu) << 32) | (1ull << 62);
}

__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Makes the initialised barriers visible to the other threads and to the async proxy (TMA's
// complete_tx) before anyone uses them.
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Arrives on the mbarrier at CTA-relative address `bar` in block `rank` of this block's cluster.
// The default (.release.cta) semantics, as CUTLASS's ClusterBarrier::arrive: what the arrival
// publishes is that this warpgroup's wgmmas finished reading a stage (wait_group already ordered
// them), not memory the other block reads; a .release.cluster arrive would fence every k-tile.
__device__ __forceinline__ void mbar_arrive_cluster(unsigned bar, unsigned rank) {
  asm volatile(
      "{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n" ::"r"(bar),
      "r"(rank)
      : "memory");
}
__device__ __forceinline__ unsigned cluster_ctarank() {
  unsigned rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  return rank;
}
// Every thread of every block of the cluster; orders the barrier inits before any remote use.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
// One poll; the predicate leaves through selp so the loop is C++ (inline asm gets inlined many
// times and may not define labels).
__device__ __forceinline__ bool mbar_try_wait(unsigned bar, unsigned parity) {
  unsigned done;
  asm volatile(
      "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
  while (!mbar_try_wait(bar, parity)) {
  }
}

__device__ __forceinline__ void prefetch_tensormap(const TmaMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<unsigned long long>(map)) : "memory");
}
// Box at element coordinates (inner, outer) of `map` into shared memory at dst; completion is
// counted in bytes on `bar`. The map operand is the generic address of the __grid_constant__
// parameter. (.shared::cluster with a CTA-local address: without a cluster launch the CTA is its
// own cluster.)
__device__ __forceinline__ void tma_load_2d(unsigned dst, const TmaMap* map, int inner, int outer, unsigned bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
      "[%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<unsigned long long>(map)), "r"(inner), "r"(outer), "r"(bar)
      : "memory");
}

// The same box into shared memory at CTA-relative address dst of every block in `mask` of the
// cluster, each block's `bar` (same offset) counting the bytes it receives.
__device__ __forceinline__ void tma_load_2d_multicast(unsigned dst, const TmaMap* map, int inner, int outer,
                                                      unsigned bar, unsigned short mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%0], "
      "[%1, {%2, %3}], [%4], %5;\n" ::"r"(dst),
      "l"(reinterpret_cast<unsigned long long>(map)), "r"(inner), "r"(outer), "r"(bar), "h"(mask)
      : "memory");
}

// kTmaStore's side of the async proxy. The consumer's st.shared writes go through the generic
// proxy; each writing thread fences them into the async proxy before the barrier after which one
// thread hands the chunk to TMA (CUTLASS's tma_store_fence).
__device__ __forceinline__ void st_shared_16(unsigned addr, uint4 v) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// The box of `map` at element coordinates (inner, outer) from shared memory at src to global
// memory; elements outside the tensor are not written (M and N tails need no code).
__device__ __forceinline__ void tma_store_2d(const TmaMap* map, unsigned src, int inner, int outer) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n" ::"l"(
                   reinterpret_cast<unsigned long long>(map)),
               "r"(src), "r"(inner), "r"(outer)
               : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// This thread's bulk stores have finished reading shared memory: the buffers may be refilled, or
// the block may exit. Their writes to C need no wait; they are visible when the grid completes, as
// CUTLASS's sm90 epilogue also relies on (its tma_store_wait is this .read wait).
__device__ __forceinline__ void bulk_wait_read_all() {
  asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Pins the accumulators in program order at this point: wgmma writes them asynchronously, so code
// reading them must not be moved above the wait_group that completes the writes (the compiler
// only sees the asm's "+f" operands, not the wait). CUTLASS's warpgroup_fence_operand.
template <int kN>
__device__ __forceinline__ void fence_accumulators(float (&d)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// Synchronises the `threads` threads (whole warps) that use named barrier `id` (1-15; 0 is
// __syncthreads'), leaving the other warpgroups of the block running.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Adds four consecutive fp32 partial sums in global memory in one vector reduction (sm_90), a
// quarter of the L2 atomic operations of scalar ones; p is 16-byte aligned.
__device__ __forceinline__ void red_add_quad(float* p, float x, float y, float z, float w) {
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "f"(x), "f"(y), "f"(z), "f"(w)
               : "memory");
}

template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

// Grouped raster (gemm_mma's): kGroupM consecutive tile-rows are walked column by column.
template <int kGroupM>
__device__ __forceinline__ void tile_coords(int t, int tiles_m, int tiles_n, int& tile_m, int& tile_n) {
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

}  // namespace wgmma_detail

// C[M,N] = A[M,K] @ B; A and C row-major, fp32 accumulation, C in T (__nv_bfloat16 or __half).
// kTransB=true: B stored N x K row-major (x @ W^T, weights); kTransB=false: B stored K x N.
// Block: (kConsumers + 1) * 128 threads. Grid: x = min(ceil(M/kBM) * ceil(N/kBN), SM count) (any
// x >= 1 is correct: blocks stride over the tiles), y = z = 1. Dynamic shared memory =
// wgmma_detail::wgmma_smem_bytes(kBM, kBN, kStages, kConsumers, kTmaStore).
// map_a: dims {K, M}, box {64, kBM}; map_b: kTransB dims {K, N}, box {64, kBN}, otherwise dims
// {N, K}, box {64, 64}; 16-bit elements, 128-byte swizzle, out-of-bounds elements filled with
// zeros. The host guarantees K % 8 == 0 and N % 8 == 0 (TMA's 16-byte row strides; also every
// 4-byte pair of C is wholly inside N or wholly outside) and M, N, K >= 1; A and B are read only
// through the maps (and with kTmaStore, C is written through map_c).
// gridDim.z > 1 splits the k-tiles into that many contiguous slices (blocks (x, z) walk the tiles
// for slice z; one compiled kernel serves every split), with gemm_mma's workspace protocol: M * N
// fp32 partials (zero) followed by at least ceil(M/kBM) * ceil(N/kBN) unsigned counters (zero);
// each slice red.adds its partials, and the slice that arrives last on tile (tile_m, tile_n)'s
// counter (tile_m * ceil(N/kBN) + tile_n) converts the sums into C and leaves the partials and
// the counter at zero. gridDim.z == 1 never touches workspace (it may be null).
// kPingpong: the consumers take whole tiles in turn (consumer c the block's tiles c, c + 2, ...),
// so one's epilogue runs while the other's wgmmas keep the tensor cores busy; otherwise they split
// every tile's rows between them (cooperative).
// kCluster = 2: blocks come in clusters of two (the host launches cluster dims (2, 1, 1) and an even
// grid) that take vertically adjacent tiles (tile rows 2u and 2u + 1 of one column): they share
// B's tile, and each block loads half of it, multicast into both blocks' stages, so L2 serves B
// once for the pair. A stage is then free only when the consumers of both blocks are done with it
// (empty barriers count both blocks' arrivals), and a block whose row is past M (odd tile rows)
// still loads and computes, for its partner's sake, but stores nothing. map_b's box is then
// {64, kBN / 2} with kTransB.
// kTmaStore: an unsplit tile leaves through shared memory and TMA instead of the registers' row
// octets. Each consumer writes its rows in chunks of 64 x 64 (128-byte rows, swizzled as map_c
// expects) into one of its two buffers, and one of its threads stores the chunk with
// cp.async.bulk.tensor, which skips what lies outside C; the consumer goes on to the next chunk
// or tile while the copy engine writes. map_c: dims {N, M}, box {64, 64}, 128-byte swizzle (every
// launch passes it; only kTmaStore reads it). Split tiles still convert through the workspace.
template <typename T, bool kTransB, int kBM, int kBN, int kStages, int kConsumers, int kGroupM, bool kPingpong = false,
          int kCluster = 1, bool kTmaStore = false>
__global__ void __launch_bounds__((kConsumers + 1) * 128, 1)
    gemm_wgmma(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C, float* __restrict__ workspace,
               int M, int N, int K, const __grid_constant__ wgmma_detail::TmaMap map_a,
               const __grid_constant__ wgmma_detail::TmaMap map_b, const __grid_constant__ wgmma_detail::TmaMap map_c) {
  using namespace wgmma_detail;
  static_assert(IsSame<T, __nv_bfloat16>::kValue || IsSame<T, __half>::kValue,
                "gemm_wgmma: T must be __nv_bfloat16 or __half");
  static_assert(kBM == 64 || kBM == 128 || kBM == 256, "gemm_wgmma: kBM must be 64, 128 or 256 (violation 1)");
  static_assert(kBN == 64 || kBN == 128 || kBN == 192 || kBN == 256,
                "gemm_wgmma: kBN must be 64, 128, 192 or 256 (violation 2)");
  static_assert(kConsumers == 1 || kConsumers == 2, "gemm_wgmma: kConsumers must be 1 or 2 (violation 3)");
  static_assert(kPingpong || kBM % (64 * kConsumers) == 0,
                "gemm_wgmma: kBM must be a multiple of 64 * kConsumers (violation 4)");
  static_assert(kStages >= 2, "gemm_wgmma: kStages must be at least 2 (violation 5)");
  static_assert((wgmma_consumer_rows(kBM, kConsumers, kPingpong) / 64) * (kBN / 2) <= kMaxAccumulators,
                "gemm_wgmma: more than 128 accumulators a consumer thread (violation 6)");
  static_assert(wgmma_smem_bytes(kBM, kBN, kStages, kConsumers, kTmaStore) <= kSmemLimitBytes,
                "gemm_wgmma: shared memory over 227 KiB (violation 7)");
  static_assert(!kPingpong || kConsumers == 2, "gemm_wgmma: pingpong needs two consumers (violation 8)");
  static_assert((kCluster == 1 || kCluster == 2) && (kCluster == 1 || kBN >= 128),
                "gemm_wgmma: kCluster is 1, or 2 with kBN >= 128 (violation 9)");
  static_assert(wgmma_config_violation_code(kBM, kBN, kStages, kConsumers, kPingpong, kCluster, kTmaStore) == 0,
                "gemm_wgmma: wgmma_config_violation_code disagrees with the static_asserts");
  static_assert(kGroupM >= 1, "gemm_wgmma: kGroupM must be at least 1");
  static_assert(kProducerRegs * 128 + kConsumerRegs * 128 * kConsumers <=
                    ((65536 / ((kConsumers + 1) * 128)) & ~7) * (kConsumers + 1) * 128,
                "gemm_wgmma: setmaxnreg counts exceed the block's register allocation");
  (void)A;
  (void)B;

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  enum : int {
    kRowsPerConsumer = wgmma_consumer_rows(kBM, kConsumers, kPingpong),
    kMBlocks = kRowsPerConsumer / 64,  // wgmma m64 blocks of one consumer
    kAcc = kBN / 2,                    // accumulators of one m64nNk16 a thread
    kABytes = kBM * kRowBytes,         // one stage of A: kBM rows of 64 k
    kBBytes = kBN * kRowBytes,         // one stage of B: kBN rows of 64 k, or kBN / 64 panels of 64 k-rows
    kStageBytes = kABytes + kBBytes,   // what one stage's `full` barrier expects
    kBPanelBytes = 64 * kRowBytes,     // N-major B: one 64 x 64 TMA box
    // Descriptor strides and the k16 step inside a stage (see the top of the file).
    kBLbo = kTransB ? 16 : kBPanelBytes,
    kBKStep = kTransB ? 32 : 16 * kRowBytes,
  };
  static_assert(kABytes % 1024 == 0 && kBBytes % 1024 == 0, "gemm_wgmma: stage buffers stay 1024-aligned");

  extern __shared__ __align__(1024) unsigned char wgmma_smem[];
  const unsigned smem_base = (smem_u32(wgmma_smem) + 1023u) & ~1023u;
  const unsigned a_smem = smem_base;
  const unsigned b_smem = smem_base + kStages * kABytes;
  // kTmaStore's buffers (none without it): consumer c's two at store_smem + (2c + {0, 1}) * 8 KiB,
  // 1024-aligned like the stages for the 128-byte swizzle.
  const unsigned store_smem = smem_base + kStages * kStageBytes;
  const unsigned full_bar = store_smem + (kTmaStore ? kConsumers * kStoreBuffers * kStoreChunkBytes : 0);
  const unsigned empty_bar = full_bar + 8 * kStages;
  // turn_bar[c]: consumer c may start its next tile's k-loop (pingpong). A consumer's waits on
  // `full` are only sound while the barrier is at most one phase behind the use it waits for, so
  // the consumers' k-loops take turns; an epilogue still overlaps the other consumer's k-loop.
  const unsigned turn_bar = empty_bar + 8 * kStages;
  // split_flag[c]: whether the tile consumer c (with pingpong; else consumer 0 for both) just
  // finished is the last slice of its split to arrive, passed from the thread that counted.
  volatile int* const split_flag = reinterpret_cast<volatile int*>(
      wgmma_smem + (turn_bar + 16 - smem_u32(wgmma_smem)));

  const int tid = static_cast<int>(threadIdx.x);
  if (tid == 0) {
#pragma unroll 1
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full_bar + 8 * s, 1);                  // the producer's arrive.expect_tx
      // One arrive per consumer warpgroup reading the stage: all of them, or with pingpong the
      // one whose tile it holds; in each block of the cluster.
      mbar_init(empty_bar + 8 * s, (kPingpong ? 1 : kConsumers) * kCluster);
    }
    mbar_init(turn_bar, 1);
    mbar_init(turn_bar + 8, 1);
    fence_barrier_init();
  }
  if (kCluster > 1) {
    cluster_sync();
  } else {
    __syncthreads();
  }

  const int tiles_m = (M + kBM - 1) / kBM;
  const int tiles_n = (N + kBN - 1) / kBN;
  // The walk is over units: a tile, or with clusters a pair of vertically adjacent tiles.
  const int rank = kCluster > 1 ? static_cast<int>(cluster_ctarank()) : 0;
  const int units_m = (tiles_m + kCluster - 1) / kCluster;
  const int units = units_m * tiles_n;
  const int first_unit = static_cast<int>(blockIdx.x) / kCluster;
  const int unit_step = static_cast<int>(gridDim.x) / kCluster;
  // This block's k-slice: the same contiguous range of k-tiles for every tile it walks, possibly
  // empty (the tile's counter still hears from it).
  const int split_k = static_cast<int>(gridDim.z);
  int kt_begin = 0;
  int k_tiles = (K + kBK - 1) / kBK;
  if (split_k > 1) {
    const int per_slice = (k_tiles + split_k - 1) / split_k;
    kt_begin = static_cast<int>(blockIdx.z) * per_slice;
    k_tiles = max(0, min(k_tiles, kt_begin + per_slice) - kt_begin);
  }

  // Roles are the two branches of one if/else, as setmaxnreg needs; nothing after them
  // synchronises the whole block (the producer's idle threads simply finish).
  if (tid < 128) {
    setmaxnreg_dec<kProducerRegs>();
    if (tid == 0) {
      prefetch_tensormap(&map_a);
      prefetch_tensormap(&map_b);
      if (kTmaStore) prefetch_tensormap(&map_c);
      int stage = 0;
      unsigned phase = 0;
#pragma unroll 1
      for (int unit = first_unit; unit < units; unit += unit_step) {
        int unit_m, tile_n;
        tile_coords<kGroupM>(unit, units_m, tiles_n, unit_m, tile_n);
        const int tile_m = unit_m * kCluster + rank;
        // A block past M loads real rows (the first tile row's) rather than a box wholly outside.
        const int m0 = tile_m < tiles_m ? tile_m * kBM : 0;
        const int n0 = tile_n * kBN;
#pragma unroll 1
        for (int kt = 0; kt < k_tiles; ++kt) {
          // Stage free: every consumer finished the wgmmas that read its previous contents.
          mbar_wait(empty_bar + 8 * stage, phase ^ 1u);
          const unsigned bar = full_bar + 8 * stage;
          mbar_arrive_expect_tx(bar, kStageBytes);
          const int k0 = (kt_begin + kt) * kBK;
          tma_load_2d(a_smem + stage * kABytes, &map_a, k0, m0, bar);
          if (kCluster == 1 && kTransB) {
            tma_load_2d(b_smem + stage * kBBytes, &map_b, k0, n0, bar);
          } else if (kCluster == 1) {
#pragma unroll
            for (int j = 0; j < kBN / 64; ++j) {
              tma_load_2d(b_smem + stage * kBBytes + j * kBPanelBytes, &map_b, n0 + 64 * j, k0, bar);
            }
          } else if (kTransB) {
            tma_load_2d_multicast(b_smem + stage * kBBytes + rank * (kBBytes / 2), &map_b, k0,
                                  n0 + rank * (kBN / 2), bar, 0x3);
          } else {
#pragma unroll
            for (int j = 0; j < kBN / 64; ++j) {
              if (j % 2 == rank) {
                tma_load_2d_multicast(b_smem + stage * kBBytes + j * kBPanelBytes, &map_b, n0 + 64 * j, k0, bar,
                                      0x3);
              }
            }
          }
          if (++stage == kStages) {
            stage = 0;
            phase ^= 1u;
          }
        }
      }
      // The partner block arrives on this block's empty barriers and this block's copies land in
      // the partner's stages: this block may exit only once every stage has been given back by
      // the consumers of both, after which nothing of the cluster refers to it any more.
      if (kCluster > 1) {
#pragma unroll 1
        for (int s = 0; s < kStages; ++s) {
          mbar_wait(empty_bar + 8 * stage, phase ^ 1u);
          if (++stage == kStages) {
            stage = 0;
            phase ^= 1u;
          }
        }
      }
    }
  } else {
    setmaxnreg_inc<kConsumerRegs>();
    const int consumer = (tid - 128) >> 7;
    const int t = tid & 127;
    const int warp = t >> 5;
    const int lane = t & 31;

    // Descriptors of stage 0, k16 step 0, m64 block 0 of this consumer; everything else is an
    // offset added to the address field.
    const int row_offset = kPingpong ? 0 : consumer * kRowsPerConsumer;
    const unsigned long long desc_a0 = make_smem_desc(a_smem + row_offset * kRowBytes, 16, 1024);
    const unsigned long long desc_b0 = make_smem_desc(b_smem, kBLbo, 1024);

    float acc[kMBlocks][kAcc];
    // Defined once so the first wgmma's "+f" inputs are not undefined values; every tile starts
    // with scale-d = 0 (overwrite) instead of zeroing here, which would put non-wgmma writes of the
    // accumulators between wgmmas (ptxas C7515 serialises them).
#pragma unroll
    for (int mb = 0; mb < kMBlocks; ++mb) {
#pragma unroll
      for (int i = 0; i < kAcc; ++i) acc[mb][i] = 0.f;
    }

    int stage = 0;
    unsigned phase = 0;
    int chunks_stored = 0;  // kTmaStore: this consumer's chunks so far, alternating its two buffers
    // With pingpong a consumer skips the other's tiles, and the ring's position at the start of its
    // j-th tile (the block's tile 2j + consumer) is k-tile (2j + consumer) * k_tiles.
    const int first_local = kPingpong ? consumer : 0;
    const int local_step = kPingpong ? 2 : 1;
    // A stage goes back to the producers of every block that wrote into it.
    auto release = [&](int s) {
      if (kCluster == 1) {
        mbar_arrive(empty_bar + 8 * s);
      } else {
        mbar_arrive_cluster(empty_bar + 8 * s, 0);
        mbar_arrive_cluster(empty_bar + 8 * s, 1);
      }
    };
#pragma unroll 1
    for (int local = first_local;; local += local_step) {
      const long long unit_ll = static_cast<long long>(first_unit) + static_cast<long long>(local) * unit_step;
      if (unit_ll >= units) break;
      const int unit = static_cast<int>(unit_ll);
      if (kPingpong) {
        const long long it = static_cast<long long>(local) * k_tiles;
        stage = static_cast<int>(it % kStages);
        phase = static_cast<unsigned>((it / kStages) & 1);
      }
      // Consumer 0's first tile needs no turn; afterwards each tile waits for the k-loop of the
      // other consumer's tile before it: consumer 1's j-th tile for consumer 0's j-th (phase j of
      // turn_bar[1]), consumer 0's j-th for consumer 1's (j-1)-th (phase j-1 of turn_bar[0]).
      if (kPingpong && local > 0) {
        const int own = local >> 1;
        mbar_wait(turn_bar + 8 * consumer, static_cast<unsigned>((consumer == 0 ? own - 1 : own) & 1));
      }
      int unit_m, tile_n;
      tile_coords<kGroupM>(unit, units_m, tiles_n, unit_m, tile_n);
      const int tile_m = unit_m * kCluster + rank;
      int prev_stage = 0;
#pragma unroll 1
      for (int kt = 0; kt < k_tiles; ++kt) {
        mbar_wait(full_bar + 8 * stage, phase);
        // Orders this warpgroup's earlier register accesses to the accumulators (the previous
        // tile's epilogue) before the wgmmas that overwrite them.
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kBK / 16; ++kk) {
#pragma unroll
          for (int mb = 0; mb < kMBlocks; ++mb) {
            const unsigned long long da =
                desc_a0 + static_cast<unsigned>((stage * kABytes + mb * 64 * kRowBytes + kk * 32) >> 4);
            const unsigned long long db = desc_b0 + static_cast<unsigned>((stage * kBBytes + kk * kBKStep) >> 4);
            Wgmma<kBN, T>::template run<kTransB ? 0 : 1>(acc[mb], da, db, (kt > 0 || kk > 0) ? 1 : 0);
          }
        }
        wgmma_commit();
        // k-tile kt - 1's group is done reading its stage: hand that stage back, keep kt's in flight.
        wgmma_wait<1>();
        if (kt > 0 && t == 0) release(prev_stage);
        prev_stage = stage;
        if (++stage == kStages) {
          stage = 0;
          phase ^= 1u;
        }
      }
      // Every full barrier of this tile has been waited on: the other consumer's k-loop may start.
      if (kPingpong && t == 0) mbar_arrive(turn_bar + 8 * (1 - consumer));
      wgmma_wait<0>();
#pragma unroll
      for (int mb = 0; mb < kMBlocks; ++mb) fence_accumulators(acc[mb]);
      if (k_tiles > 0 && t == 0) release(prev_stage);
      if (kCluster > 1 && tile_m >= tiles_m) continue;  // computed for the partner's loads only

      // Epilogue from registers (fragment layout at the top). The quads transpose each group of four
      // n8 chunks so that a lane holds eight consecutive columns of its rows: 16-byte stores of C
      // (and 16-byte reductions into the workspace), whole 32-byte sectors, a quarter of the store
      // instructions of the pairs the fragment holds (whose queue stalled the consumers for 17% of
      // their time at 4096^3). Every lane takes part in the shuffles; only the accesses are
      // bounds-checked. N % 8 == 0 and C, like the workspace, is 16-byte aligned (the library's
      // allocations are), so eight columns are wholly inside N or wholly outside. Thread rows:
      // row0 + 64 mb + 8 h for m64 block mb and fragment half h; columns col0 + 32 g for group g.
      const int quad_lane = lane & 3;
      const int row0 = tile_m * kBM + row_offset + warp * 16 + (lane >> 2);
      const int col0 = tile_n * kBN + 8 * quad_lane;
      if (kTmaStore && split_k == 1) {
        // Chunk (mb, nc): rows 64 mb .. of the consumer's share, columns 64 nc .. of the tile,
        // written as store_unit and store_offset say (checked above the kernel).
        // Before a chunk's barrier the storing thread waits until the previous chunk's store has
        // read its buffer, which the next chunk then refills; the barrier also publishes this
        // chunk's writes (each thread fenced them into the async proxy) to the storing thread.
        // Whether a chunk lies inside C depends on the tile only, so the whole consumer takes the
        // same branches to its barriers.
        const int store_barrier = 3 + consumer;  // 1 and 2 are split-K's
#pragma unroll
        for (int mb = 0; mb < kMBlocks; ++mb) {
          const int chunk_m = tile_m * kBM + row_offset + mb * 64;
          if (chunk_m >= M) break;
#pragma unroll
          for (int nc = 0; nc < kBN / 64; ++nc) {
            const int chunk_n = tile_n * kBN + nc * 64;
            if (chunk_n >= N) break;
            const unsigned buffer =
                store_smem + (consumer * kStoreBuffers + (chunks_stored & 1)) * kStoreChunkBytes;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int r = store_row(warp, lane, h);
              unsigned w0[4], w1[4];
#pragma unroll
              for (int j = 0; j < 4; ++j) {
                const int i0 = pair_index(2 * nc, j, h), i1 = pair_index(2 * nc + 1, j, h);
                w0[j] = PairOf<T>::pack(acc[mb][i0], acc[mb][i0 + 1]);
                w1[j] = PairOf<T>::pack(acc[mb][i1], acc[mb][i1 + 1]);
              }
              quad_transpose(w0, quad_lane);
              quad_transpose(w1, quad_lane);
              const uint4 first_group = make_uint4(w0[0], w0[1], w0[2], w0[3]);
              const uint4 second_group = make_uint4(w1[0], w1[1], w1[2], w1[3]);
#pragma unroll
              for (int second = 0; second < 2; ++second) {
                const int unit = store_unit(lane, second);
                st_shared_16(buffer + store_offset(r, unit), unit >= 4 ? second_group : first_group);
              }
            }
            fence_proxy_async_shared();
            if (t == 0) bulk_wait_read_all();
            named_barrier_sync(store_barrier, 128);
            if (t == 0) {
              tma_store_2d(&map_c, buffer, chunk_n, chunk_m);
              bulk_commit();
            }
            ++chunks_stored;
          }
        }
        continue;
      }
      if (split_k == 1) {
#pragma unroll
        for (int mb = 0; mb < kMBlocks; ++mb) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int row = row0 + mb * 64 + h * 8;
            T* const dst = C + static_cast<long long>(row) * N;
#pragma unroll
            for (int g = 0; g < kBN / 32; ++g) {
              unsigned w[4];
#pragma unroll
              for (int j = 0; j < 4; ++j) {
                const int i = pair_index(g, j, h);
                w[j] = PairOf<T>::pack(acc[mb][i], acc[mb][i + 1]);
              }
              quad_transpose(w, quad_lane);
              const int col = col0 + 32 * g;
              if (row < M && col < N) *reinterpret_cast<uint4*>(dst + col) = make_uint4(w[0], w[1], w[2], w[3]);
            }
          }
        }
        continue;
      }

      // Split-K: this slice's partials into the workspace (an empty slice adds nothing: its
      // accumulators still hold the previous tile), then the tile's arrival counter. The threads
      // that hold the tile (both consumers, or with pingpong this one) meet on a named barrier so
      // the count goes up once all their adds are visible (the threadFenceReduction pattern).
      if (k_tiles > 0) {
#pragma unroll
        for (int mb = 0; mb < kMBlocks; ++mb) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int row = row0 + mb * 64 + h * 8;
            float* const dst = workspace + static_cast<long long>(row) * N;
#pragma unroll
            for (int g = 0; g < kBN / 32; ++g) {
              float x[4], y[4];  // even and odd columns, transposed apart
#pragma unroll
              for (int j = 0; j < 4; ++j) {
                const int i = pair_index(g, j, h);
                x[j] = acc[mb][i];
                y[j] = acc[mb][i + 1];
              }
              quad_transpose(x, quad_lane);
              quad_transpose(y, quad_lane);
              const int col = col0 + 32 * g;
              if (row < M && col < N) {
                red_add_quad(dst + col, x[0], y[0], x[1], y[1]);
                red_add_quad(dst + col + 4, x[2], y[2], x[3], y[3]);
              }
            }
          }
        }
      }
      __threadfence();
      const int tile_threads = kPingpong ? 128 : kConsumers * 128;
      const int barrier_id = 1 + (kPingpong ? consumer : 0);
      const int flag_slot = kPingpong ? consumer : 0;
      named_barrier_sync(barrier_id, tile_threads);
      unsigned* const counter =
          reinterpret_cast<unsigned*>(workspace + static_cast<long long>(M) * N) + (tile_m * tiles_n + tile_n);
      if (t == 0 && (kPingpong || consumer == 0)) {
        const bool last = atomicAdd(counter, 1u) == static_cast<unsigned>(split_k - 1);
        if (last) *counter = 0u;
        split_flag[flag_slot] = last ? 1 : 0;
      }
      named_barrier_sync(barrier_id, tile_threads);
      if (!split_flag[flag_slot]) continue;
      __threadfence();
      // The last slice converts the sums: the same rows and column octets, no shuffles (the sums
      // come from the workspace). A group's two loads issue before its stores, one L2 round trip
      // for eight columns where the pairs took four.
#pragma unroll
      for (int mb = 0; mb < kMBlocks; ++mb) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = row0 + mb * 64 + h * 8;
          float* const sums = workspace + static_cast<long long>(row) * N;
          T* const dst = C + static_cast<long long>(row) * N;
#pragma unroll
          for (int g = 0; g < kBN / 32; ++g) {
            const int col = col0 + 32 * g;
            if (row < M && col < N) {
              // L2 reads (ld.global.cg): L1 is not coherent with the other slices' reductions.
              const float4 lo = __ldcg(reinterpret_cast<const float4*>(sums + col));
              const float4 hi = __ldcg(reinterpret_cast<const float4*>(sums + col + 4));
              const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
              __stcg(reinterpret_cast<float4*>(sums + col), zero);
              __stcg(reinterpret_cast<float4*>(sums + col + 4), zero);
              *reinterpret_cast<uint4*>(dst + col) =
                  make_uint4(PairOf<T>::pack(lo.x, lo.y), PairOf<T>::pack(lo.z, lo.w), PairOf<T>::pack(hi.x, hi.y),
                             PairOf<T>::pack(hi.z, hi.w));
            }
          }
        }
      }
    }
    // The block's shared memory must outlive the stores that read it.
    if (kTmaStore && t == 0) bulk_wait_read_all();
  }
#else
  // wgmma, setmaxnreg and this TMA form need sm_90a; other targets get a kernel that traps, so the
  // header still compiles wherever gemm.cuh does.
  (void)C;
  (void)workspace;
  (void)M;
  (void)N;
  (void)K;
  (void)map_a;
  (void)map_b;
  (void)map_c;
  __trap();
#endif
}

}  // namespace gmjit
