#pragma once
// Inclusive scan of fp32 in a single pass over memory: each block scans one tile held in
// registers, publishes the tile's sum, and learns the sum of every earlier tile by looking back
// over its predecessors' published sums (decoupled look-back, Merrill & Garland 2016), so the
// input is read once and the output written once.
//
// The workspace (unsigned words, zeroed once by the caller) holds an epoch and per tile a pair of
// 64-bit words, each a status with its value (see Published). Block b scans tile b: blocks start
// in increasing index order, so a block only ever waits on blocks that already run (CUB's
// single-pass scan assigns its tiles the same way). Numbering tiles with an atomic counter
// instead, as this kernel did before, held every block's loads behind one L2 round trip: on the
// H200 at 2^28 the counter took 0.6373 ms against 0.6288 ms by block index (256 x 32), and 16M
// 0.0512 ms against 0.0495. Statuses carry the epoch of the launch that wrote them; the block of
// the last tile advances the epoch, so the next launch reads the previous launch's words as "not
// yet published" without a memset.
//
// There is no persistent variant: blocks that each kept a ring of tiles in flight (cp.async) lost
// at every size on the H200 (2^28: 1.13 ms at best against 0.645 ms). Persistent blocks take
// their tiles in rounds, a round's tiles become ready together, and each then walks back through
// its round's aggregates to the previous round's inclusive sum, so the look-back grows with the
// grid; blocks started one per tile arrive staggered and find an inclusive sum a window away.

namespace gmjit {
namespace prefix_sum_detail {

enum : unsigned { kNotReady = 0, kAggregate = 1, kInclusive = 2, kEpochMask = 0x3fffffffu };

// The status sits beside its value in one 64-bit word, so a reader learns both in one load and a
// writer needs no fence between them: the look-back chain pays one L2 round trip per window of
// 32 predecessors instead of three (flag, then value, then the release fence of the next publish).
// An inclusive sum is a double split into two floats, one per word; a reader takes it only once
// both words show it, since each is written once per launch.
struct Published {
  unsigned long long high;  // (epoch << 2 | status) << 32 | float bits: the aggregate or the sum's high part
  unsigned long long low;   // the same for the inclusive sum's low part
};

__device__ inline unsigned long long pack(unsigned epoch, unsigned status, float value) {
  return static_cast<unsigned long long>(((epoch & kEpochMask) << 2) | status) << 32 | __float_as_uint(value);
}

__device__ inline unsigned status_of(unsigned long long word, unsigned epoch) {
  const unsigned flag = static_cast<unsigned>(word >> 32);
  return (flag >> 2) == (epoch & kEpochMask) ? flag & 3u : kNotReady;
}

__device__ inline float value_of(unsigned long long word) { return __uint_as_float(static_cast<unsigned>(word)); }

__device__ inline unsigned long long load_relaxed(const unsigned long long* address) {
  unsigned long long value;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(value) : "l"(address) : "memory");
  return value;
}

__device__ inline void store_relaxed(unsigned long long* address, unsigned long long value) {
  asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(address), "l"(value) : "memory");
}

__device__ inline void publish_aggregate(Published* tile, unsigned epoch, float aggregate) {
  store_relaxed(&tile->high, pack(epoch, kAggregate, aggregate));
}

__device__ inline void publish_inclusive(Published* tile, unsigned epoch, double inclusive) {
  const float high = static_cast<float>(inclusive);
  store_relaxed(&tile->low, pack(epoch, kInclusive, static_cast<float>(inclusive - static_cast<double>(high))));
  store_relaxed(&tile->high, pack(epoch, kInclusive, high));
}

__device__ inline unsigned load_relaxed(const unsigned* address) {
  unsigned value;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(value) : "l"(address) : "memory");
  return value;
}

// One pad word every 32 keeps both the coalesced staging (lanes 4 words apart) and each thread's
// run of Items consecutive words free of bank conflicts.
__device__ inline int padded(int i) { return i + (i >> 5); }

__device__ inline double warp_sum(double value) {
  for (int offset = 16; offset > 0; offset >>= 1) value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

__device__ inline float warp_inclusive_scan(float value, int lane) {
  for (int offset = 1; offset < 32; offset <<= 1) {
    const float other = __shfl_up_sync(0xffffffffu, value, offset);
    if (lane >= offset) value += other;
  }
  return value;
}

// The sum of every tile before `tile`, in double: 32 predecessors at a time, one per lane, each
// waiting until its predecessor has published; a window stops at the nearest inclusive sum it sees.
__device__ inline double look_back(const Published* published, long long tile, unsigned epoch, int lane) {
  double exclusive = 0.0;
  for (long long predecessor = tile - 1 - lane;; predecessor -= 32) {
    unsigned status = kInclusive;  // before tile 0: an inclusive sum of zero
    double value = 0.0;
    if (predecessor >= 0) {
      unsigned long long high;
      unsigned long long low;
      do {
        high = load_relaxed(&published[predecessor].high);
        low = load_relaxed(&published[predecessor].low);
        status = status_of(high, epoch);
      } while (status == kNotReady || (status == kInclusive && status_of(low, epoch) != kInclusive));
      value = value_of(high);
      if (status == kInclusive) value += value_of(low);
    }
    const unsigned inclusive_lanes = __ballot_sync(0xffffffffu, status == kInclusive);
    // Lane order is tile order backwards: lanes past the nearest inclusive sum are already in it.
    const int nearest = inclusive_lanes ? __ffs(inclusive_lanes) - 1 : 32;
    exclusive += warp_sum(lane <= nearest ? value : 0.0);
    if (inclusive_lanes) return exclusive;
  }
}

// Publishes the tile's sum, learns the sum of every earlier tile, and returns the sum of every
// element before this thread's first one, in double. Every thread of the block calls it with the
// total of its own run of items; it holds __syncthreads, so all of the block must reach it.
template <int Block>
__device__ double tile_start(float thread_total, long long tile, unsigned epoch, Published* published,
                             float* warp_totals, double* exclusive_shared) {
  constexpr int kWarps = Block / 32;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const float thread_inclusive = warp_inclusive_scan(thread_total, lane);
  const float before_in_warp = __shfl_up_sync(0xffffffffu, thread_inclusive, 1);
  if (lane == 31) warp_totals[warp] = thread_inclusive;
  __syncthreads();

  if (warp == 0) {
    const float warp_total = lane < kWarps ? warp_totals[lane] : 0.0f;
    const float warps_inclusive = warp_inclusive_scan(warp_total, lane);
    if (lane < kWarps) warp_totals[lane] = warps_inclusive;
    const float aggregate = __shfl_sync(0xffffffffu, warps_inclusive, kWarps - 1);
    double exclusive = 0.0;
    if (tile == 0) {
      if (lane == 0) publish_inclusive(published, epoch, aggregate);
    } else {
      if (lane == 0) publish_aggregate(published + tile, epoch, aggregate);
      exclusive = look_back(published, tile, epoch, lane);
      if (lane == 0) publish_inclusive(published + tile, epoch, exclusive + aggregate);
    }
    if (lane == 0) *exclusive_shared = exclusive;
  }
  __syncthreads();
  const float before_in_block = (warp > 0 ? warp_totals[warp - 1] : 0.0f) + (lane > 0 ? before_in_warp : 0.0f);
  return *exclusive_shared + static_cast<double>(before_in_block);
}

// The start as a double split into two floats, so each output costs two fp32 adds and is rounded
// once at the end, not once per tile of the chain.
struct SplitStart {
  float high;
  float low;
  __device__ explicit SplitStart(double start)
      : high(static_cast<float>(start)), low(static_cast<float>(start - static_cast<double>(static_cast<float>(start)))) {}
  __device__ float operator()(float running) const { return high + (low + running); }
};

// Where the workspace keeps its parts: the epoch, three words of padding so that the published
// pairs start 16-byte aligned, then a pair per tile.
struct Workspace {
  unsigned* epoch;
  Published* published;
  __device__ explicit Workspace(unsigned* words) : epoch(words), published(reinterpret_cast<Published*>(words + 4)) {}
};

}  // namespace prefix_sum_detail

// y[i] = x[0] + ... + x[i]. One block of Block threads per tile of Block * Items elements;
// Items is a multiple of 4 so that whole tiles move as 16-byte vectors when x and y allow.
template <int Block, int Items>
__global__ void __launch_bounds__(Block) prefix_sum(const float* __restrict__ x, float* __restrict__ y,
                                                    unsigned* __restrict__ workspace, long long n) {
  using namespace prefix_sum_detail;
  constexpr int kTile = Block * Items;
  static_assert(Items % 4 == 0 && Block % 32 == 0, "tiles move as whole float4s");
  // kTile + kTile / 32 floats of dynamic shared memory, since a tile of 512 x 32 (66 KB) passes
  // the 48 KB a static array may take.
  extern __shared__ float prefix_sum_stage[];
  float* stage = prefix_sum_stage;
  __shared__ float warp_totals[Block / 32];
  __shared__ unsigned epoch_shared;
  __shared__ double exclusive_shared;

  const long long tiles = gridDim.x;
  const long long tile = blockIdx.x;
  const Workspace state(workspace);
  const int thread = threadIdx.x;
  // Needed only once the tile is published, so its round trip overlaps the tile's loads.
  unsigned epoch = 0;
  if (thread == 0) epoch = load_relaxed(state.epoch);
  const long long base = tile * kTile;
  const bool whole = base + kTile <= n;
  const bool vectors = whole && ((reinterpret_cast<unsigned long long>(x) | reinterpret_cast<unsigned long long>(y)) & 15) == 0;

  // Coalesced loads into shared memory, then each thread takes Items consecutive elements.
  if (vectors) {
    const float4* source = reinterpret_cast<const float4*>(x + base);
#pragma unroll
    for (int k = 0; k < Items / 4; ++k) {
      const int v = k * Block + thread;
      const float4 value = source[v];
      stage[padded(4 * v)] = value.x;
      stage[padded(4 * v + 1)] = value.y;
      stage[padded(4 * v + 2)] = value.z;
      stage[padded(4 * v + 3)] = value.w;
    }
  } else {
#pragma unroll
    for (int k = 0; k < Items; ++k) {
      const int i = k * Block + thread;
      stage[padded(i)] = base + i < n ? x[base + i] : 0.0f;
    }
  }
  if (thread == 0) epoch_shared = epoch;
  __syncthreads();
  epoch = epoch_shared;
  // Each thread scans its own run in place: the run's sums wait in shared memory, not in
  // registers, through the look-back, which keeps the kernel at 32 registers instead of 64 for
  // Items = 32 (ptxas 13.0), so shared memory, not registers, bounds the blocks per SM.
  float running = 0.0f;
#pragma unroll
  for (int j = 0; j < Items; ++j) {
    float& element = stage[padded(thread * Items + j)];
    running += element;
    element = running;
  }
  const SplitStart start(tile_start<Block>(running, tile, epoch, state.published,
                                           warp_totals, &exclusive_shared));
  // Every block read the epoch before publishing, and the block of the last tile has seen all of
  // them publish, so the workspace can be made ready for the next launch.
  if (thread == 0 && tile == tiles - 1) atomicExch(state.epoch, epoch + 1);
#pragma unroll
  for (int j = 0; j < Items; ++j) {
    float& element = stage[padded(thread * Items + j)];
    element = start(element);
  }
  __syncthreads();
  if (vectors) {
    float4* target = reinterpret_cast<float4*>(y + base);
#pragma unroll
    for (int k = 0; k < Items / 4; ++k) {
      const int v = k * Block + thread;
      target[v] = make_float4(stage[padded(4 * v)], stage[padded(4 * v + 1)], stage[padded(4 * v + 2)],
                              stage[padded(4 * v + 3)]);
    }
  } else {
#pragma unroll
    for (int k = 0; k < Items; ++k) {
      const int i = k * Block + thread;
      if (base + i < n) y[base + i] = stage[padded(i)];
    }
  }
}

}  // namespace gmjit
