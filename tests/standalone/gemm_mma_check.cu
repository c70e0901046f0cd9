// Standalone GPU check of templates/gmjit/gemm.cuh against a double-precision host reference,
// independent of the library (no descriptor needed). Build and run on a GPU machine:
//   nvcc -std=c++17 -O2 -arch=sm_90a -Itemplates tests/standalone/gemm_mma_check.cu -o gemm_mma_check
//   ./gemm_mma_check [--time]
// Prints one line per (configuration, shape) and exits 1 on any mismatch or nonzero workspace.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "gmjit/gemm.cuh"

#define CK(x)                                                                          \
  do {                                                                                 \
    cudaError_t e_ = (x);                                                              \
    if (e_ != cudaSuccess) {                                                           \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(2);                                                                    \
    }                                                                                  \
  } while (0)

static int g_failures = 0;
static int g_cases = 0;

template <typename T>
float to_f(T v);
template <>
float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
template <>
float to_f(__half v) { return __half2float(v); }
template <typename T>
T from_f(float v);
template <>
__nv_bfloat16 from_f(float v) { return __float2bfloat16(v); }
template <>
__half from_f(float v) { return __float2half(v); }

struct Shape {
  int m, n, k;
};

template <typename T, bool TB, int BM, int BN, int BK, int WM, int WN, int ST, int GM, int SK, bool AL>
void run(const char* label, const std::vector<Shape>& shapes) {
  auto kernel = gmjit::gemm_mma<T, TB, BM, BN, BK, WM, WN, ST, GM, AL>;
  const int smem = gmjit::gemm_detail::mma_smem_bytes(BM, BN, BK, ST);
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (const auto& s : shapes) {
    ++g_cases;
    const int M = s.m, N = s.n, K = s.k;
    std::vector<T> a(size_t(M) * K), b(size_t(K) * N), c(size_t(M) * N);
    for (auto& v : a) v = from_f<T>(dist(rng));
    for (auto& v : b) v = from_f<T>(dist(rng));
    // Offsets by one element test the unaligned path's pointer alignment too.
    const int off = AL ? 0 : 1;
    T *da, *db, *dc;
    float* ws = nullptr;
    CK(cudaMalloc(&da, (a.size() + 8) * sizeof(T)));
    CK(cudaMalloc(&db, (b.size() + 8) * sizeof(T)));
    CK(cudaMalloc(&dc, (c.size() + 8) * sizeof(T)));
    const size_t ws_bytes = (size_t(M) * N + size_t((M + 15) / 16) * ((N + 15) / 16)) * 4;
    if (SK > 1) {
      CK(cudaMalloc(&ws, ws_bytes));
      CK(cudaMemset(ws, 0, ws_bytes));
    }
    CK(cudaMemcpy(da + off, a.data(), a.size() * sizeof(T), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(db + off, b.data(), b.size() * sizeof(T), cudaMemcpyHostToDevice));
    CK(cudaMemset(dc, 0xFF, (c.size() + 8) * sizeof(T)));
    const dim3 grid(((M + BM - 1) / BM) * ((N + BN - 1) / BN), 1, SK);
    bool ok = true;
    for (int rep = 0; rep < 2; ++rep) {  // twice: the workspace must be reusable
      kernel<<<grid, WM * WN * 32, smem>>>(da + off, db + off, dc + off, ws, M, N, K);
      CK(cudaGetLastError());
      CK(cudaDeviceSynchronize());
    }
    CK(cudaMemcpy(c.data(), dc + off, c.size() * sizeof(T), cudaMemcpyDeviceToHost));
    // Guard elements around C untouched (0xFFFF pattern).
    std::vector<unsigned short> guard(c.size() + 8);
    CK(cudaMemcpy(guard.data(), dc, guard.size() * 2, cudaMemcpyDeviceToHost));
    for (int i = 0; i < off; ++i) ok &= guard[i] == 0xFFFF;
    for (size_t i = off + c.size(); i < guard.size(); ++i) ok &= guard[i] == 0xFFFF;
    if (!ok) std::printf("  guard elements around C overwritten\n");
    double max_err = 0;
    int bad = 0;
    for (int i = 0; i < M; ++i) {
      for (int j = 0; j < N; ++j) {
        double ref = 0, mag = 0;
        for (int kk = 0; kk < K; ++kk) {
          const double av = to_f(a[size_t(i) * K + kk]);
          const double bv = TB ? to_f(b[size_t(j) * K + kk]) : to_f(b[size_t(kk) * N + j]);
          ref += av * bv;
          mag += std::fabs(av * bv);
        }
        const double got = to_f(c[size_t(i) * N + j]);
        const double err = std::fabs(got - ref);
        const double tol = 1e-2 * std::fabs(ref) + 1e-4 * mag + 1e-3;
        if (!(err <= tol)) {
          if (bad < 4) std::printf("  C[%d,%d] = %g, want %g\n", i, j, got, ref);
          ++bad;
        }
        if (err > max_err) max_err = err;
      }
    }
    if (SK > 1) {
      std::vector<unsigned> w(ws_bytes / 4);
      CK(cudaMemcpy(w.data(), ws, ws_bytes, cudaMemcpyDeviceToHost));
      size_t nz = 0;
      for (unsigned v : w) nz += v != 0;
      if (nz) {
        std::printf("  workspace has %zu nonzero words after the launch\n", nz);
        ok = false;
      }
    }
    ok &= bad == 0;
    if (!ok) ++g_failures;
    std::printf("%s %-48s M=%d N=%d K=%d max_err=%.3g bad=%d\n", ok ? "ok  " : "FAIL", label, M, N, K, max_err, bad);
    CK(cudaFree(da));
    CK(cudaFree(db));
    CK(cudaFree(dc));
    if (ws) CK(cudaFree(ws));
  }
}

// Throughput at one large shape, aligned path, so the lead sees whether the pipeline is sane.
template <typename T, bool TB, int BM, int BN, int BK, int WM, int WN, int ST, int GM, int SK>
void time_one(const char* label, int M, int N, int K) {
  auto kernel = gmjit::gemm_mma<T, TB, BM, BN, BK, WM, WN, ST, GM, true>;
  const int smem = gmjit::gemm_detail::mma_smem_bytes(BM, BN, BK, ST);
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  T *da, *db, *dc;
  float* ws = nullptr;
  CK(cudaMalloc(&da, size_t(M) * K * sizeof(T)));
  CK(cudaMalloc(&db, size_t(K) * N * sizeof(T)));
  CK(cudaMalloc(&dc, size_t(M) * N * sizeof(T)));
  CK(cudaMemset(da, 0x3c, size_t(M) * K * sizeof(T)));  // nonzero, finite in both types
  CK(cudaMemset(db, 0x3c, size_t(K) * N * sizeof(T)));
  if (SK > 1) {
    const size_t bytes = (size_t(M) * N + size_t((M + 15) / 16) * ((N + 15) / 16)) * 4;
    CK(cudaMalloc(&ws, bytes));
    CK(cudaMemset(ws, 0, bytes));
  }
  const dim3 grid(((M + BM - 1) / BM) * ((N + BN - 1) / BN), 1, SK);
  for (int i = 0; i < 3; ++i) kernel<<<grid, WM * WN * 32, smem>>>(da, db, dc, ws, M, N, K);
  CK(cudaGetLastError());
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  const int reps = 20;
  CK(cudaEventRecord(e0));
  for (int i = 0; i < reps; ++i) kernel<<<grid, WM * WN * 32, smem>>>(da, db, dc, ws, M, N, K);
  CK(cudaEventRecord(e1));
  CK(cudaEventSynchronize(e1));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  ms /= reps;
  std::printf("time %-40s %dx%dx%d %.3f ms %.1f TFLOP/s\n", label, M, N, K, ms, 2.0 * M * N * K / ms / 1e9);
  CK(cudaFree(da));
  CK(cudaFree(db));
  CK(cudaFree(dc));
  if (ws) CK(cudaFree(ws));
}

int main(int argc, char** argv) {
  typedef __nv_bfloat16 bf;
  typedef __half hf;
  const std::vector<Shape> aligned = {{128, 128, 64}, {200, 264, 520}, {64, 72, 8}, {512, 384, 1024}, {1, 8, 16}};
  const std::vector<Shape> any = {{1, 1, 1}, {17, 13, 7}, {129, 67, 301}, {3, 250, 1000}, {200, 264, 520}, {131, 257, 33}};
#define RUN(T, TB, BM, BN, BK, WM, WN, ST, GM, SK, AL, shapes) \
  run<T, TB, BM, BN, BK, WM, WN, ST, GM, SK, AL>(#T " " #TB " " #BM "x" #BN "x" #BK " w" #WM "x" #WN " s" #ST " g" #GM " k" #SK " " #AL, shapes)
  RUN(bf, false, 128, 128, 32, 2, 2, 4, 8, 1, true, aligned);
  RUN(bf, true, 128, 128, 32, 2, 2, 4, 8, 1, true, aligned);
  RUN(hf, false, 128, 128, 64, 2, 2, 3, 1, 1, true, aligned);
  RUN(hf, true, 128, 128, 64, 2, 2, 3, 1, 1, true, aligned);
  RUN(bf, false, 64, 64, 32, 2, 1, 2, 1, 1, true, aligned);
  RUN(bf, true, 64, 256, 64, 1, 4, 3, 8, 1, true, aligned);
  RUN(hf, false, 256, 128, 64, 4, 2, 3, 8, 1, true, aligned);
  RUN(bf, false, 128, 256, 32, 2, 4, 5, 8, 1, true, aligned);
  RUN(bf, true, 128, 64, 64, 4, 2, 4, 1, 4, true, aligned);
  RUN(hf, false, 64, 128, 32, 2, 2, 2, 8, 8, true, aligned);
  RUN(bf, false, 128, 128, 32, 2, 2, 4, 8, 1, false, any);
  RUN(bf, true, 128, 128, 64, 2, 2, 3, 8, 1, false, any);
  RUN(hf, false, 64, 64, 64, 1, 2, 2, 1, 2, false, any);
  RUN(hf, true, 256, 64, 32, 4, 1, 4, 8, 4, false, any);
  std::printf("%d of %d cases failed\n", g_failures, g_cases);
  if (argc > 1 && std::string(argv[1]) == "--time") {
    time_one<bf, true, 128, 128, 32, 2, 2, 4, 8, 1>("bf16 NT 128x128x32 w2x2 s4 g8", 4096, 4096, 4096);
    time_one<bf, true, 128, 128, 64, 2, 2, 3, 8, 1>("bf16 NT 128x128x64 w2x2 s3 g8", 4096, 4096, 4096);
    time_one<bf, true, 128, 256, 32, 2, 4, 4, 8, 1>("bf16 NT 128x256x32 w2x4 s4 g8", 4096, 4096, 4096);
    time_one<bf, true, 256, 128, 64, 4, 2, 3, 8, 1>("bf16 NT 256x128x64 w4x2 s3 g8", 4096, 4096, 4096);
    time_one<bf, false, 128, 256, 32, 2, 4, 4, 8, 1>("bf16 NN 128x256x32 w2x4 s4 g8", 4096, 4096, 4096);
    time_one<bf, false, 128, 128, 32, 2, 2, 4, 8, 1>("bf16 NN 128x128x32 w2x2 s4 g8", 4096, 4096, 4096);
    time_one<hf, true, 128, 256, 32, 2, 4, 4, 8, 1>("fp16 NT 128x256x32 w2x4 s4 g8", 8192, 8192, 8192);
    time_one<bf, true, 64, 128, 64, 2, 2, 4, 1, 8>("bf16 NT 64x128x64 w2x2 s4 split8", 256, 4096, 16384);
    time_one<bf, true, 64, 128, 64, 2, 2, 4, 1, 1>("bf16 NT 64x128x64 w2x2 s4 split1", 256, 4096, 16384);
  }
  return g_failures == 0 ? 0 : 1;
}
