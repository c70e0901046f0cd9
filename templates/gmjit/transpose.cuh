#pragma once
// out (cols x rows) = in (rows x cols)^T, fp32, row-major: the classic shared-memory tile
// transpose. A block reads a kTile x kTile tile along the rows of `in`, and writes it along the
// rows of `out`, so both global sides are coalesced; the tile's one column of padding puts the
// column-wise shared-memory reads of a warp in 32 distinct banks.

namespace gmjit {

// Block = (kTile, kTile / kRowsPerThread) threads; each thread moves kRowsPerThread elements
// each way. Grid: x = ceil(rows / kTile) * ceil(cols / kTile) tiles, column tiles fastest (a 1-D
// grid, so neither extent is limited to 65535 tiles). Edge tiles check bounds, interior ones not.
template <int kTile, int kRowsPerThread>
__global__ void __launch_bounds__(kTile * (kTile / kRowsPerThread))
    transpose(const float* __restrict__ in, float* __restrict__ out, long long rows, long long cols) {
  static_assert(kTile == 32 || kTile == 64, "transpose: kTile must be 32 or 64");
  static_assert(kTile % kRowsPerThread == 0, "transpose: kRowsPerThread must divide kTile");
  static_assert(kTile * (kTile / kRowsPerThread) <= 1024, "transpose: more than 1024 threads per block");
  constexpr int kBlockRows = kTile / kRowsPerThread;
  __shared__ float tile[kTile][kTile + 1];

  const long long col_tiles = (cols + kTile - 1) / kTile;
  const long long r0 = static_cast<long long>(blockIdx.x) / col_tiles * kTile;
  const long long c0 = static_cast<long long>(blockIdx.x) % col_tiles * kTile;
  const int tx = threadIdx.x;
  const int ty = threadIdx.y;

  if (r0 + kTile <= rows && c0 + kTile <= cols) {
    const float* __restrict__ src = in + (r0 + ty) * cols + c0 + tx;
#pragma unroll
    for (int j = 0; j < kTile; j += kBlockRows) tile[ty + j][tx] = __ldg(src + j * cols);
    __syncthreads();
    float* __restrict__ dst = out + (c0 + ty) * rows + r0 + tx;
#pragma unroll
    for (int j = 0; j < kTile; j += kBlockRows) dst[j * rows] = tile[tx][ty + j];
  } else {
#pragma unroll
    for (int j = 0; j < kTile; j += kBlockRows) {
      if (r0 + ty + j < rows && c0 + tx < cols) tile[ty + j][tx] = __ldg(in + (r0 + ty + j) * cols + c0 + tx);
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < kTile; j += kBlockRows) {
      if (c0 + ty + j < cols && r0 + tx < rows) out[(c0 + ty + j) * rows + r0 + tx] = tile[tx][ty + j];
    }
  }
}

}  // namespace gmjit
