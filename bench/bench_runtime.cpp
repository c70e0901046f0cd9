// What Runtime::launch costs on a hit (the problem's kernel already loaded) next to a raw
// cuLaunchKernel of the same cubin with prebuilt arguments: a tiny vector_add, launched without
// synchronizing, per-call medians over batches, as a table. Not a test.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <vector>

#include "cache/store.hpp"
#include "codegen/compiler.hpp"
#include "gmjit/runtime.hpp"
#include "core/device.hpp"
#include "core/module.hpp"
#include "templates/registry.hpp"
#include "cache/binaries.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using namespace gmjit;

constexpr int kBatch = 100;    // launches per timed sample: small enough never to fill the launch queue
constexpr int kSamples = 300;

// Median over samples of the per-call time of a batch; the stream drains between samples so
// every batch starts on an empty queue.
double median_ns_per_call(const detail::Stream& stream, const std::function<void()>& launch) {
  std::vector<double> samples;
  for (int s = 0; s < kSamples; ++s) {
    stream.synchronize();
    const auto start = Clock::now();
    for (int i = 0; i < kBatch; ++i) launch();
    samples.push_back(std::chrono::duration<double, std::nano>(Clock::now() - start).count() / kBatch);
  }
  stream.synchronize();
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

}  // namespace

int main() {
  const auto status = driver_status();
  if (!status.available) {
    std::printf("runtime launch overhead not measured: %s\n", status.reason.c_str());
    return 0;
  }
  char dir_template[] = "/tmp/gmjit-bench-runtime-XXXXXX";
  const std::filesystem::path dir = mkdtemp(dir_template);
  const std::string db = (dir / "gmjit.db").string();

  detail::Context context(0);
  const DeviceInfo device = detail::query_device(0);
  detail::Stream stream;
  const std::int64_t n = 1024;
  const Shape shape{{"n", n}};
  detail::DeviceBuffer a(n * sizeof(float)), b(n * sizeof(float)), c(n * sizeof(float));
  for (auto* buffer : {&a, &b, &c}) buffer->fill_bytes(0, stream.get());
  void* const user_stream = stream.get();

  RuntimeOptions options;
  options.db_path = db;
  options.miss_policy = MissPolicy::default_config;
  Runtime runtime(options);
  const auto cold_start = Clock::now();
  runtime.launch("vector_add", shape, {a.get(), b.get(), c.get()}, user_stream);
  const double cold_us = std::chrono::duration<double, std::micro>(Clock::now() - cold_start).count();
  stream.synchronize();
  const Resolution resolution = runtime.resolve("vector_add", shape);
  double warm_us = 0;
  {
    Runtime fresh(options);
    const auto warm_start = Clock::now();
    fresh.launch("vector_add", shape, {a.get(), b.get(), c.get()}, user_stream);
    warm_us = std::chrono::duration<double, std::micro>(Clock::now() - warm_start).count();
    stream.synchronize();
  }

  // The same cubin, loaded by hand, launched through the driver with nothing in between.
  const auto& kernel = templates::find_kernel("vector_add");
  cache::Store store(db);
  const auto source = codegen::specialize(kernel, shape, resolution.dtype, resolution.config);
  auto loaded = cache::load_through_cache(store, source, device.arch);
  const LaunchGeometry geometry = kernel.geometry(resolution.config, shape, templates::dtype_info(resolution.dtype));
  detail::KernelArgs args;
  args.add(a.get()).add(b.get()).add(c.get());
  kernel.add_scalars(args, shape);
  void** raw_args = args.pointers();
  const auto& api = detail::driver();
  const CUfunction function = loaded.kernel->get();
  const CUstream raw_stream = stream.get();

  const double raw = median_ns_per_call(stream, [&] {
    api.cuLaunchKernel(function, geometry.grid[0], geometry.grid[1], geometry.grid[2], geometry.block[0],
                       geometry.block[1], geometry.block[2], geometry.dynamic_shared_bytes, raw_stream, raw_args,
                       nullptr);
  });
  const double checked = median_ns_per_call(stream, [&] {
    detail::KernelArgs per_call;
    per_call.add(a.get()).add(b.get()).add(c.get());
    kernel.add_scalars(per_call, shape);
    detail::launch(*loaded.kernel, geometry, per_call, raw_stream);
  });
  const double hit = median_ns_per_call(stream, [&] {
    runtime.launch("vector_add", shape, {a.get(), b.get(), c.get()}, user_stream);
  });
  const double hit_shape = median_ns_per_call(stream, [&] {
    runtime.launch("vector_add", {{"n", n}}, {a.get(), b.get(), c.get()}, user_stream);
  });
  const RuntimeStats stats = runtime.stats();

  std::printf("launch cost per call, vector_add fp32 n=%lld (%s), %s, median of %d batches of %d launches, no sync\n",
              static_cast<long long>(n), format_assignments(resolution.config).c_str(), device.name.c_str(), kSamples,
              kBatch);
  std::printf("%-62s %10s %10s\n", "path", "ns/call", "vs raw");
  auto row = [&](const char* what, double ns) { std::printf("%-62s %10.0f %9.2fx\n", what, ns, ns / raw); };
  row("raw cuLaunchKernel, arguments prebuilt", raw);
  row("detail::launch, arguments built per call (what the tuner does)", checked);
  row("Runtime::launch hit, Shape built once", hit);
  row("Runtime::launch hit, Shape {{\"n\", n}} built per call", hit_shape);
  std::printf("%-62s %10.1f us\n", "first Runtime::launch, empty cache (resolve, compile, load)", cold_us);
  std::printf("%-62s %10.1f us\n", "first launch of a new Runtime, cubin cached (open, fetch, load)", warm_us);
  std::printf("runtime stats: %llu launches, %llu memory hits, %llu db lookups, %llu loads\n",
              static_cast<unsigned long long>(stats.launches), static_cast<unsigned long long>(stats.memory_hits),
              static_cast<unsigned long long>(stats.db_lookups), static_cast<unsigned long long>(stats.loads));
  std::filesystem::remove_all(dir);
  return 0;
}
