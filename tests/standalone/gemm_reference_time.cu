// The gemm reference kernel (templates/gmjit/reference.cuh) beside the one-element-per-thread
// kernel it replaced, on the shapes a tuning prepares: the time of one launch of each, and whether
// they agree bit for bit (bf16 products and their sums are exact in double, so they must).
// Build and run on a GPU machine:
//   nvcc -std=c++17 -O2 -arch=sm_90a -Itemplates tests/standalone/gemm_reference_time.cu -o gemm_reference_time
//   ./gemm_reference_time
// Exits 1 on any disagreement.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "gmjit/reference.cuh"

#define CK(x)                                                                              \
  do {                                                                                     \
    cudaError_t e_ = (x);                                                                  \
    if (e_ != cudaSuccess) {                                                               \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(2);                                                                        \
    }                                                                                      \
  } while (0)

// The reference before the twenty-third session: one element of C per thread, grid-stride.
template <bool kTransB>
__global__ void per_element(const __nv_bfloat16* A, const __nv_bfloat16* B, double* C, int M, int N, int K) {
  const long long count = static_cast<long long>(M) * N;
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    const long long row = i / N, col = i % N;
    double sum = 0.0;
    for (int k = 0; k < K; ++k) {
      const long long b = kTransB ? col * K + k : static_cast<long long>(k) * N + col;
      sum += gmjit::to_double(A[row * K + k]) * gmjit::to_double(B[b]);
    }
    C[i] = sum;
  }
}

// Uniform magnitudes in [1/16, 1) with random signs, as the harness draws them.
__global__ void fill(__nv_bfloat16* x, long long n, unsigned long long seed) {
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    unsigned long long z = seed + static_cast<unsigned long long>(i) * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    const float magnitude = 0.0625f + 0.9375f * static_cast<float>(z >> 40) * (1.0f / 16777216.0f);
    x[i] = __float2bfloat16((z & 1) ? -magnitude : magnitude);
  }
}

template <typename Launch>
float time_ms(Launch launch) {
  cudaEvent_t start, stop;
  CK(cudaEventCreate(&start));
  CK(cudaEventCreate(&stop));
  CK(cudaEventRecord(start));
  launch();
  CK(cudaGetLastError());
  CK(cudaEventRecord(stop));
  CK(cudaEventSynchronize(stop));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, start, stop));
  CK(cudaEventDestroy(start));
  CK(cudaEventDestroy(stop));
  return ms;
}

template <bool kTransB>
bool run(int m, int n, int k) {
  __nv_bfloat16 *a, *b;
  double *old_c, *new_c;
  const size_t count = static_cast<size_t>(m) * n;
  CK(cudaMalloc(&a, sizeof(__nv_bfloat16) * m * k));
  CK(cudaMalloc(&b, sizeof(__nv_bfloat16) * static_cast<size_t>(n) * k));
  CK(cudaMalloc(&old_c, sizeof(double) * count));
  CK(cudaMalloc(&new_c, sizeof(double) * count));
  fill<<<1024, 256>>>(a, static_cast<long long>(m) * k, 1);
  fill<<<1024, 256>>>(b, static_cast<long long>(n) * k, 2);
  CK(cudaMemset(old_c, 0xFF, sizeof(double) * count));
  CK(cudaMemset(new_c, 0xFF, sizeof(double) * count));
  // As the descriptors launch them: 256-thread blocks, at most 65535 along the walked axis.
  const long long old_blocks = (static_cast<long long>(count) + 255) / 256;
  const float old_ms = time_ms([&] {
    per_element<kTransB><<<static_cast<unsigned>(old_blocks < 65535 ? old_blocks : 65535), 256>>>(a, b, old_c, m, n, k);
  });
  const int row_tiles = (m + 63) / 64;
  const dim3 grid((n + 63) / 64, row_tiles < 65535 ? row_tiles : 65535);
  const float new_ms = time_ms([&] {
    gmjit::reference::gemm<__nv_bfloat16, kTransB><<<grid, 256>>>(a, b, new_c, nullptr, m, n, k);
  });
  std::vector<double> old_host(count), new_host(count);
  CK(cudaMemcpy(old_host.data(), old_c, sizeof(double) * count, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(new_host.data(), new_c, sizeof(double) * count, cudaMemcpyDeviceToHost));
  size_t differ = 0;
  for (size_t i = 0; i < count; ++i) differ += old_host[i] != new_host[i];
  std::printf("%6d x %6d x %6d  trans_b=%d  per element %9.2f ms  tiled %8.2f ms  %6.1fx  %s\n", m, n, k,
              kTransB ? 1 : 0, old_ms, new_ms, old_ms / new_ms,
              differ ? "DIFFER" : "identical");
  if (differ) std::printf("  %zu of %zu elements differ\n", differ, count);
  CK(cudaFree(a));
  CK(cudaFree(b));
  CK(cudaFree(old_c));
  CK(cudaFree(new_c));
  return differ == 0;
}

int main() {
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s\n", prop.name);
  bool ok = true;
  ok &= run<true>(1, 6144, 4096);
  ok &= run<true>(16, 6144, 4096);
  ok &= run<true>(2048, 6144, 4096);
  ok &= run<true>(4096, 4096, 4096);
  ok &= run<false>(4096, 4096, 4096);
  ok &= run<true>(4096, 28672, 4096);
  ok &= run<true>(8192, 8192, 8192);
  ok &= run<true>(1000, 1096, 200);
  return ok ? 0 : 1;
}
