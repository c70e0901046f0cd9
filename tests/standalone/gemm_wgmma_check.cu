// Standalone GPU check of templates/gmjit/gemm_wgmma.cuh (TMA + wgmma, sm_90a) against a
// double-precision host reference, independent of the library: the tensor maps are encoded here
// with the Driver API exactly as the kernel's comment describes. Build and run on an H100/H200:
//   nvcc -std=c++17 -O2 -arch=sm_90a -Itemplates tests/standalone/gemm_wgmma_check.cu -o gemm_wgmma_check -lcuda -lcublas
//   ./gemm_wgmma_check           every valid (bm, bn, consumers), stages 2/3/4, group_m 1/8, bf16
//                                and fp16, both B layouts, tiny, odd and large shapes; split-K and
//                                pingpong, clusters and the TMA store epilogue on a selection
//   ./gemm_wgmma_check --split   the split-K and cluster cases only
//   ./gemm_wgmma_check --time    bf16 throughput beside cublasGemmEx at 4096^3, 8192^3, 8192x8192x2048,
//                                at decode / small-batch shapes with split-K 1, 2, 4, and bn=192
//                                beside 128x256 and 128x128 at two one-wave shapes
//   ./gemm_wgmma_check --profile one launch of cuBLAS and of four tiles at 4096^3 and 8192^3, for ncu
//   ./gemm_wgmma_check --stream  the decode shapes' weights read by TMA alone (box shapes, blocks),
//                                by all-SM loads and by cudaMemcpy: what the memory gives them
//   ./gemm_wgmma_check --profile-decode  one launch of cuBLAS, the tuned tiles and the streams at
//                                16x6144x4096 and 64x4096x4096, for ncu
// Prints one line per (configuration, shape) and exits 1 on any mismatch (or when the device is
// not sm_90).
//
// Inputs are random in +-[1/16, 1) (never zero: a kernel that skips a k-tile shows), C is set to
// NaN (0xFFFF) before each launch and guard elements after C must stay NaN. Small shapes are
// checked in full, each at two grids: min(tiles, SMs) and 2 blocks (so a block walks several tiles
// and the ring's phases carry across tiles). Large shapes: every element must be written (no NaN
// left) and a few thousand sampled elements are compared. Per element,
// |got - ref| <= 1e-4 + 4e-6 * k + rtol * |ref|, rtol 4e-3 for bf16 and 5e-4 for fp16 (C's
// rounding is at most half an ulp: 2^-8 and 2^-11 relative).
#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gmjit/gemm_wgmma.cuh"

#define CK(x)                                                                                \
  do {                                                                                       \
    cudaError_t e_ = (x);                                                                    \
    if (e_ != cudaSuccess) {                                                                 \
      std::printf("CUDA error %s at %s:%d: %s\n", cudaGetErrorString(e_), __FILE__, __LINE__, #x); \
      std::exit(2);                                                                          \
    }                                                                                        \
  } while (0)

#define CU(x)                                                                                   \
  do {                                                                                          \
    CUresult r_ = (x);                                                                          \
    if (r_ != CUDA_SUCCESS) {                                                                   \
      const char* s_ = nullptr;                                                                 \
      cuGetErrorString(r_, &s_);                                                                \
      std::printf("driver error %d (%s) at %s:%d: %s\n", int(r_), s_ ? s_ : "?", __FILE__, __LINE__, #x); \
      std::exit(2);                                                                             \
    }                                                                                           \
  } while (0)

#define CB(x)                                                                               \
  do {                                                                                      \
    cublasStatus_t s_ = (x);                                                                \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                      \
      std::printf("cuBLAS error %d at %s:%d: %s\n", int(s_), __FILE__, __LINE__, #x);       \
      std::exit(2);                                                                         \
    }                                                                                       \
  } while (0)

using gmjit::wgmma_detail::TmaMap;
typedef __nv_bfloat16 bf;
typedef __half hf;

static_assert(sizeof(CUtensorMap) == sizeof(TmaMap), "TmaMap must be a CUtensorMap's 128 bytes");

static int g_sms = 0;
static int g_failures = 0;
static int g_cases = 0;

template <typename T>
float to_f(T v);
template <>
float to_f(bf v) { return __bfloat162float(v); }
template <>
float to_f(hf v) { return __half2float(v); }

template <typename T>
struct TypeInfo;
template <>
struct TypeInfo<bf> {
  static constexpr CUtensorMapDataType kTma = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  static constexpr double kRtol = 4e-3;
  static const char* name() { return "bf16"; }
};
template <>
struct TypeInfo<hf> {
  static constexpr CUtensorMapDataType kTma = CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  static constexpr double kRtol = 5e-4;
  static const char* name() { return "fp16"; }
};

__device__ __forceinline__ unsigned long long splitmix64(unsigned long long x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// +-[1/16, 1), random sign, rounded to T.
template <typename T>
__global__ void fill_random(T* p, size_t n, unsigned long long seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const unsigned long long h = splitmix64(seed * 0x100000001B3ull + i);
    const float mag = 0.0625f + 0.9375f * float(h & 0xFFFFFF) * (1.0f / 16777216.0f);
    p[i] = T((h >> 32) & 1 ? -mag : mag);
  }
}

template <typename T>
void fill(T* p, size_t n, unsigned long long seed) {
  fill_random<T><<<1024, 256>>>(p, n, seed);
  CK(cudaGetLastError());
}

// 2-D map of a row-major matrix: dims {inner, outer} (innermost first), row pitch in bytes, box
// {box_inner, box_outer}, 128-byte swizzle (the kernel's; --stream also reads unswizzled boxes),
// out-of-bounds elements read as zeros.
template <typename T>
TmaMap encode_map(const void* base, uint64_t inner, uint64_t outer, uint32_t box_inner, uint32_t box_outer,
                  CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_128B) {
  CUtensorMap map;
  const cuuint64_t dims[2] = {inner, outer};
  const cuuint64_t strides[1] = {inner * sizeof(T)};
  const cuuint32_t box[2] = {box_inner, box_outer};
  const cuuint32_t element_strides[2] = {1, 1};
  CU(cuTensorMapEncodeTiled(&map, TypeInfo<T>::kTma, 2, const_cast<void*>(base), dims, strides, box,
                            element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
  TmaMap out;
  std::memcpy(&out, &map, sizeof(out));
  return out;
}

// One compiled configuration: maps, shared memory attribute, launch.
// CL = 2: clusters of two blocks sharing B's tile (multicast); the grid is then even and at most
// twice the clusters the device can hold at once (cudaOccupancyMaxActiveClusters).
// TS: the TMA store epilogue (C through shared memory).
template <typename T, bool TB, int BM, int BN, int ST, int CO, int GM, bool PP = false, int CL = 1, bool TS = false>
struct Config {
  static constexpr int kSmem = gmjit::wgmma_detail::wgmma_smem_bytes(BM, BN, ST, CO, TS);
  static_assert(gmjit::wgmma_detail::wgmma_config_violation_code(BM, BN, ST, CO, PP, CL, TS) == 0,
                "invalid test configuration");
  static constexpr auto kKernel = gmjit::gemm_wgmma<T, TB, BM, BN, ST, CO, GM, PP, CL, TS>;
  static std::string label() {
    char buf[96];
    std::snprintf(buf, sizeof buf, "%s %s %dx%d s%d c%d g%d%s%s%s", TypeInfo<T>::name(), TB ? "B^T" : "B  ", BM, BN,
                  ST, CO, GM, PP ? " pp" : "", CL > 1 ? " cl2" : "", TS ? " tma-st" : "");
    return buf;
  }
  // Units the grid walks: tiles, or with clusters pairs of tile rows.
  static int tiles(int M, int N) { return ((M + BM - 1) / BM + CL - 1) / CL * ((N + BN - 1) / BN); }
  // Blocks of the persistent grid for `sms` SMs' worth of blocks (a multiple of CL).
  static int grid_for(int M, int N, int sms) {
    int slots = sms / CL;
    if (CL > 1) {
      static int active = 0;
      if (!active) {
        cudaLaunchAttribute attr;
        const cudaLaunchConfig_t cfg = launch_config(CL * 66, 1, 0, &attr);
        prepare();
        CK(cudaOccupancyMaxActiveClusters(&active, kKernel, &cfg));
        std::printf("  %s: %d clusters of %d fit at once\n", label().c_str(), active, CL);
      }
      slots = std::min(slots, active);
    }
    return CL * std::min(tiles(M, N), std::max(1, slots));
  }
  // The launch of `grid` x `split` blocks; with clusters, *attr (which must outlive the
  // configuration) carries the cluster dimensions.
  static cudaLaunchConfig_t launch_config(int grid, int split, cudaStream_t stream, cudaLaunchAttribute* attr) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(grid, 1, split);
    cfg.blockDim = dim3((CO + 1) * 128, 1, 1);
    cfg.dynamicSmemBytes = kSmem;
    cfg.stream = stream;
    attr->id = cudaLaunchAttributeClusterDimension;
    attr->val.clusterDim.x = CL;
    attr->val.clusterDim.y = 1;
    attr->val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = CL > 1 ? 1 : 0;
    return cfg;
  }
  static void prepare() {
    static bool prepared = false;
    if (!prepared) {
      CK(cudaFuncSetAttribute(kKernel,
                              cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
      if (CL > 1) {
        CK(cudaFuncSetAttribute(kKernel,
                                cudaFuncAttributeNonPortableClusterSizeAllowed, 0));
      }
      prepared = true;
    }
  }
  // split > 1: blocks (x, z) take k-slice z; workspace as the kernel's comment says (zero).
  static void launch(const T* a, const T* b, T* c, int M, int N, int K, int grid, cudaStream_t stream = 0,
                     int split = 1, float* workspace = nullptr) {
    prepare();
    const TmaMap ma = encode_map<T>(a, uint64_t(K), uint64_t(M), 64, BM);
    const TmaMap mb = TB ? encode_map<T>(b, uint64_t(K), uint64_t(N), 64, BN / CL)  // N x K, K contiguous
                         : encode_map<T>(b, uint64_t(N), uint64_t(K), 64, 64);       // K x N, 64 x 64 panels
    const TmaMap mc = encode_map<T>(c, uint64_t(N), uint64_t(M), 64, 64);            // 64 x 64 store chunks
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = launch_config(grid, split, stream, &attr);
    CK(cudaLaunchKernelEx(&cfg, kKernel, a, b, c, workspace, M, N, K, ma, mb, mc));
  }
};

// A problem's data, kept for every configuration that runs it (the reference is computed once).
template <typename T>
struct Problem {
  int M = 0, N = 0, K = 0;
  bool tb = false;
  T *da = nullptr, *db = nullptr, *dc = nullptr;
  float* dw = nullptr;  // split-K workspace: M * N partials and a counter per 16 x 16 of C, zero
  size_t workspace_floats = 0;
  std::vector<float> a;   // M x K
  std::vector<float> bt;  // N x K (B^T whatever the stored layout)
  std::vector<double> ref;  // M x N when checked in full
  static constexpr int kGuard = 64;

  double dot(int i, int j) const {
    double s = 0;
    const float* x = &a[size_t(i) * K];
    const float* y = &bt[size_t(j) * K];
    for (int k = 0; k < K; ++k) s += double(x[k]) * double(y[k]);
    return s;
  }
};

template <typename T>
Problem<T>& problem(int M, int N, int K, bool tb, bool full) {
  static std::map<std::tuple<int, int, int, bool>, Problem<T>*> cache;
  auto key = std::make_tuple(M, N, K, tb);
  auto it = cache.find(key);
  if (it != cache.end()) return *it->second;
  Problem<T>* p = new Problem<T>;
  p->M = M;
  p->N = N;
  p->K = K;
  p->tb = tb;
  const size_t na = size_t(M) * K, nb = size_t(N) * K, nc = size_t(M) * N;
  CK(cudaMalloc(&p->da, na * sizeof(T)));
  CK(cudaMalloc(&p->db, nb * sizeof(T)));
  CK(cudaMalloc(&p->dc, (nc + Problem<T>::kGuard) * sizeof(T)));
  p->workspace_floats = nc + size_t((M + 15) / 16) * ((N + 15) / 16);
  CK(cudaMalloc(&p->dw, p->workspace_floats * sizeof(float)));
  CK(cudaMemset(p->dw, 0, p->workspace_floats * sizeof(float)));
  const unsigned long long seed = (unsigned long long)M * 1000003ull + N * 1009ull + K + (tb ? 7ull << 40 : 0);
  fill(p->da, na, seed);
  fill(p->db, nb, seed ^ 0xABCDEFull);
  CK(cudaDeviceSynchronize());
  std::vector<T> ha(na), hb(nb);
  CK(cudaMemcpy(ha.data(), p->da, na * sizeof(T), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(hb.data(), p->db, nb * sizeof(T), cudaMemcpyDeviceToHost));
  p->a.resize(na);
  for (size_t i = 0; i < na; ++i) p->a[i] = to_f(ha[i]);
  p->bt.resize(nb);
  if (tb) {
    for (size_t i = 0; i < nb; ++i) p->bt[i] = to_f(hb[i]);
  } else {
    for (int k = 0; k < K; ++k)
      for (int j = 0; j < N; ++j) p->bt[size_t(j) * K + k] = to_f(hb[size_t(k) * N + j]);
  }
  if (full) {
    p->ref.resize(nc);
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < N; ++j) p->ref[size_t(i) * N + j] = p->dot(i, j);
  }
  cache[key] = p;
  return *p;
}

struct Shape {
  int m, n, k;
};

// Launches `C` on `p` with the given grid and compares. Returns the largest error; counts
// mismatches into *bad and describes the first few.
template <typename T, typename C>
double launch_and_compare(Problem<T>& p, int grid, bool full, int* bad, int split = 1) {
  const size_t nc = size_t(p.M) * p.N;
  CK(cudaMemset(p.dc, 0xFF, (nc + Problem<T>::kGuard) * sizeof(T)));  // NaN in bf16 and fp16
  C::launch(p.da, p.db, p.dc, p.M, p.N, p.K, grid, 0, split, split > 1 ? p.dw : nullptr);
  CK(cudaDeviceSynchronize());
  if (split > 1) {  // the last slice of every tile must leave partials and counters at zero
    std::vector<float> w(p.workspace_floats);
    CK(cudaMemcpy(w.data(), p.dw, w.size() * sizeof(float), cudaMemcpyDeviceToHost));
    size_t dirty = 0;
    for (float x : w) dirty += x != 0.f;
    if (dirty) {
      if (*bad < 4) std::printf("  split %d: %zu workspace words left non-zero\n", split, dirty);
      ++*bad;
      CK(cudaMemset(p.dw, 0, p.workspace_floats * sizeof(float)));
    }
  }
  std::vector<T> c(nc + Problem<T>::kGuard);
  CK(cudaMemcpy(c.data(), p.dc, c.size() * sizeof(T), cudaMemcpyDeviceToHost));
  for (int i = 0; i < Problem<T>::kGuard; ++i) {
    unsigned short bits;
    std::memcpy(&bits, &c[nc + i], 2);
    if (bits != 0xFFFF) {
      if (*bad < 4) std::printf("  guard element %d after C overwritten\n", i);
      ++*bad;
      break;
    }
  }
  const double rtol = TypeInfo<T>::kRtol;
  const double atol = 1e-4 + 4e-6 * p.K;
  double max_err = 0;
  auto check_one = [&](int i, int j, double ref) {
    const double got = to_f(c[size_t(i) * p.N + j]);
    const double err = std::fabs(got - ref);
    if (!(err <= atol + rtol * std::fabs(ref))) {
      if (*bad < 4) std::printf("  grid %d: C[%d,%d] = %g, want %g\n", grid, i, j, got, ref);
      ++*bad;
      if (!(err <= max_err)) max_err = std::isnan(err) ? INFINITY : err;
      return;
    }
    max_err = std::max(max_err, err);
  };
  if (full) {
    for (int i = 0; i < p.M; ++i)
      for (int j = 0; j < p.N; ++j) check_one(i, j, p.ref[size_t(i) * p.N + j]);
  } else {
    size_t unwritten = 0;
    for (size_t e = 0; e < nc; ++e) unwritten += std::isnan(to_f(c[e]));
    if (unwritten) {
      std::printf("  grid %d: %zu elements of C left unwritten (NaN)\n", grid, unwritten);
      *bad += 1;
      max_err = INFINITY;
    }
    std::mt19937 rng(p.M * 31 + p.N * 17 + p.K);
    std::vector<std::pair<int, int>> picks;
    // The corners of the matrix and of the first tile, then random elements.
    for (int i : {0, 1, 63, 64, p.M - 1})
      for (int j : {0, 1, 7, 8, p.N - 1})
        if (i >= 0 && i < p.M && j >= 0 && j < p.N) picks.push_back({i, j});
    std::uniform_int_distribution<int> di(0, p.M - 1), dj(0, p.N - 1);
    for (int s = 0; s < 4096; ++s) picks.push_back({di(rng), dj(rng)});
    for (auto& ij : picks) check_one(ij.first, ij.second, p.dot(ij.first, ij.second));
  }
  return max_err;
}

// split > 1: the grid's x is min(tiles, SMs / split) as the library launches it, then 2.
template <typename T, bool TB, int BM, int BN, int ST, int CO, int GM, bool PP = false, int CL = 1, bool TS = false>
void check(const std::vector<Shape>& shapes, bool full, int split = 1) {
  typedef Config<T, TB, BM, BN, ST, CO, GM, PP, CL, TS> C;
  for (const Shape& s : shapes) {
    ++g_cases;
    Problem<T>& p = problem<T>(s.m, s.n, s.k, TB, full);
    const int tiles = C::tiles(s.m, s.n);
    const int grid_full = C::grid_for(s.m, s.n, g_sms / split);
    int bad = 0;
    double err = launch_and_compare<T, C>(p, grid_full, full, &bad, split);
    int grid_small = 0;
    if (full && tiles > 2) {  // several tiles a block: the ring's phases carry across tiles
      grid_small = 2 * CL;
      err = std::max(err, launch_and_compare<T, C>(p, grid_small, full, &bad, split));
    }
    if (bad) ++g_failures;
    char grids[32];
    if (grid_small)
      std::snprintf(grids, sizeof grids, "grids %d,%d", grid_full, grid_small);
    else
      std::snprintf(grids, sizeof grids, "grid %d", grid_full);
    char split_text[16] = "";
    if (split > 1) std::snprintf(split_text, sizeof split_text, " split %d", split);
    std::printf("%s %-28s%-8s M=%-5d N=%-5d K=%-5d %-14s %s max_err=%.3g bad=%d\n", bad ? "FAIL" : "PASS",
                C::label().c_str(), split_text, s.m, s.n, s.k, grids, full ? "full   " : "sampled", err, bad);
  }
}

// ---------------------------------------------------------------------------------------------
// Timing.

static void* g_flush = nullptr;
static const size_t kFlushBytes = size_t(256) << 20;
// --profile: every timed launch runs once, without warm-up or flush, for a profiler that replays
// each kernel with its own cache control.
static bool g_profile = false;

// Median milliseconds of `reps` runs of launch(), L2 flushed (a 256 MB memset) before each run
// and only the launch between the events.
template <typename F>
double median_ms(F launch, int reps = 20) {
  if (g_profile) {
    launch();
    CK(cudaDeviceSynchronize());
    return 0.0;
  }
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (int i = 0; i < 3; ++i) launch();
  CK(cudaDeviceSynchronize());
  std::vector<float> ms(reps);
  for (int r = 0; r < reps; ++r) {
    CK(cudaMemsetAsync(g_flush, r & 0xFF, kFlushBytes));
    CK(cudaEventRecord(e0));
    launch();
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&ms[r], e0, e1));
  }
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  std::sort(ms.begin(), ms.end());
  return reps % 2 ? ms[reps / 2] : 0.5 * (ms[reps / 2 - 1] + ms[reps / 2]);
}

struct TimeCtx {
  cublasHandle_t handle;
  int M, N, K;
  bool tb;
  bf *da, *db, *dc;
  float* dw;  // split-K workspace (zero)
  double cublas_ms;
  std::vector<float> a, bt;  // for a sampled check of each configuration's output
};

static double tflops(const TimeCtx& t, double ms) { return 2.0 * t.M * t.N * double(t.K) / ms / 1e9; }

// "<ms> ms <TFLOP/s> TFLOP/s  <ratio>" for a timed run (`versus`: what the time is against), or
// what --profile ran instead of timing.
static std::string timing_text(const TimeCtx& t, double ms, const std::string& versus) {
  if (g_profile) return "launched once for the profiler";
  char buf[128];
  std::snprintf(buf, sizeof buf, "%8.3f ms %6.1f TFLOP/s  %s", ms, tflops(t, ms), versus.c_str());
  return buf;
}

// C^T = B^T A^T in cuBLAS's column-major view: A (M x K row-major) is A^T (K x M, ld K); B stored
// N x K is column-major K x N (ld K), transposed by op T; B stored K x N is column-major N x K
// (ld N), B^T already.
static void cublas_gemm(const TimeCtx& t) {
  const float alpha = 1.f, beta = 0.f;
  CB(cublasGemmEx(t.handle, t.tb ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, t.N, t.M, t.K, &alpha, t.db, CUDA_R_16BF,
                  t.tb ? t.K : t.N, t.da, CUDA_R_16BF, t.K, &beta, t.dc, CUDA_R_16BF, t.N, CUBLAS_COMPUTE_32F,
                  CUBLAS_GEMM_DEFAULT));
}

// Sampled comparison of t.dc against the host reference (256 elements).
static int sampled_bad(const TimeCtx& t, double* max_err) {
  std::mt19937 rng(99);
  std::uniform_int_distribution<int> di(0, t.M - 1), dj(0, t.N - 1);
  int bad = 0;
  *max_err = 0;
  for (int s = 0; s < 256; ++s) {
    const int i = di(rng), j = dj(rng);
    double ref = 0;
    for (int k = 0; k < t.K; ++k) ref += double(t.a[size_t(i) * t.K + k]) * double(t.bt[size_t(j) * t.K + k]);
    bf g;
    CK(cudaMemcpy(&g, t.dc + size_t(i) * t.N + j, sizeof(bf), cudaMemcpyDeviceToHost));
    const double err = std::fabs(double(to_f(g)) - ref);
    if (!(err <= 1e-4 + 4e-6 * t.K + TypeInfo<bf>::kRtol * std::fabs(ref))) ++bad;
    if (!(err <= *max_err)) *max_err = err;
  }
  return bad;
}

template <int BM, int BN, int ST, int CO, int GM, bool TB, bool PP = false, int CL = 1, bool TS = false>
void time_config(TimeCtx& t, int split = 1) {
  typedef Config<bf, TB, BM, BN, ST, CO, GM, PP, CL, TS> C;
  const int grid = C::grid_for(t.M, t.N, g_sms / split);
  CK(cudaMemset(t.dc, 0xFF, size_t(t.M) * t.N * sizeof(bf)));
  const double ms =
      median_ms([&] { C::launch(t.da, t.db, t.dc, t.M, t.N, t.K, grid, 0, split, split > 1 ? t.dw : nullptr); });
  double err = 0;
  const int bad = sampled_bad(t, &err);
  if (bad) ++g_failures;
  std::string label = C::label();
  if (split > 1) label += " split " + std::to_string(split);
  char ratio[32];
  std::snprintf(ratio, sizeof ratio, "%.2fx cuBLAS", t.cublas_ms / ms);
  std::printf("time %-36s %5dx%5dx%5d %s  check %s (max_err %.3g)\n", label.c_str(), t.M, t.N, t.K,
              timing_text(t, ms, ratio).c_str(), bad ? "FAIL" : "ok", err);
}

// Allocates and fills t's operands and times cuBLAS on them.
template <bool TB>
void prepare_timing(TimeCtx& t, cublasHandle_t handle, int M, int N, int K) {
  t.handle = handle;
  t.M = M;
  t.N = N;
  t.K = K;
  t.tb = TB;
  CK(cudaMalloc(&t.da, size_t(M) * K * sizeof(bf)));
  CK(cudaMalloc(&t.db, size_t(N) * K * sizeof(bf)));
  CK(cudaMalloc(&t.dc, size_t(M) * N * sizeof(bf)));
  const size_t workspace_floats = size_t(M) * N + size_t((M + 15) / 16) * ((N + 15) / 16);
  CK(cudaMalloc(&t.dw, workspace_floats * sizeof(float)));
  CK(cudaMemset(t.dw, 0, workspace_floats * sizeof(float)));
  fill(t.da, size_t(M) * K, 11);
  fill(t.db, size_t(N) * K, 12);
  CK(cudaDeviceSynchronize());
  {
    std::vector<bf> ha(size_t(M) * K), hb(size_t(N) * K);
    CK(cudaMemcpy(ha.data(), t.da, ha.size() * sizeof(bf), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hb.data(), t.db, hb.size() * sizeof(bf), cudaMemcpyDeviceToHost));
    t.a.resize(ha.size());
    for (size_t i = 0; i < ha.size(); ++i) t.a[i] = to_f(ha[i]);
    t.bt.resize(hb.size());
    if (TB) {
      for (size_t i = 0; i < hb.size(); ++i) t.bt[i] = to_f(hb[i]);
    } else {
      for (int k = 0; k < K; ++k)
        for (int j = 0; j < N; ++j) t.bt[size_t(j) * K + k] = to_f(hb[size_t(k) * N + j]);
    }
  }
  t.cublas_ms = median_ms([&] { cublas_gemm(t); });
  double err = 0;
  const int bad = sampled_bad(t, &err);
  std::printf("time %-28s %5dx%5dx%5d %s     check %s (max_err %.3g)\n", TB ? "cuBLAS bf16 B^T" : "cuBLAS bf16 B", M,
              N, K, timing_text(t, t.cublas_ms, "(reference)").c_str(), bad ? "FAIL" : "ok", err);
}

static void release_timing(TimeCtx& t) {
  CK(cudaFree(t.da));
  CK(cudaFree(t.db));
  CK(cudaFree(t.dc));
  CK(cudaFree(t.dw));
}

template <bool TB>
void time_shape(cublasHandle_t handle, int M, int N, int K) {
  TimeCtx t;
  prepare_timing<TB>(t, handle, M, N, K);
  time_config<128, 256, 4, 2, 8, TB>(t);
  time_config<128, 256, 3, 2, 8, TB>(t);
  time_config<256, 128, 3, 2, 8, TB>(t);
  time_config<256, 128, 4, 2, 8, TB>(t);
  time_config<128, 128, 4, 2, 8, TB>(t);
  time_config<128, 128, 4, 1, 8, TB>(t);
  time_config<128, 128, 4, 2, 8, TB, true>(t);
  time_config<128, 128, 5, 2, 8, TB, true>(t);
  time_config<64, 256, 4, 2, 8, TB, true>(t);
  time_config<128, 256, 4, 2, 8, TB, false, 2>(t);
  time_config<128, 256, 3, 2, 8, TB, false, 2>(t);
  time_config<256, 128, 3, 2, 8, TB, false, 2>(t);
  time_config<128, 128, 5, 2, 8, TB, true, 2>(t);
  time_config<64, 256, 4, 2, 8, TB, true, 2>(t);
  // The TMA store epilogue beside the same tiles' register epilogue above.
  time_config<128, 256, 4, 2, 8, TB, false, 1, true>(t);
  time_config<128, 256, 4, 2, 8, TB, false, 2, true>(t);
  time_config<128, 128, 5, 2, 8, TB, true, 1, true>(t);
  time_config<64, 256, 4, 2, 8, TB, true, 1, true>(t);
  release_timing(t);
}

// Decode and small-batch shapes (x @ W^T): few tiles, where split-K fills the SMs.
void time_skinny_shape(cublasHandle_t handle, int M, int N, int K) {
  TimeCtx t;
  prepare_timing<true>(t, handle, M, N, K);
  for (int split : {1, 2, 4}) {
    time_config<64, 64, 8, 1, 1, true>(t, split);
    time_config<64, 64, 10, 1, 1, true>(t, split);
    time_config<64, 64, 12, 1, 1, true>(t, split);
    time_config<64, 64, 12, 2, 1, true, true>(t, split);
    time_config<64, 128, 6, 1, 1, true>(t, split);
    time_config<64, 256, 4, 1, 1, true>(t, split);
    time_config<128, 128, 5, 2, 8, true>(t, split);
  }
  release_timing(t);
}

// Shapes whose winners fill three quarters of the SMs in one wave (bench/NOTES.md, fifteenth
// session), against the bn=192 tiles that make 128 tiles of them.
void time_quantized_shape(cublasHandle_t handle, int M, int N, int K) {
  TimeCtx t;
  prepare_timing<true>(t, handle, M, N, K);
  time_config<128, 256, 4, 2, 8, true>(t);
  time_config<128, 128, 5, 2, 8, true>(t);
  time_config<128, 192, 4, 2, 8, true>(t);
  time_config<128, 192, 5, 2, 8, true>(t);
  time_config<64, 192, 6, 1, 8, true>(t);
  time_config<64, 192, 4, 2, 8, true, true>(t);
  time_config<128, 192, 4, 2, 8, true, false, 2>(t);
  release_timing(t);
}

// --stream: the decode tiles' weight stream without the GEMM around it. At 16-128 x 4096-6144 x
// 4096 the Hopper family and cuBLAS both draw B at 1.5-1.7 TB/s (bench/NOTES.md, twentieth
// session) where splits, deeper rings and more blocks did not help. These kernels take B (N x K,
// K contiguous) through TMA as a 64-row tile does, one block a 64-row panel (with `splits`, a
// panel's k is cut in that many blocks), and do nothing with it: one thread keeps kStages boxes
// in flight and waits for each before reusing its buffer. Against them, an all-SM vectorised load
// of the same bytes and cudaMemcpy say what the memory gives, so the time the GEMM spends past the
// stream is the GEMM's, and a box longer along k says whether 128-byte row pieces cost DRAM
// efficiency.
template <int kBoxK, int kStages>
__global__ void __launch_bounds__(32, 1) tma_stream(const __grid_constant__ TmaMap map, int panels, int K, int splits) {
  using namespace gmjit::wgmma_detail;
  extern __shared__ unsigned char stream_smem[];
  __shared__ alignas(8) unsigned long long full[kStages];
  if (threadIdx.x != 0) return;
  const unsigned base = (smem_u32(stream_smem) + 1023u) & ~1023u;
  constexpr unsigned kBoxBytes = 64u * kBoxK * 2u;
  const int panel = static_cast<int>(blockIdx.x) % panels, slice = static_cast<int>(blockIdx.x) / panels;
  const int boxes = K / kBoxK / splits, first = slice * boxes;
  for (int s = 0; s < kStages; ++s) mbar_init(smem_u32(&full[s]), 1);
  fence_barrier_init();
  for (int i = 0; i < boxes + kStages; ++i) {
    if (i >= kStages) mbar_wait(smem_u32(&full[(i - kStages) % kStages]), ((i - kStages) / kStages) & 1);
    if (i < boxes) {
      const int s = i % kStages;
      mbar_arrive_expect_tx(smem_u32(&full[s]), kBoxBytes);
      tma_load_2d(base + s * kBoxBytes, &map, (first + i) * kBoxK, panel * 64, smem_u32(&full[s]));
    }
  }
}

// Every byte of p once, 16-byte loads that skip L1, over every SM; the xor keeps them live.
__global__ void ldg_stream(const uint4* __restrict__ p, size_t n, unsigned* sink) {
  unsigned acc = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint4 v = __ldcs(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9E3779B9u) *sink = acc;
}

static void print_stream(const char* what, int N, int K, double ms, double bytes) {
  if (g_profile) {
    std::printf("stream %-44s %5dx%5d  launched once for the profiler\n", what, N, K);
    return;
  }
  std::printf("stream %-44s %5dx%5d  %8.4f ms %5.2f TB/s\n", what, N, K, ms, bytes / ms / 1e9);
}

template <int kBoxK, int kStages>
void time_tma_stream(const bf* b, int N, int K, int splits, bool swizzle) {
  static_assert(kStages * 64 * kBoxK * 2 + 1024 <= 232448, "stream ring too large");
  const int smem = kStages * 64 * kBoxK * 2 + 1024;
  CK(cudaFuncSetAttribute(tma_stream<kBoxK, kStages>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const TmaMap map = encode_map<bf>(b, uint64_t(K), uint64_t(N), kBoxK, 64,
                                    swizzle ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE);
  const int panels = N / 64;
  const double ms = median_ms([&] {
    tma_stream<kBoxK, kStages><<<panels * splits, 32, smem>>>(map, panels, K, splits);
    CK(cudaGetLastError());
  });
  char what[96];
  std::snprintf(what, sizeof what, "tma box %3dx64 %s %2d in flight (%3d KiB), %3d blocks", kBoxK,
                swizzle ? "sw128" : "plain", kStages, kStages * 64 * kBoxK * 2 / 1024, panels * splits);
  print_stream(what, N, K, ms, 2.0 * N * K);
}

// The weight matrix of a decode shape read every way above (N, K multiples of 256).
void time_streams(int N, int K) {
  const size_t bytes = size_t(N) * K * sizeof(bf);
  bf *b = nullptr, *copy = nullptr;
  unsigned* sink = nullptr;
  CK(cudaMalloc(&b, bytes));
  CK(cudaMalloc(&copy, bytes));
  CK(cudaMalloc(&sink, sizeof(unsigned)));
  fill(b, size_t(N) * K, 12);
  CK(cudaDeviceSynchronize());
  double ms = median_ms([&] { CK(cudaMemcpyAsync(copy, b, bytes, cudaMemcpyDeviceToDevice)); });
  print_stream("cudaMemcpy (read + write counted)", N, K, ms, 2.0 * bytes);
  ms = median_ms([&] {
    ldg_stream<<<g_sms * 4, 512>>>(reinterpret_cast<const uint4*>(b), bytes / 16, sink);
    CK(cudaGetLastError());
  });
  char what[96];
  std::snprintf(what, sizeof what, "ldg 16 B, %d blocks of 512", g_sms * 4);
  print_stream(what, N, K, ms, double(bytes));
  // The 64x64 s12 tile's own B stream (8 KiB boxes, 128-byte swizzle), then more in flight,
  // unswizzled, longer boxes along k, and two blocks a panel.
  time_tma_stream<64, 12>(b, N, K, 1, true);
  time_tma_stream<64, 24>(b, N, K, 1, true);
  time_tma_stream<64, 24>(b, N, K, 1, false);
  time_tma_stream<128, 12>(b, N, K, 1, false);
  time_tma_stream<256, 6>(b, N, K, 1, false);
  time_tma_stream<64, 12>(b, N, K, 2, true);
  time_tma_stream<64, 24>(b, N, K, 2, true);
  time_tma_stream<256, 6>(b, N, K, 2, false);
  CK(cudaFree(b));
  CK(cudaFree(copy));
  CK(cudaFree(sink));
}

int main(int argc, char** argv) {
  g_profile = argc > 1 && std::string(argv[1]) == "--profile";
  const bool time_mode = g_profile || (argc > 1 && std::string(argv[1]) == "--time");
  CK(cudaSetDevice(0));
  CK(cudaFree(nullptr));  // creates the context the driver calls below use
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  g_sms = prop.multiProcessorCount;
  std::printf("device %s, sm_%d%d, %d SMs, %zu bytes opt-in shared memory a block\n", prop.name, prop.major,
              prop.minor, g_sms, size_t(prop.sharedMemPerBlockOptin));
  if (prop.major != 9 || prop.minor != 0) {
    std::printf("gemm_wgmma needs an sm_90 (Hopper) device\n");
    return 1;
  }

  const bool stream_mode = argc > 1 && std::string(argv[1]) == "--stream";
  const bool profile_decode = argc > 1 && std::string(argv[1]) == "--profile-decode";
  g_profile = g_profile || profile_decode;
  if (time_mode || stream_mode || profile_decode) {
    CK(cudaMalloc(&g_flush, kFlushBytes));
    cublasHandle_t handle;
    CB(cublasCreate(&handle));
    if (stream_mode || profile_decode) {
      // --profile-decode: one launch of each for ncu (`-k regex:'gemm|stream'`): cuBLAS and the
      // tuned tiles at two decode shapes, and the streams of their weights.
      const Shape decode[] = {{16, 6144, 4096}, {64, 4096, 4096}};
      for (const Shape& s : decode) {
        if (profile_decode) {
          TimeCtx t;
          prepare_timing<true>(t, handle, s.m, s.n, s.k);
          time_config<64, 64, 12, 1, 1, true>(t);
          time_config<64, 128, 8, 2, 1, true, true>(t);
          release_timing(t);
        }
        time_streams(s.n, s.k);
      }
      CB(cublasDestroy(handle));
      CK(cudaFree(g_flush));
      return g_failures == 0 ? 0 : 1;
    }
    if (g_profile) {
      // One launch each of cuBLAS and the tiles the tuner picks at the two square shapes, for
      // `ncu -k regex:gemm`.
      for (int size : {4096, 8192}) {
        TimeCtx t;
        prepare_timing<true>(t, handle, size, size, size);
        time_config<128, 256, 4, 2, 8, true>(t);
        time_config<128, 256, 4, 2, 8, true, false, 2>(t);
        time_config<64, 256, 4, 2, 8, true, true>(t);
        time_config<128, 128, 5, 2, 8, true, true>(t);
        release_timing(t);
      }
      CB(cublasDestroy(handle));
      return g_failures == 0 ? 0 : 1;
    }
    const Shape shapes[] = {{4096, 4096, 4096}, {8192, 8192, 8192}, {8192, 8192, 2048}};
    for (const Shape& s : shapes) {
      time_shape<true>(handle, s.m, s.n, s.k);
      time_shape<false>(handle, s.m, s.n, s.k);
    }
    const Shape skinny[] = {
        {16, 6144, 4096}, {16, 4096, 4096}, {64, 4096, 4096}, {128, 4096, 4096}, {128, 8192, 8192}, {512, 4096, 4096}};
    for (const Shape& s : skinny) time_skinny_shape(handle, s.m, s.n, s.k);
    // One wave of 96 tiles on 132 SMs with the tuned winners; 128 tiles with bn=192.
    const Shape quantized[] = {{512, 6144, 4096}, {1024, 1536, 1024}};
    for (const Shape& s : quantized) time_quantized_shape(handle, s.m, s.n, s.k);
    CB(cublasDestroy(handle));
    CK(cudaFree(g_flush));
    std::printf("%s\n", g_failures ? "some timed outputs were wrong" : "all timed outputs checked");
    return g_failures == 0 ? 0 : 1;
  }

  const bool split_only = argc > 1 && std::string(argv[1]) == "--split";
  // Tiny and odd shapes cover m in {1, 7, 64, 129, 300}, n in {8, 64, 136, 264}, k in
  // {8, 64, 72, 520}: partial tiles in every dimension, k shorter than one k-tile, k-tile counts
  // that are not multiples of the stage count.
  const std::vector<Shape> small = {{1, 8, 8},      {7, 64, 72},    {64, 136, 520}, {129, 264, 64},
                                    {300, 8, 520},  {300, 264, 72}, {129, 136, 8},  {64, 264, 520},
                                    {300, 136, 520}, {1, 264, 520}, {7, 8, 64}};
  const std::vector<Shape> large = {{1024, 1024, 1024}, {2048, 4096, 1024}};

  // Split-K: slices of 9, 2, 1 and 8 k-tiles (k = 520, 72, 8, 520 at split 3 leaves an empty slice
  // for k = 72 and two for k = 8), cooperative and pingpong, both layouts and dtypes; the
  // workspace must come back zero.
  check<bf, true, 64, 64, 3, 1, 1>(small, true, 2);
  check<bf, true, 128, 128, 4, 2, 8>(small, true, 3);
  check<bf, false, 128, 256, 3, 2, 1>(small, true, 2);
  check<hf, true, 64, 128, 4, 1, 8>(small, true, 4);
  check<hf, false, 256, 64, 2, 2, 8>(small, true, 3);
  check<bf, true, 128, 128, 4, 2, 8, true>(small, true, 3);
  check<hf, false, 64, 256, 3, 2, 1, true>(small, true, 2);
  check<bf, true, 64, 128, 6, 1, 1>(large, false, 4);
  check<bf, true, 128, 128, 5, 2, 8, true>(large, false, 2);
  // Clusters of two sharing B (multicast): odd tile-row counts (a block past M), both layouts and
  // dtypes, cooperative and pingpong, split-K, grids of one cluster walking several pairs.
  check<bf, true, 128, 128, 4, 2, 8, false, 2>(small, true);
  check<bf, false, 128, 256, 3, 2, 1, false, 2>(small, true);
  check<hf, true, 64, 256, 4, 1, 8, false, 2>(small, true);
  check<hf, false, 256, 128, 2, 2, 8, false, 2>(small, true);
  check<bf, true, 128, 128, 5, 2, 8, true, 2>(small, true);
  check<hf, false, 64, 256, 3, 2, 1, true, 2>(small, true);
  check<bf, true, 64, 128, 6, 1, 1, false, 2>(small, true, 3);
  check<bf, true, 128, 256, 4, 2, 8, false, 2>(large, false);
  check<bf, false, 128, 128, 5, 2, 8, true, 2>(large, false);
  check<hf, true, 64, 128, 6, 1, 1, false, 2>(large, false, 2);
  if (split_only) {
    std::printf("%d of %d cases failed\n", g_failures, g_cases);
    return g_failures == 0 ? 0 : 1;
  }

  // bf16, B^T (the weight layout): every valid (bm, bn, consumers) at stages 2 and 4, group_m
  // alternating.
  check<bf, true, 64, 64, 2, 1, 1>(small, true);
  check<bf, true, 64, 64, 4, 1, 8>(small, true);
  check<bf, true, 64, 128, 2, 1, 8>(small, true);
  check<bf, true, 64, 128, 4, 1, 1>(small, true);
  check<bf, true, 64, 256, 2, 1, 1>(small, true);
  check<bf, true, 64, 256, 4, 1, 8>(small, true);
  check<bf, true, 128, 64, 2, 1, 8>(small, true);
  check<bf, true, 128, 64, 4, 1, 1>(small, true);
  check<bf, true, 128, 128, 2, 1, 1>(small, true);
  check<bf, true, 128, 128, 4, 1, 8>(small, true);
  check<bf, true, 256, 64, 2, 1, 8>(small, true);
  check<bf, true, 256, 64, 4, 1, 1>(small, true);
  check<bf, true, 128, 64, 2, 2, 1>(small, true);
  check<bf, true, 128, 64, 4, 2, 8>(small, true);
  check<bf, true, 128, 128, 2, 2, 8>(small, true);
  check<bf, true, 128, 128, 4, 2, 1>(small, true);
  check<bf, true, 128, 256, 2, 2, 1>(small, true);
  check<bf, true, 128, 256, 4, 2, 8>(small, true);
  check<bf, true, 256, 64, 2, 2, 8>(small, true);
  check<bf, true, 256, 64, 4, 2, 1>(small, true);
  check<bf, true, 256, 128, 2, 2, 1>(small, true);
  check<bf, true, 256, 128, 4, 2, 8>(small, true);

  // The other dtype / layout pairs: every (bm, bn, consumers) once, stages and group_m rotating
  // (3 stages too: a ring whose length is not a power of two).
  check<bf, false, 64, 64, 4, 1, 8>(small, true);
  check<bf, false, 64, 128, 2, 1, 1>(small, true);
  check<bf, false, 64, 256, 3, 1, 8>(small, true);
  check<bf, false, 128, 64, 4, 1, 1>(small, true);
  check<bf, false, 128, 128, 2, 1, 8>(small, true);
  check<bf, false, 256, 64, 3, 1, 1>(small, true);
  check<bf, false, 128, 64, 2, 2, 8>(small, true);
  check<bf, false, 128, 128, 3, 2, 1>(small, true);
  check<bf, false, 128, 256, 4, 2, 8>(small, true);
  check<bf, false, 256, 64, 4, 2, 1>(small, true);
  check<bf, false, 256, 128, 2, 2, 8>(small, true);

  check<hf, true, 64, 64, 3, 1, 1>(small, true);
  check<hf, true, 64, 128, 4, 1, 8>(small, true);
  check<hf, true, 64, 256, 2, 1, 8>(small, true);
  check<hf, true, 128, 64, 2, 1, 1>(small, true);
  check<hf, true, 128, 128, 4, 1, 1>(small, true);
  check<hf, true, 256, 64, 2, 1, 8>(small, true);
  check<hf, true, 128, 64, 4, 2, 1>(small, true);
  check<hf, true, 128, 128, 2, 2, 8>(small, true);
  check<hf, true, 128, 256, 3, 2, 1>(small, true);
  check<hf, true, 256, 64, 3, 2, 8>(small, true);
  check<hf, true, 256, 128, 4, 2, 1>(small, true);

  check<hf, false, 64, 64, 2, 1, 8>(small, true);
  check<hf, false, 64, 128, 3, 1, 1>(small, true);
  check<hf, false, 64, 256, 4, 1, 1>(small, true);
  check<hf, false, 128, 64, 3, 1, 8>(small, true);
  check<hf, false, 128, 128, 4, 1, 8>(small, true);
  check<hf, false, 256, 64, 4, 1, 1>(small, true);
  check<hf, false, 128, 64, 2, 2, 1>(small, true);
  check<hf, false, 128, 128, 4, 2, 8>(small, true);
  check<hf, false, 128, 256, 2, 2, 8>(small, true);
  check<hf, false, 256, 64, 2, 2, 1>(small, true);
  check<hf, false, 256, 128, 3, 2, 8>(small, true);

  // Pingpong: the consumers take whole tiles in turn, every valid tile once, the layouts and
  // dtypes rotating.
  check<bf, true, 128, 128, 4, 2, 8, true>(small, true);
  check<bf, false, 128, 64, 3, 2, 1, true>(small, true);
  check<hf, true, 64, 256, 2, 2, 8, true>(small, true);
  check<hf, false, 64, 128, 5, 2, 8, true>(small, true);
  check<bf, true, 256, 64, 4, 2, 1, true>(small, true);
  check<bf, false, 64, 64, 3, 2, 8, true>(small, true);

  // bn=192 (m64n192k16, the Hopper family's alone): every tile the rules accept, both layouts
  // and dtypes, with and without a cluster (three 64-column panels of N-major B split 2 + 1), split-K.
  check<bf, true, 64, 192, 4, 1, 8>(small, true);
  check<bf, false, 64, 192, 6, 1, 1>(small, true);
  check<hf, true, 128, 192, 5, 2, 8>(small, true);
  check<hf, false, 128, 192, 2, 2, 1>(small, true);
  check<bf, true, 64, 192, 3, 2, 8, true>(small, true);
  check<hf, false, 64, 192, 4, 2, 1, true>(small, true);
  check<bf, true, 128, 192, 4, 2, 8, false, 2>(small, true);
  check<bf, false, 128, 192, 4, 2, 8, false, 2>(small, true);
  check<hf, true, 64, 192, 6, 1, 1, false, 2>(small, true);
  check<hf, false, 64, 192, 3, 2, 8, true, 2>(small, true);
  check<bf, true, 128, 192, 4, 2, 8>(small, true, 3);
  check<bf, true, 128, 192, 4, 2, 8>(large, false);
  check<hf, false, 64, 192, 6, 1, 8>(large, false);

  // The TMA store epilogue (tma-st): cooperative, pingpong and cluster blocks, both layouts and
  // dtypes, every bn; the small shapes' tails are TMA's clipping, a block's several tiles alternate
  // its two store buffers across tiles.
  check<bf, true, 128, 256, 4, 2, 8, false, 1, true>(small, true);
  check<bf, false, 128, 128, 4, 1, 1, false, 1, true>(small, true);
  check<hf, true, 64, 64, 3, 1, 8, false, 1, true>(small, true);
  check<hf, false, 256, 128, 3, 2, 8, false, 1, true>(small, true);
  check<bf, true, 128, 128, 4, 2, 8, true, 1, true>(small, true);
  check<hf, false, 64, 192, 4, 2, 1, true, 1, true>(small, true);
  check<bf, true, 128, 256, 3, 2, 8, false, 2, true>(small, true);
  check<hf, false, 64, 192, 6, 1, 1, false, 2, true>(small, true);
  check<bf, false, 128, 192, 4, 2, 8, false, 1, true>(small, true);
  check<bf, true, 128, 256, 4, 2, 8, false, 1, true>(large, false);
  check<hf, false, 128, 128, 5, 2, 8, true, 1, true>(large, false);
  check<bf, true, 64, 64, 8, 1, 1, false, 1, true>(large, false);

  // Rings of 10 and 12 stages (64x64 tiles only fit them): k-tile counts below, at and past the
  // ring, split-K, pingpong, the TMA store; a 12-stage ring wraps many times at k = 4096.
  check<bf, true, 64, 64, 12, 1, 1>(small, true, 2);
  check<hf, false, 64, 64, 10, 1, 8>(small, true);
  check<bf, true, 64, 64, 12, 2, 8, true>(small, true);
  check<hf, true, 64, 64, 10, 2, 1, true, 1, true>(small, true);
  check<bf, false, 64, 64, 12, 1, 1, false, 1, true>(small, true);
  check<bf, true, 64, 64, 12, 1, 1>(large, false, 2);
  check<bf, true, 64, 64, 12, 2, 8, true, 1, true>(large, false);

  // Large shapes, sampled: many tiles a block on the persistent grid.
  check<bf, true, 128, 128, 4, 2, 8, true>(large, false);
  check<hf, false, 128, 128, 5, 2, 8, true>(large, false);
  check<bf, true, 128, 256, 4, 2, 8>(large, false);
  check<bf, false, 128, 256, 4, 2, 8>(large, false);
  check<bf, true, 256, 128, 4, 2, 8>(large, false);
  check<bf, true, 64, 64, 2, 1, 1>(large, false);
  check<hf, false, 128, 128, 4, 1, 8>(large, false);
  check<hf, true, 256, 128, 4, 2, 1>(large, false);

  std::printf("%d of %d cases failed\n", g_failures, g_cases);
  return g_failures == 0 ? 0 : 1;
}
