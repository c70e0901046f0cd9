// Compile latency per template instantiation (cold NVRTC compile vs in-memory hit) and module
// load latency (cuModuleLoadData + cuModuleGetFunction), as a table. Not a test.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>

#include "codegen/compiler.hpp"
#include "gmjit/device.hpp"
#include "core/device.hpp"
#include "core/module.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double median_ms(int runs, const std::function<void()>& body) {
  std::vector<double> samples;
  for (int i = 0; i < runs; ++i) {
    const auto start = Clock::now();
    body();
    samples.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  }
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

struct Instantiation {
  std::string kernel;
  std::string dtype;
  gmjit::Shape shape;
  gmjit::Config config;
};

}  // namespace

int main() {
  using namespace gmjit;
  const auto status = driver_status();
  const std::string arch = status.available ? detail::query_device(0).arch : "sm_90a";
  std::optional<detail::Context> context;
  if (status.available) context.emplace(0);

  const std::vector<Instantiation> cases = {
      {"vector_add", "fp32", {{"n", 1 << 24}}, {{"block", 256}, {"items", 4}, {"vec_bytes", 16}}},
      {"vector_add", "fp16", {{"n", 1 << 24}}, {{"block", 256}, {"items", 4}, {"vec_bytes", 16}}},
      {"sgemm", "fp32", {{"m", 4096}, {"n", 4096}, {"k", 4096}},
       {{"bm", 64}, {"bn", 64}, {"bk", 8}, {"tm", 4}, {"tn", 4}, {"vec", 0}, {"wm", 0}}},
      {"sgemm", "fp32", {{"m", 4096}, {"n", 4096}, {"k", 4096}},
       {{"bm", 128}, {"bn", 128}, {"bk", 16}, {"tm", 8}, {"tn", 8}, {"vec", 1}, {"wm", 0}}},
  };
  constexpr int kColdRuns = 7;
  constexpr int kHitRuns = 1000;
  constexpr int kLoadRuns = 100;
  std::printf("compile and load latency, %s, median of %d cold compiles / %d hits / %d loads\n", arch.c_str(),
              kColdRuns, kHitRuns, kLoadRuns);
  std::printf("%-64s %12s %12s %12s %10s\n", "instantiation", "cold ms", "hit us", "load ms", "cubin KiB");
  for (const auto& c : cases) {
    const auto& kernel = templates::find_kernel(c.kernel);
    const auto source = codegen::specialize(kernel, c.shape, c.dtype, templates::resolve_config(kernel, c.shape, c.dtype, c.config));
    std::shared_ptr<const codegen::CompiledModule> module;
    const double cold = median_ms(kColdRuns, [&] {
      codegen::Compiler fresh;
      module = fresh.compile(source, arch).module;
    });
    codegen::Compiler warm;
    warm.compile(source, arch);
    const double hit = median_ms(kHitRuns, [&] { warm.compile(source, arch); });
    std::string load = "n/a";
    if (status.available) {
      load = fmt::format("{:.3f}", median_ms(kLoadRuns, [&] {
                           detail::Module loaded(module->cubin);
                           loaded.kernel(module->lowered_name);
                         }));
    }
    std::printf("%-64s %12.1f %12.1f %12s %10.1f\n", source.name_expression.c_str(), cold, hit * 1000, load.c_str(),
                module->cubin.size() / 1024.0);
  }
  if (!status.available) std::printf("module load not measured: %s\n", status.reason.c_str());
  return 0;
}
