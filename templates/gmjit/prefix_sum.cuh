#pragma once
// Inclusive scan of fp32 in a single pass over memory: each block scans one tile held in
// registers, publishes the tile's sum, and learns the sum of every earlier tile by looking back
// over its predecessors' published sums (decoupled look-back, Merrill & Garland 2016), so the
// input is read once and the output written once.
//
// The workspace (unsigned words, zeroed once by the caller) holds a tile counter, an epoch and
// per-tile flags and sums. Tiles are numbered in the order blocks start (the counter), so a block
// only ever waits on blocks that already run. Flags carry the epoch of the launch that wrote
// them; the block of the last tile resets the counter and advances the epoch, so the next launch
// reads the previous launch's flags as "not yet published" without a memset.

namespace gmjit {
namespace prefix_sum_detail {

enum : unsigned { kNotReady = 0, kAggregate = 1, kInclusive = 2, kEpochMask = 0x3fffffffu };

__device__ inline unsigned load_acquire(const unsigned* address) {
  unsigned value;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(value) : "l"(address) : "memory");
  return value;
}

__device__ inline void store_release(unsigned* address, unsigned value) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(address), "r"(value) : "memory");
}

// Sums are read at L2, never from a possibly stale L1 line.
__device__ inline double load_relaxed(const double* address) {
  double value;
  asm volatile("ld.relaxed.gpu.global.f64 %0, [%1];" : "=d"(value) : "l"(address) : "memory");
  return value;
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
// waiting for its predecessor's flag; a window stops at the nearest inclusive sum it sees.
__device__ inline double look_back(const unsigned* flags, const double* aggregates, const double* inclusives,
                                   long long tile, unsigned epoch, int lane) {
  double exclusive = 0.0;
  for (long long predecessor = tile - 1 - lane;; predecessor -= 32) {
    unsigned state = kInclusive;  // before tile 0: an inclusive sum of zero
    double value = 0.0;
    if (predecessor >= 0) {
      unsigned flag;
      do {
        flag = load_acquire(flags + predecessor);
      } while ((flag >> 2) != (epoch & kEpochMask) || (flag & 3u) == kNotReady);
      state = flag & 3u;
      value = load_relaxed(state == kInclusive ? inclusives + predecessor : aggregates + predecessor);
    }
    const unsigned inclusive_lanes = __ballot_sync(0xffffffffu, state == kInclusive);
    // Lane order is tile order backwards: lanes past the nearest inclusive sum are already in it.
    const int nearest = inclusive_lanes ? __ffs(inclusive_lanes) - 1 : 32;
    exclusive += warp_sum(lane <= nearest ? value : 0.0);
    if (inclusive_lanes) return exclusive;
  }
}

}  // namespace prefix_sum_detail

// y[i] = x[0] + ... + x[i]. One block of Block threads per tile of Block * Items elements;
// Items is a multiple of 4 so that whole tiles move as 16-byte vectors when x and y allow.
template <int Block, int Items>
__global__ void __launch_bounds__(Block) prefix_sum(const float* __restrict__ x, float* __restrict__ y,
                                                    unsigned* __restrict__ workspace, long long n) {
  using namespace prefix_sum_detail;
  constexpr int kTile = Block * Items;
  constexpr int kWarps = Block / 32;
  static_assert(Items % 4 == 0 && Block % 32 == 0, "tiles move as whole float4s");
  __shared__ float stage[kTile + kTile / 32];
  __shared__ float warp_totals[kWarps];
  __shared__ long long tile_shared;
  __shared__ unsigned epoch_shared;
  __shared__ double exclusive_shared;

  const long long tiles = gridDim.x;
  unsigned* counter = workspace;
  unsigned* epoch_word = workspace + 1;
  unsigned* flags = workspace + 2;
  double* aggregates = reinterpret_cast<double*>(workspace + 2 + ((tiles + 1) & ~1ll));
  double* inclusives = aggregates + tiles;

  const int thread = threadIdx.x;
  const int lane = thread & 31;
  const int warp = thread >> 5;
  if (thread == 0) {
    tile_shared = atomicAdd(counter, 1u);
    epoch_shared = load_relaxed(epoch_word);
  }
  __syncthreads();
  const long long tile = tile_shared;
  const unsigned epoch = epoch_shared;
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
  __syncthreads();
  float items[Items];
  float running = 0.0f;
#pragma unroll
  for (int j = 0; j < Items; ++j) {
    running += stage[padded(thread * Items + j)];
    items[j] = running;
  }
  const float thread_inclusive = warp_inclusive_scan(running, lane);
  const float before_in_warp = __shfl_up_sync(0xffffffffu, thread_inclusive, 1);
  if (lane == 31) warp_totals[warp] = thread_inclusive;
  __syncthreads();

  if (warp == 0) {
    const float warp_total = lane < kWarps ? warp_totals[lane] : 0.0f;
    const float warps_inclusive = warp_inclusive_scan(warp_total, lane);
    if (lane < kWarps) warp_totals[lane] = warps_inclusive;
    const double aggregate = __shfl_sync(0xffffffffu, warps_inclusive, kWarps - 1);
    double exclusive = 0.0;
    if (tile == 0) {
      if (lane == 0) {
        inclusives[0] = aggregate;
        store_release(flags, (epoch << 2) | kInclusive);
      }
    } else {
      if (lane == 0) {
        aggregates[tile] = aggregate;
        store_release(flags + tile, (epoch << 2) | kAggregate);
      }
      exclusive = look_back(flags, aggregates, inclusives, tile, epoch, lane);
      if (lane == 0) {
        inclusives[tile] = exclusive + aggregate;
        store_release(flags + tile, (epoch << 2) | kInclusive);
      }
    }
    if (lane == 0) {
      exclusive_shared = exclusive;
      // Every block took its tile and read the epoch before publishing, and this block saw all of
      // them publish, so the workspace can be made ready for the next launch.
      if (tile == tiles - 1) {
        atomicExch(counter, 0u);
        atomicExch(epoch_word, epoch + 1);
      }
    }
  }
  __syncthreads();

  // The block's offset as a double split into two floats, so each output costs two fp32 adds
  // and is rounded once at the end, not once per tile of the chain.
  const float before_in_block = (warp > 0 ? warp_totals[warp - 1] : 0.0f) + (lane > 0 ? before_in_warp : 0.0f);
  const double start = exclusive_shared + static_cast<double>(before_in_block);
  const float high = static_cast<float>(start);
  const float low = static_cast<float>(start - static_cast<double>(high));
#pragma unroll
  for (int j = 0; j < Items; ++j) stage[padded(thread * Items + j)] = high + (low + items[j]);
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
