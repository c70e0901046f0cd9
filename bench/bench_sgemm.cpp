// sgemm at 4096^3: tunes every valid configuration, then times the best few and cuBLAS (fp32,
// no TF32) interleaved with the same method: L2 flushed before every launch, CUDA events,
// median. Prints TFLOP/s and the ratio to cuBLAS. Not a test.
#include <cublas_v2.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>

#include "codegen/compiler.hpp"
#include "gmjit/tune.hpp"
#include "core/device.hpp"
#include "core/module.hpp"

namespace {

#define BENCH_CUBLAS(expr)                                                     \
  do {                                                                         \
    const cublasStatus_t s_ = (expr);                                          \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                         \
      std::fprintf(stderr, "%s failed: %s\n", #expr, cublasGetStatusString(s_)); \
      std::exit(1);                                                            \
    }                                                                          \
  } while (0)

using namespace gmjit;

double median_ms(detail::DeviceBuffer& flush, CUstream stream, int runs, const std::function<void()>& launch) {
  detail::Event start, stop;
  launch();
  std::vector<double> samples;
  for (int i = 0; i < runs; ++i) {
    flush.fill_bytes(static_cast<unsigned char>(i), stream);
    start.record(stream);
    launch();
    stop.record(stream);
    stop.synchronize();
    samples.push_back(stop.elapsed_ms_since(start));
  }
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int size = argc > 1 ? std::atoi(argv[1]) : 4096;
  const auto status = driver_status();
  if (!status.available) {
    std::fprintf(stderr, "bench_sgemm: %s\n", status.reason.c_str());
    return 1;
  }
  const Shape shape{{"m", size}, {"n", size}, {"k", size}};
  const double flops = 2.0 * size * size * static_cast<double>(size);
  TuneOptions options;
  options.max_seconds_per_candidate = 0.5;
  const TuneReport report = tune(Problem{"sgemm", "fp32", shape, "bench"}, options);
  std::vector<std::size_t> ranked;
  for (std::size_t i = 0; i < report.trials.size(); ++i) {
    if (report.trials[i].status == TrialStatus::ok) ranked.push_back(i);
  }
  std::sort(ranked.begin(), ranked.end(),
            [&](auto a, auto b) { return report.trials[a].median_ms < report.trials[b].median_ms; });
  std::printf("tuned %zu candidates (%zu verified) in %.1f s on %s\n", report.trials.size(), ranked.size(),
              report.wall_seconds, report.device_name.c_str());
  if (ranked.empty()) return 1;

  detail::Context context(0);
  const DeviceInfo device = detail::query_device(0);
  detail::Stream stream;
  detail::DeviceBuffer flush(static_cast<std::size_t>(device.l2_bytes) * 2);
  const std::size_t bytes = static_cast<std::size_t>(size) * size * sizeof(float);
  detail::DeviceBuffer a(bytes), b(bytes), c(bytes), c_ref(bytes);
  std::vector<float> host(static_cast<std::size_t>(size) * size);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  for (auto& x : host) x = uniform(rng);
  a.upload(host.data(), bytes);
  for (auto& x : host) x = uniform(rng);
  b.upload(host.data(), bytes);

  cublasHandle_t handle = nullptr;
  BENCH_CUBLAS(cublasCreate(&handle));
  BENCH_CUBLAS(cublasSetStream(handle, stream.get()));
  BENCH_CUBLAS(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH));  // fp32 FMA: TF32 only with CUBLAS_TF32_TENSOR_OP_MATH
  const float alpha = 1.f, beta = 0.f;
  // Row-major C = A B is column-major C^T = B^T A^T.
  auto cublas = [&] {
    BENCH_CUBLAS(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, size, size, size, &alpha,
                             reinterpret_cast<const float*>(b.get()), size, reinterpret_cast<const float*>(a.get()),
                             size, &beta, reinterpret_cast<float*>(c_ref.get()), size));
  };

  const auto& kernel = templates::find_kernel("sgemm");
  constexpr int kRuns = 30;
  struct Row {
    std::string name;
    double ms;
  };
  std::vector<Row> rows;
  const double cublas_before = median_ms(flush, stream.get(), kRuns, cublas);
  for (std::size_t r = 0; r < std::min<std::size_t>(3, ranked.size()); ++r) {
    const auto& config = report.trials[ranked[r]].config;
    const auto compiled =
        codegen::shared_compiler().compile(codegen::specialize(kernel, shape, "fp32", config), device.arch).module;
    detail::Module module(compiled->cubin);
    detail::Kernel loaded = module.kernel(compiled->lowered_name);
    const LaunchGeometry geometry = kernel.geometry(config, shape, templates::dtype_info("fp32"));
    detail::KernelArgs args;
    args.add(a.get()).add(b.get()).add(c.get()).add(size).add(size).add(size);
    const double ms = median_ms(flush, stream.get(), kRuns, [&] { detail::launch(loaded, geometry, args, stream.get()); });
    rows.push_back({fmt::format("gmjit sgemm {} ({} regs)", format_assignments(config), compiled->resources.registers), ms});
    if (r == 0) {
      // Our winner and cuBLAS must agree before their speeds mean anything.
      stream.synchronize();
      std::vector<float> ours(host.size()), theirs(host.size());
      c.download(ours.data(), bytes);
      cublas();
      stream.synchronize();
      c_ref.download(theirs.data(), bytes);
      double diff = 0, norm = 0;
      for (std::size_t i = 0; i < ours.size(); ++i) {
        diff += (ours[i] - theirs[i]) * double(ours[i] - theirs[i]);
        norm += double(theirs[i]) * theirs[i];
      }
      std::printf("winner vs cuBLAS relative L2 difference: %.2e\n", std::sqrt(diff / norm));
    }
  }
  const double cublas_after = median_ms(flush, stream.get(), kRuns, cublas);
  const double cublas_ms = std::min(cublas_before, cublas_after);
  std::printf("\nsgemm fp32 %dx%dx%d, median of %d runs, L2 flushed\n", size, size, size, kRuns);
  std::printf("%-80s %10s %10s %10s\n", "implementation", "ms", "TFLOP/s", "vs cuBLAS");
  std::printf("%-80s %10.4f %10.2f %10.2f\n", "cuBLAS cublasSgemm (fp32, no TF32, best of before/after)", cublas_ms,
              flops / cublas_ms / 1e9, 1.0);
  for (const auto& row : rows) {
    std::printf("%-80s %10.4f %10.2f %10.2f\n", row.name.c_str(), row.ms, flops / row.ms / 1e9, cublas_ms / row.ms);
  }
  cublasDestroy(handle);
  return 0;
}
