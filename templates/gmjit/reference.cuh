#pragma once
// Reference kernels: deliberately naive, one output element per thread, accumulating in
// double. They share nothing with the tuned templates, so a bug cannot hide in both.
#include <cuda_fp16.h>

namespace gmjit {
namespace reference {

__device__ inline double to_double(float x) { return static_cast<double>(x); }
__device__ inline double to_double(__half x) { return static_cast<double>(__half2float(x)); }

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

}  // namespace reference
}  // namespace gmjit
