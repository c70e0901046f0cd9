// Compile latency per template instantiation (cold NVRTC compile vs in-memory hit) and module
// load latency (cuModuleLoadData + cuModuleGetFunction), as a table; then how distinct compiles
// scale over threads, as the tuner's compile pool runs them, and over processes. Not a test.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <set>
#include <thread>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include "codegen/compiler.hpp"
#include "gmjit/device.hpp"
#include "core/device.hpp"
#include "core/module.hpp"
#include "templates/registry.hpp"

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

// ptxas's own "Compile time = X ms" from the -Xptxas=-v report in the NVRTC log; 0 when absent.
// The rest of a compile is NVRTC's front end and NVVM: whichever share grows with the threads
// is where they wait on each other.
double ptxas_ms(const std::string& log) {
  const std::string mark = "Compile time = ";
  const auto at = log.rfind(mark);
  return at == std::string::npos ? 0 : std::atof(log.c_str() + at + mark.size());
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

  // A tuning's first asks at 4096^3 compile 16 Hopper gemm kernels at once, one per pool thread.
  // On the H100 machines 16 threads ran them only 3.1x faster than one (twenty-fourth session):
  // the same compiles split over processes tell whether the machine's cores or something shared
  // inside one process (NVRTC, the allocator) holds them back.
  const auto& gemm = templates::find_kernel("gemm");
  const Shape square{{"m", 4096}, {"n", 4096}, {"k", 4096}, {"trans_b", 1}};
  std::vector<codegen::GeneratedSource> distinct;
  std::set<std::string> names;
  for (const auto& config : templates::valid_configs(gemm, square)) {
    if (config.at("wgmma") != 1 || distinct.size() == 16) continue;
    auto source = codegen::specialize(gemm, square, "bf16", config);
    if (names.insert(source.name_expression).second) distinct.push_back(std::move(source));
  }
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  std::printf("\n%zu distinct Hopper gemm compiles (bf16, 4096^3), %u hardware threads\n", distinct.size(), cores);
  std::printf("%8s %10s %10s %14s %12s %16s %10s\n", "threads", "wall s", "speedup", "mean compile s", "of it ptxas",
              "processes wall s", "speedup");
  double serial_s = 0;
  for (unsigned threads : {1u, 2u, 4u, 8u, 16u}) {
    if (threads > cores && threads != 1) break;
    codegen::Compiler fresh;
    std::vector<double> each(distinct.size());
    std::vector<double> each_ptxas(distinct.size());
    const auto start = Clock::now();
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        for (std::size_t i = t; i < distinct.size(); i += threads) {
          const auto module = fresh.compile(distinct[i], arch).module;
          each[i] = module->compile_ms;
          each_ptxas[i] = ptxas_ms(module->log);
        }
      });
    }
    for (auto& thread : pool) thread.join();
    const double wall_s = std::chrono::duration<double>(Clock::now() - start).count();
    if (threads == 1) serial_s = wall_s;
    double sum_ms = 0;
    double sum_ptxas_ms = 0;
    for (std::size_t i = 0; i < each.size(); ++i) {
      sum_ms += each[i];
      sum_ptxas_ms += each_ptxas[i];
    }
    // The same shares in forked children, each with a compiler of its own. The threads above are
    // joined, so no child inherits a lock held by one of them.
    const auto forked = Clock::now();
    std::vector<pid_t> children;
    for (unsigned t = 0; t < threads; ++t) {
      const pid_t pid = fork();
      if (pid == 0) {
        codegen::Compiler own;
        for (std::size_t i = t; i < distinct.size(); i += threads) own.compile(distinct[i], arch);
        std::_Exit(0);
      }
      if (pid < 0) {
        std::perror("fork");
        return 1;
      }
      children.push_back(pid);
    }
    bool children_ok = true;
    for (const pid_t pid : children) {
      int status = 0;
      children_ok &= waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
    const double processes_s = std::chrono::duration<double>(Clock::now() - forked).count();
    if (!children_ok) {
      std::fprintf(stderr, "a compiling child process failed\n");
      return 1;
    }
    std::printf("%8u %10.2f %10.2f %14.3f %12.3f %16.2f %10.2f\n", threads, wall_s, serial_s / wall_s,
                sum_ms / 1000 / each.size(), sum_ptxas_ms / 1000 / each.size(), processes_s, serial_s / processes_s);
  }
  return 0;
}
