#pragma once
// Reference kernels: deliberately naive, one output element per thread, accumulating in
// double. They share nothing with the tuned templates, so a bug cannot hide in both.
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
// (kTransB true, the weight layout). One element of C per thread, grid-stride over M * N, so any
// M and N the kernel takes launch. The workspace of the split-K kernels is not the reference's
// business.
template <typename T, bool kTransB>
__global__ void gemm(const T* A, const T* B, double* C, float*, int M, int N, int K) {
  const long long count = static_cast<long long>(M) * N;
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    const long long row = i / N, col = i % N;
    double sum = 0.0;
    for (int k = 0; k < K; ++k) {
      const long long b = kTransB ? col * K + k : static_cast<long long>(k) * N + col;
      sum += to_double(A[row * K + k]) * to_double(B[b]);
    }
    C[i] = sum;
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
