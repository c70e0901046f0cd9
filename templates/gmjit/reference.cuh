#pragma once
// Reference kernels: deliberately plain, accumulating in double; all but gemm compute one output
// element per thread. They share nothing with the tuned templates, so a bug cannot hide in both.
#include "gmjit/to_double.cuh"

namespace gmjit {
namespace reference {

template <typename T>
__global__ void vector_add(const T* a, const T* b, double* out, long long n) {
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = to_double(a[i]) + to_double(b[i]);
  }
}

// Row-major C (M x N) = A (M x K) * B (K x N); block (16, 16) covers a 16 x 16 tile of C.
__global__ void sgemm(const float* A, const float* B, double* C, int M, int N, int K) {
  const int row = blockIdx.y * blockDim.y + threadIdx.y;
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= M || col >= N) return;
  double sum = 0.0;
  for (int k = 0; k < K; ++k) {
    sum += static_cast<double>(A[static_cast<long long>(row) * K + k]) *
           static_cast<double>(B[static_cast<long long>(k) * N + col]);
  }
  C[static_cast<long long>(row) * N + col] = sum;
}

// Row-major C (M x N) = A (M x K) * B for bf16/fp16 inputs: B is K x N (kTransB false) or N x K
// (kTransB true, the weight layout). Unlike the others it stages its operands, as doubles, in
// shared memory: 256 threads own a 64 x 64 tile of C, 4 x 4 elements each, and walk k 16 at a time.
// One element per thread read B^T with a stride of k between neighbours: 279 ms at 4096^3 and
// 2.2 s at 8192^3 on an H100, against 10 and 74 ms now (bench/NOTES.md, twenty-third session),
// before any candidate of a tuning could be verified. Tiles run along x; rows of tiles along y
// and, past the grid's 65535, again from the top. Each element is still a plain sum over k in
// order, in double, sharing no code with the tuned kernels. The workspace of the split-K kernels
// is not the reference's business.
template <typename T, bool kTransB>
__global__ void __launch_bounds__(256) gemm(const T* A, const T* B, double* C, float*, int M, int N, int K) {
  constexpr int kTile = 64, kDepth = 16, kThreads = 256;
  // [k][row or column], padded: the staging writes walk k fastest.
  __shared__ double a_tile[kDepth][kTile + 1];
  __shared__ double b_tile[kDepth][kTile + 1];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const long long col0 = static_cast<long long>(blockIdx.x) * kTile;
  for (long long row0 = static_cast<long long>(blockIdx.y) * kTile; row0 < M;
       row0 += static_cast<long long>(gridDim.y) * kTile) {
    double sum[4][4] = {};
    for (int k0 = 0; k0 < K; k0 += kDepth) {
      for (int e = threadIdx.x; e < kTile * kDepth; e += kThreads) {
        const int along = e / kDepth, kk = e % kDepth, k = k0 + kk;
        const long long row = row0 + along;
        a_tile[kk][along] = row < M && k < K ? to_double(A[row * K + k]) : 0.0;
        if (kTransB) {
          const long long col = col0 + along;
          b_tile[kk][along] = col < N && k < K ? to_double(B[col * K + k]) : 0.0;
        } else {
          const int b_k = k0 + e / kTile;
          const long long col = col0 + e % kTile;
          b_tile[e / kTile][e % kTile] = col < N && b_k < K ? to_double(B[static_cast<long long>(b_k) * N + col]) : 0.0;
        }
      }
      __syncthreads();
      for (int kk = 0; kk < kDepth; ++kk) {
        double a[4], b[4];
        for (int i = 0; i < 4; ++i) a[i] = a_tile[kk][ty + 16 * i];
        for (int j = 0; j < 4; ++j) b[j] = b_tile[kk][tx + 16 * j];
        for (int i = 0; i < 4; ++i) {
          for (int j = 0; j < 4; ++j) sum[i][j] += a[i] * b[j];
        }
      }
      __syncthreads();
    }
    for (int i = 0; i < 4; ++i) {
      const long long row = row0 + ty + 16 * i;
      for (int j = 0; j < 4; ++j) {
        const long long col = col0 + tx + 16 * j;
        if (row < M && col < N) C[row * N + col] = sum[i][j];
      }
    }
  }
}

// Interleaved RGB (n pixels x 3) -> luma, with the coefficients in double.
__global__ void grayscale(const float* rgb, double* out, long long n) {
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long p = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; p < n; p += stride) {
    out[p] = 0.2989 * static_cast<double>(rgb[3 * p]) + 0.5870 * static_cast<double>(rgb[3 * p + 1]) +
             0.1140 * static_cast<double>(rgb[3 * p + 2]);
  }
}

// out (cols x rows) = in (rows x cols)^T, one element per thread in the order of `in`.
__global__ void transpose(const float* in, double* out, long long rows, long long cols) {
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < rows * cols; i += stride) {
    out[i % cols * rows + i / cols] = static_cast<double>(in[i]);
  }
}

// Leaves the block's combination of every thread's `value` in all threads; blockDim.x must be a
// power of two no larger than 256.
template <typename Op>
__device__ double block_reduce(double value, Op op) {
  __shared__ double partial[256];
  partial[threadIdx.x] = value;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] = op(partial[threadIdx.x], partial[threadIdx.x + half]);
    __syncthreads();
  }
  const double result = partial[0];
  __syncthreads();
  return result;
}

struct MaxOp {
  __device__ double operator()(double a, double b) const { return fmax(a, b); }
};
struct SumOp {
  __device__ double operator()(double a, double b) const { return a + b; }
};

// Softmax along rows of a row-major rows x cols matrix: a block per row (grid-stride), 256
// threads, max then sum of exp(x - max), in double.
// The workspace of the split kernels is not the reference's business.
template <typename T>
__global__ void softmax(const T* x, double* y, const unsigned*, long long rows, int cols) {
  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * cols;
    double m = to_double(xr[0]);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) m = fmax(m, to_double(xr[c]));
    m = block_reduce(m, MaxOp());
    double s = 0.0;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += exp(to_double(xr[c]) - m);
    s = block_reduce(s, SumOp());
    for (int c = threadIdx.x; c < cols; c += blockDim.x) y[row * cols + c] = exp(to_double(xr[c]) - m) / s;
  }
}

// y = x / sqrt(mean(x^2) + eps) * w along rows of a row-major rows x cols matrix: a block per row
// (grid-stride), 256 threads, in double.
template <typename T>
__global__ void rmsnorm(const T* x, const T* w, double* y, long long rows, int cols, float eps) {
  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * cols;
    double s = 0.0;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += to_double(xr[c]) * to_double(xr[c]);
    s = block_reduce(s, SumOp());
    const double scale = 1.0 / sqrt(s / cols + static_cast<double>(eps));
    for (int c = threadIdx.x; c < cols; c += blockDim.x) y[row * cols + c] = to_double(xr[c]) * scale * to_double(w[c]);
  }
}

// y = (x - mean) / sqrt(var + eps) * w + b with the biased variance, two passes, in double.
template <typename T>
__global__ void layernorm(const T* x, const T* w, const T* b, double* y, long long rows, int cols, float eps) {
  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * cols;
    double s = 0.0;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += to_double(xr[c]);
    const double mean = block_reduce(s, SumOp()) / cols;
    double d2 = 0.0;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) d2 += (to_double(xr[c]) - mean) * (to_double(xr[c]) - mean);
    const double scale = 1.0 / sqrt(block_reduce(d2, SumOp()) / cols + static_cast<double>(eps));
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
      y[row * cols + c] = (to_double(xr[c]) - mean) * scale * to_double(w[c]) + to_double(b[c]);
    }
  }
}

}  // namespace reference
}  // namespace gmjit
