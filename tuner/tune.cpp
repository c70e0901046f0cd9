#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "codegen/compiler.hpp"
#include "gmjit/tune.hpp"
#include "lib/core/log.hpp"
#include "tuner/harness.hpp"

namespace gmjit {

const char* to_string(TrialStatus status) {
  switch (status) {
    case TrialStatus::ok: return "ok";
    case TrialStatus::compile_failed: return "compile_failed";
    case TrialStatus::invalid: return "invalid";
    case TrialStatus::launch_failed: return "launch_failed";
    case TrialStatus::crashed: return "crashed";
    case TrialStatus::timeout: return "timeout";
    case TrialStatus::wrong_result: return "wrong_result";
  }
  return "unknown";
}

namespace {

using CompiledPtr = std::shared_ptr<const codegen::CompiledModule>;

// Compiles candidates on every core, in the order they will be benchmarked, so the benchmark
// loop (one candidate at a time on the GPU) overlaps the compiles still running.
class CompilePool {
 public:
  CompilePool(std::vector<codegen::GeneratedSource> sources, std::string arch)
      : sources_(std::move(sources)), arch_(std::move(arch)), promises_(sources_.size()) {
    for (auto& promise : promises_) futures_.push_back(promise.get_future());
    const unsigned threads = std::max(1u, std::min<unsigned>(std::thread::hardware_concurrency(),
                                                             static_cast<unsigned>(sources_.size())));
    for (unsigned t = 0; t < threads; ++t) workers_.emplace_back([this] { work(); });
  }
  ~CompilePool() {
    stop_ = true;
    for (auto& worker : workers_) worker.join();
  }
  CompilePool(const CompilePool&) = delete;
  CompilePool& operator=(const CompilePool&) = delete;

  // Rethrows the compile's Error.
  CompiledPtr get(std::size_t index) { return futures_[index].get(); }

 private:
  void work() {
    for (std::size_t i = next_++; i < sources_.size() && !stop_; i = next_++) {
      try {
        promises_[i].set_value(codegen::shared_compiler().compile(sources_[i], arch_).module);
      } catch (...) {
        promises_[i].set_exception(std::current_exception());
      }
    }
  }

  std::vector<codegen::GeneratedSource> sources_;
  std::string arch_;
  std::vector<std::promise<CompiledPtr>> promises_;
  std::vector<std::future<CompiledPtr>> futures_;
  std::atomic<std::size_t> next_{0};
  std::atomic<bool> stop_{false};
  std::vector<std::thread> workers_;
};

}  // namespace

TuneReport tune(const Problem& request, const TuneOptions& options) {
  const auto began = std::chrono::steady_clock::now();
  const auto& kernel = templates::find_kernel(request.kernel);
  Problem problem = request;
  if (problem.dtype.empty()) problem.dtype = kernel.dtypes.front();
  templates::validate_shape(kernel, problem.shape);
  templates::validate_dtype(kernel, problem.dtype);
  const auto& dtype = templates::dtype_info(problem.dtype);

  detail::Context context(options.device);
  const DeviceInfo device = detail::query_device(options.device);
  TuneReport report;
  report.problem = problem;
  report.device_name = device.name;

  std::vector<Config> candidates;
  std::vector<codegen::GeneratedSource> sources;
  auto finish = [&](TrialReport trial) {
    if (options.on_trial) options.on_trial(trial);
    report.trials.push_back(std::move(trial));
  };
  for (auto& config : templates::all_configs(kernel)) {
    if (std::string why = kernel.violation(config, problem.shape); !why.empty()) {
      TrialReport trial;
      trial.config = config;
      trial.status = TrialStatus::invalid;
      trial.detail = why;
      finish(std::move(trial));
      continue;
    }
    sources.push_back(codegen::specialize(kernel, problem.shape, problem.dtype, config));
    candidates.push_back(std::move(config));
  }

  CompilePool pool(sources, device.arch);
  tuner::Harness harness(kernel, problem.shape, problem.dtype, device, options.seed);
  tuner::MeasureOptions measure;
  measure.max_seconds = options.max_seconds_per_candidate;

  for (std::size_t i = 0; i < candidates.size(); ++i) {
    TrialReport trial;
    trial.config = candidates[i];
    CompiledPtr compiled;
    try {
      compiled = pool.get(i);
    } catch (const Error& e) {
      trial.status = TrialStatus::compile_failed;
      trial.detail = e.what();
      finish(std::move(trial));
      continue;
    }
    trial.compile_ms = compiled->compile_ms;
    trial.resources = compiled->resources;
    const LaunchGeometry geometry = kernel.geometry(trial.config, problem.shape, dtype);
    try {
      detail::Module module(compiled->cubin);
      detail::Kernel loaded = module.kernel(compiled->lowered_name);
      trial.verify_error = harness.verify(loaded, geometry);
      if (!(trial.verify_error <= harness.tolerance())) {
        trial.status = TrialStatus::wrong_result;
        trial.detail = fmt::format("relative L2 error {:.3g} above tolerance {:.3g}", trial.verify_error,
                                   harness.tolerance());
      } else {
        const tuner::Timing timing = harness.time(loaded, geometry, measure);
        trial.median_ms = timing.median_ms;
        trial.spread = timing.spread;
        trial.repetitions = timing.repetitions;
      }
    } catch (const Error& e) {
      trial.status = e.kind() == ErrorKind::device_limit ? TrialStatus::invalid : TrialStatus::launch_failed;
      trial.detail = e.what();
    }
    finish(std::move(trial));
  }

  for (std::size_t i = 0; i < report.trials.size(); ++i) {
    const auto& trial = report.trials[i];
    if (trial.status != TrialStatus::ok) continue;
    // Strictly faster only: on an exact tie the earlier (simpler, in domain order) config stays.
    if (!report.winner || trial.median_ms < report.trials[*report.winner].median_ms) report.winner = i;
  }
  report.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  return report;
}

}  // namespace gmjit
