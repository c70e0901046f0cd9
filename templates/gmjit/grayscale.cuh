#pragma once
// out[p] = 0.2989 R + 0.5870 G + 0.1140 B over interleaved fp32 RGB pixels: 12 bytes in and 4
// out per pixel, so only the memory path matters.
//
// A thread takes its pixels in quads: 4 pixels are 12 floats, three float4 loads, and one float4
// store, 16-byte aligned whenever the buffers are, since a quad starts at a multiple of 48 bytes.
// A warp covers 32 * kPixels consecutive pixels of its block's tile, group by group: group g of
// 128 pixels (96 float4 of input) gives lane l its quad 4l..4l+3. Read directly, lane l's three
// loads are 48 bytes apart across the warp, so each load instruction touches twice the sectors
// it uses and relies on L1 to serve the rest; staged, the warp loads the group's 96 float4 in
// three fully contiguous instructions and trades them through shared memory instead.

namespace gmjit {
namespace grayscale_detail {

// Enumerators rather than constexpr variables: NVRTC emits those as device globals.
enum : int { kGroupPixels = 128, kGroupVectors = 96 };

__device__ __forceinline__ float luma(float r, float g, float b) {
  return fmaf(0.1140f, b, fmaf(0.5870f, g, 0.2989f * r));
}

__device__ __forceinline__ float4 luma4(float4 a, float4 b, float4 c) {
  return make_float4(luma(a.x, a.y, a.z), luma(a.w, b.x, b.y), luma(b.z, b.w, c.x), luma(c.y, c.z, c.w));
}

__device__ __forceinline__ void one_pixel(const float* __restrict__ rgb, float* __restrict__ out, long long p) {
  out[p] = luma(__ldg(rgb + 3 * p), __ldg(rgb + 3 * p + 1), __ldg(rgb + 3 * p + 2));
}

}  // namespace grayscale_detail

// rgb: n pixels of 3 interleaved floats; out: n floats. Block = kBlock threads (1-D), any grid:
// blocks stride over tiles of kBlock * kPixels pixels, so a grid smaller than the tile count
// makes every block loop. kPixels is 1 (scalar accesses) or a multiple of 4 (float4 quads, used
// when both buffers are 16-byte aligned; otherwise the kernel falls back to scalar accesses).
// kStaged (needs kPixels >= 4) routes the loads through kBlock / 32 * 1536 bytes of shared memory.
template <int kBlock, int kPixels, bool kStaged>
__global__ void __launch_bounds__(kBlock)
    grayscale(const float* __restrict__ rgb, float* __restrict__ out, long long n) {
  static_assert(kBlock >= 32 && kBlock <= 1024 && kBlock % 32 == 0,
                "grayscale: kBlock must be a multiple of 32 in [32, 1024]");
  static_assert(kPixels == 1 || kPixels % 4 == 0, "grayscale: kPixels must be 1 or a multiple of 4");
  static_assert(!kStaged || kPixels >= 4, "grayscale: staging needs float4 quads (kPixels >= 4)");
  using namespace grayscale_detail;

  const bool aligned =
      ((reinterpret_cast<unsigned long long>(rgb) | reinterpret_cast<unsigned long long>(out)) & 15) == 0;
  if (kPixels == 1 || !aligned) {
    const long long stride = static_cast<long long>(gridDim.x) * kBlock;
    for (long long p = static_cast<long long>(blockIdx.x) * kBlock + threadIdx.x; p < n; p += stride) {
      one_pixel(rgb, out, p);
    }
    return;
  }

  if constexpr (kPixels >= 4) {
    constexpr int kGroups = kPixels / 4;
    constexpr long long kTile = static_cast<long long>(kBlock) * kPixels;
    const int lane = threadIdx.x % 32;
    const int warp = threadIdx.x / 32;
    const float4* __restrict__ rgb4 = reinterpret_cast<const float4*>(rgb);
    float4* __restrict__ out4 = reinterpret_cast<float4*>(out);
    // Only referenced when kStaged; a zero-sized array is not allowed, hence the one-row minimum.
    __shared__ float4 stage[kStaged ? kBlock / 32 : 1][kStaged ? kGroupVectors : 1];

    for (long long tile = blockIdx.x; tile * kTile < n; tile += gridDim.x) {
      // A multiple of 128 pixels, so its input starts at a whole float4.
      const long long first = tile * kTile + static_cast<long long>(warp) * 32 * kPixels;
      if (tile * kTile + kTile <= n) {
        // All of this thread's loads are issued before the first store, for memory-level parallelism.
        float4 v[kGroups][3];
        const float4* __restrict__ src = rgb4 + first / 4 * 3;
#pragma unroll
        for (int g = 0; g < kGroups; ++g) {
#pragma unroll
          for (int k = 0; k < 3; ++k) {
            v[g][k] = kStaged ? __ldg(src + g * kGroupVectors + 32 * k + lane)
                              : __ldg(src + g * kGroupVectors + 3 * lane + k);
          }
        }
#pragma unroll
        for (int g = 0; g < kGroups; ++g) {
          float4 result;
          if constexpr (kStaged) {
            __syncwarp();  // every lane has read the previous group out of the stage
#pragma unroll
            for (int k = 0; k < 3; ++k) stage[warp][32 * k + lane] = v[g][k];
            __syncwarp();
            // Lanes 48 bytes apart: each quarter-warp's float4 reads fall in 32 distinct banks.
            result = luma4(stage[warp][3 * lane], stage[warp][3 * lane + 1], stage[warp][3 * lane + 2]);
          } else {
            result = luma4(v[g][0], v[g][1], v[g][2]);
          }
          out4[first / 4 + 32 * g + lane] = result;
        }
      } else {
        // The one partial tile of the grid: whole quads still move as vectors.
#pragma unroll
        for (int g = 0; g < kGroups; ++g) {
          const long long p = first + g * kGroupPixels + 4 * lane;
          if (p + 4 <= n) {
            const float4* __restrict__ src = rgb4 + p / 4 * 3;
            out4[p / 4] = luma4(__ldg(src), __ldg(src + 1), __ldg(src + 2));
          } else {
            for (long long q = p; q < n && q < p + 4; ++q) one_pixel(rgb, out, q);
          }
        }
      }
    }
  }
}

}  // namespace gmjit
