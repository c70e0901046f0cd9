// sgemm_warp's index arithmetic, tails and barriers checked on the host, without a GPU: the
// template compiles as C++ with every CUDA thread of a block a std::thread, __syncthreads a
// barrier, dynamic shared memory one array (blocks run one after another, filled with NaN first),
// and cp.async copies deferred until the thread waits for them (stricter than the hardware, which
// may land them earlier). A missing wait or barrier, a wrong tail guard or fragment index gives
// NaN or wrong sums here. What it cannot see: bank conflicts, registers, real latency.
#include <gtest/gtest.h>

#include <cmath>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

namespace gmjit_host {

struct float4 {
  float x, y, z, w;
};
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
struct Dim3 {
  unsigned x = 0, y = 0, z = 0;
};
thread_local Dim3 threadIdx, blockIdx;

class Barrier {
 public:
  explicit Barrier(int count) : count_(count) {}
  void wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    const int generation = generation_;
    if (++arrived_ == count_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return generation != generation_; });
    }
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  int count_;
  int arrived_ = 0;
  int generation_ = 0;
};
Barrier* block_barrier = nullptr;
inline void __syncthreads() { block_barrier->wait(); }
template <class T>
T __ldg(const T* p) {
  return *p;
}

}  // namespace gmjit_host

using namespace gmjit_host;

namespace gmjit {
constexpr std::size_t kHostSmemFloats = 32 * 1024;
alignas(16) float sgemm_warp_smem[kHostSmemFloats];
namespace sgemm_detail {
struct PendingCopy {
  unsigned dst;
  const float* src;
  int bytes;
  bool ok;
};
inline thread_local std::vector<PendingCopy> pending;
inline void copy_async_4(unsigned dst, const float* src, bool ok) { pending.push_back({dst, src, 4, ok}); }
inline void copy_async_16(unsigned dst, const float* src, bool ok) { pending.push_back({dst, src, 16, ok}); }
inline void copy_async_commit() {}
inline void copy_async_wait_all() {
  for (const auto& c : pending) {
    char* d = reinterpret_cast<char*>(sgemm_warp_smem) + c.dst;
    if (c.ok) {
      std::memcpy(d, c.src, static_cast<std::size_t>(c.bytes));
    } else {
      std::memset(d, 0, static_cast<std::size_t>(c.bytes));
    }
  }
  pending.clear();
}
}  // namespace sgemm_detail
}  // namespace gmjit

#define GMJIT_SGEMM_HOST_EMULATION 1
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__
#define __align__(n) __attribute__((aligned(n)))
#define __cvta_generic_to_shared(p) \
  (static_cast<std::size_t>(reinterpret_cast<const char*>(p) - reinterpret_cast<const char*>(gmjit::sgemm_warp_smem)))
#include "templates/gmjit/sgemm.cuh"

namespace gmjit {
namespace {

template <int kBM, int kBN, int kBK, int kWM, int kTN, bool kEven>
void expect_product(int m, int n, int k) {
  SCOPED_TRACE(::testing::Message() << "sgemm_warp<" << kBM << ", " << kBN << ", " << kBK << ", " << kWM << ", 8, "
                                    << kTN << ", " << kEven << "> m=" << m << " n=" << n << " k=" << k);
  ASSERT_LE(static_cast<std::size_t>(sgemm_detail::warp_smem_bytes(kBM, kBN, kBK)), sizeof(sgemm_warp_smem));
  std::mt19937 rng(static_cast<unsigned>(m * 131 + n * 7 + k));
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  std::vector<float> a(static_cast<std::size_t>(m) * k), b(static_cast<std::size_t>(k) * n);
  std::vector<float> c(static_cast<std::size_t>(m) * n, 12345.f);
  for (auto& x : a) x = uniform(rng);
  for (auto& x : b) x = uniform(rng);
  const int threads = (kBM / 8) * (kBN / kTN);
  for (int by = 0; by < (m + kBM - 1) / kBM; ++by) {
    for (int bx = 0; bx < (n + kBN - 1) / kBN; ++bx) {
      std::memset(sgemm_warp_smem, 0xff, sizeof(sgemm_warp_smem));
      Barrier barrier(threads);
      block_barrier = &barrier;
      std::vector<std::thread> workers;
      for (int t = 0; t < threads; ++t) {
        workers.emplace_back([&, t] {
          threadIdx.x = static_cast<unsigned>(t);
          blockIdx.x = static_cast<unsigned>(bx);
          blockIdx.y = static_cast<unsigned>(by);
          sgemm_warp<kBM, kBN, kBK, kWM, 8, kTN, kEven>(a.data(), b.data(), c.data(), m, n, k);
        });
      }
      for (auto& w : workers) w.join();
    }
  }
  int wrong = 0;
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double ref = 0;
      for (int p = 0; p < k; ++p) ref += static_cast<double>(a[i * k + p]) * b[p * n + j];
      const double got = c[static_cast<std::size_t>(i) * n + j];
      if (!(std::fabs(got - ref) <= 1e-5 * k + 1e-5) && wrong++ < 5) {
        ADD_FAILURE() << "C[" << i << "][" << j << "] = " << got << ", expected " << ref;
      }
    }
  }
  EXPECT_EQ(wrong, 0);
}

TEST(SgemmWarpHost, EvenTiles) {
  expect_product<128, 128, 8, 32, 8, true>(256, 128, 32);
  expect_product<128, 256, 16, 64, 16, true>(128, 256, 48);
  expect_product<64, 128, 16, 64, 8, true>(64, 256, 32);
}

TEST(SgemmWarpHost, TailsInEveryDimension) {
  expect_product<128, 128, 8, 64, 8, false>(130, 260, 44);
  expect_product<128, 64, 16, 32, 8, false>(3, 68, 100);
  expect_product<128, 256, 8, 32, 16, false>(129, 260, 12);
  expect_product<256, 128, 32, 64, 16, false>(257, 132, 72);
  expect_product<128, 128, 16, 64, 16, false>(127, 124, 120);
  // k below bk; a single row, column group and k-vector.
  expect_product<256, 128, 16, 32, 16, false>(1, 4, 4);
}

}  // namespace
}  // namespace gmjit
