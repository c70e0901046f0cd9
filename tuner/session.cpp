#include "tuner/session.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <csignal>
#include <future>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "cache/store.hpp"
#include "codegen/compiler.hpp"
#include "core/log.hpp"
#include "templates/registry.hpp"
#include "cache/binaries.hpp"
#include "tuner/harness.hpp"
#include "tuner/search.hpp"
#include "tuner/worker.hpp"
#include "tuner/worker_process.hpp"

namespace gmjit::tuner {
namespace {

using Clock = std::chrono::steady_clock;
using CompiledPtr = std::shared_ptr<const codegen::CompiledModule>;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

bool simulated_from_environment() {
  const char* value = std::getenv("GMJIT_SIMULATED_DEVICE");
  return value && std::strcmp(value, "1") == 0;
}

// Compiles candidates on a pool of threads in the order they will be timed, staying at most
// `lookahead` ahead of the consumer, so compiles overlap the benchmarking of earlier
// candidates without burning cores on candidates a budget will never reach.
class CompilePool {
 public:
  CompilePool(std::vector<codegen::GeneratedSource> sources, std::vector<CompiledPtr> cached, std::string arch,
              unsigned threads)
      : sources_(std::move(sources)), cached_(std::move(cached)), arch_(std::move(arch)), promises_(sources_.size()) {
    for (auto& promise : promises_) futures_.push_back(promise.get_future());
    if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
    threads = std::max(1u, std::min<unsigned>(threads, static_cast<unsigned>(sources_.size())));
    lookahead_ = 2 * threads;
    for (unsigned t = 0; t < threads; ++t) workers_.emplace_back([this] { work(); });
  }
  ~CompilePool() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& worker : workers_) worker.join();
  }
  CompilePool(const CompilePool&) = delete;
  CompilePool& operator=(const CompilePool&) = delete;

  // Rethrows the compile's Error.
  CompiledPtr get(std::size_t index) {
    {
      std::lock_guard lock(mutex_);
      consumed_ = std::max(consumed_, index + 1);
    }
    wake_.notify_all();
    return futures_[index].get();
  }

 private:
  void work() {
    for (;;) {
      std::size_t i = 0;
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || (next_ < sources_.size() && next_ < consumed_ + lookahead_); });
        if (stop_) return;
        i = next_++;
      }
      try {
        promises_[i].set_value(cached_[i] ? cached_[i] : codegen::shared_compiler().compile(sources_[i], arch_).module);
      } catch (...) {
        promises_[i].set_exception(std::current_exception());
      }
    }
  }

  std::vector<codegen::GeneratedSource> sources_;
  std::vector<CompiledPtr> cached_;
  std::string arch_;
  std::vector<std::promise<CompiledPtr>> promises_;
  std::vector<std::future<CompiledPtr>> futures_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::size_t next_ = 0;
  std::size_t consumed_ = 0;
  std::size_t lookahead_ = 2;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

nlohmann::json geometry_json(const LaunchGeometry& g) {
  return {{"grid", {g.grid[0], g.grid[1], g.grid[2]}},
          {"block", {g.block[0], g.block[1], g.block[2]}},
          {"shared_bytes", g.dynamic_shared_bytes}};
}

// The first rung of successive halving times briefly; the survivors are timed in full.
// A candidate 25% slower than the best so far after its first samples cannot win; it stops
// there (its median is then rougher, which no decision depends on).
constexpr double kGiveUpMargin = 1.25;

nlohmann::json measure_json(bool quick, const TuneOptions& options, double best_ms) {
  nlohmann::json m;
  if (quick) {
    m = {{"min_repetitions", 5}, {"max_repetitions", 30}, {"max_seconds", 0.05}, {"target_ci_percent", 3.0}};
  } else {
    m = {{"min_repetitions", 10},
         {"max_repetitions", 400},
         {"max_seconds", options.max_seconds_per_candidate},
         {"target_ci_percent", options.target_ci_percent}};
  }
  if (best_ms > 0) m["give_up_above_ms"] = best_ms * kGiveUpMargin;
  return m;
}

void apply_timing(TrialReport& trial, const nlohmann::json& t) {
  trial.median_ms = t.value("median_ms", 0.0);
  trial.spread = t.value("spread", 0.0);
  trial.ci_percent = t.value("ci_percent", 0.0);
  trial.repetitions = t.value("repetitions", 0);
  trial.batch = t.value("batch", 1);
}

// Winners of the same kernel and dtype on this device, nearest shape first (cache::shape_distance,
// the distance the runtime's nearest-shape fallback ranks by).
std::vector<Config> nearest_winner_configs(const std::string& db_path, const std::string& device_key,
                                           const Problem& problem, std::size_t count) {
  std::vector<std::pair<double, Config>> ranked;
  try {
    cache::Store store(db_path);
    const std::string shape_json = nlohmann::json(problem.shape).dump();
    for (const auto& w : store.winners(problem.kernel)) {
      if (w.device_key != device_key || w.dtype != problem.dtype) continue;
      if (const auto distance = cache::shape_distance(shape_json, w.shape_json)) {
        ranked.emplace_back(*distance, nlohmann::json::parse(w.config_json).get<Config>());
      }
    }
  } catch (const std::exception& e) {
    detail::logger().warn("transfer: cannot read winners from {} ({}); starting from the model", db_path, e.what());
  }
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Config> configs;
  for (std::size_t i = 0; i < ranked.size() && configs.size() < count; ++i) configs.push_back(ranked[i].second);
  return configs;
}

}  // namespace

std::vector<std::string> simulated_device_names() {
  std::vector<std::string> names;
  const char* value = std::getenv("GMJIT_SIMULATED_DEVICES");
  if (!value || !*value) return names;
  std::stringstream list(value);
  for (std::string name; std::getline(list, name, ',');) names.push_back(name);
  return names;
}

struct Session::State {
  TuneOptions options;
  bool simulated = false;
  std::string worker_path;
  WorkerProcess worker;
  DeviceInfo device;
  std::optional<Frame> problem;  // re-sent to every replacement worker
  std::size_t generation = 0;    // bumps whenever a worker is replaced
  std::size_t restarts = 0;
  std::atomic<bool> interrupted{false};
  // Spawning and interrupt() exclude each other, so a worker started while the session stops
  // is either refused or killed.
  std::mutex spawn_mutex;

  // After a call that got no answer: was the worker stopped from outside rather than by the
  // candidate?
  void check_stopped() {
    if (interrupted) throw Interrupted("the session was stopped");
    const int signal = worker.ended_by_signal();
    if (signal == SIGINT || signal == SIGTERM) {
      throw Interrupted(fmt::format("the worker was stopped by signal {} ({})", signal, ::strsignal(signal)));
    }
  }

  void spawn() {
    std::vector<std::string> args{"--device", std::to_string(options.device)};
    if (simulated) args.push_back("--simulated");
    {
      std::lock_guard lock(spawn_mutex);
      if (interrupted) throw Interrupted("the session was stopped");
      worker.start(worker_path, args);
    }
    Frame hello;
    std::string why;
    // Creating a CUDA context can take seconds on a cold driver.
    if (worker.call(nullptr, hello, std::max(60.0, options.watchdog_seconds), why) != WorkerProcess::Outcome::answered) {
      check_stopped();
      throw Error(ErrorKind::driver, 0, "the tuning worker did not start: " + why);
    }
    if (!hello.header.value("ok", false)) {
      worker.stop();
      throw Error(ErrorKind::driver, 0, hello.header.value("error", std::string("the tuning worker failed")));
    }
    device = device_from_json(hello.header.at("device"));
    ++generation;
  }

  // A live worker that holds the current problem.
  void ensure_ready() {
    if (worker.running()) return;
    spawn();
    if (!problem) return;
    Frame answer;
    std::string why;
    if (worker.call(&*problem, answer, std::max(120.0, options.watchdog_seconds), why) !=
        WorkerProcess::Outcome::answered) {
      check_stopped();
      throw Error(ErrorKind::launch, 0, "the tuning worker died while preparing the problem: " + why);
    }
    if (!answer.header.value("ok", false)) {
      throw Error(ErrorKind::usage, 0, answer.header.value("error", std::string("the worker refused the problem")));
    }
  }

  // Makes `frame` the current problem, on the running worker or a new one.
  void set_problem(const Frame& frame) {
    problem = frame;
    if (!worker.running()) {
      ensure_ready();
      return;
    }
    Frame answer;
    std::string why;
    if (worker.call(&frame, answer, std::max(120.0, options.watchdog_seconds), why) !=
        WorkerProcess::Outcome::answered) {
      check_stopped();
      ++restarts;
      ensure_ready();
      return;
    }
    if (!answer.header.value("ok", false)) {
      throw Error(ErrorKind::usage, 0, answer.header.value("error", std::string("the worker refused the problem")));
    }
  }

  void replace_worker() {
    if (worker.running()) worker.stop();
    ++restarts;
  }
};

Session::Session(const TuneOptions& options) : state_(std::make_unique<State>()) {
  state_->options = options;
  state_->simulated = options.simulated_device || simulated_from_environment();
  state_->worker_path = find_worker();
  state_->spawn();
}

Session::~Session() = default;

const DeviceInfo& Session::device() const { return state_->device; }

void Session::interrupt() {
  state_->interrupted = true;
  std::lock_guard lock(state_->spawn_mutex);
  state_->worker.kill_now();
}

TuneReport Session::tune(const Problem& request, const TuneOptions& options) {
  const auto began = Clock::now();
  State& s = *state_;
  const auto& kernel = templates::find_kernel(request.kernel);
  Problem problem = request;
  if (problem.dtype.empty()) problem.dtype = kernel.dtypes.front();
  templates::validate_shape(kernel, problem.shape);
  templates::validate_dtype(kernel, problem.dtype);
  const auto& dtype = templates::dtype_info(problem.dtype);
  s.options.watchdog_seconds = options.watchdog_seconds;

  TuneReport report;
  report.problem = problem;
  report.device_name = s.device.name;
  report.device_key = s.device.fingerprint();
  report.strategy = options.strategy;
  auto finish = [&](TrialReport trial) {
    if (options.on_trial) options.on_trial(trial);
    report.trials.push_back(std::move(trial));
    return report.trials.size() - 1;
  };

  // The problem goes to the worker first: a bad problem fails before anything is compiled.
  Frame problem_frame;
  problem_frame.header = {{"op", "problem"}, {"kernel", problem.kernel}, {"dtype", problem.dtype},
                          {"shape", problem.shape}, {"seed", options.seed}};
  // A user's kernel exists in this process only: the worker registers it from the same texts.
  if (!kernel.manifest_json.empty()) {
    problem_frame.header["user_kernel"] = {{"manifest", kernel.manifest_json}, {"source", kernel.header_source}};
  }
  // A user's host reference exists in this process only: it runs here, on the inputs the worker
  // will generate from the same seed. A built-in's runs in the worker.
  if (kernel.host_reference && templates::is_user_kernel(kernel.name)) {
    const auto inputs = widen_inputs(kernel, problem.shape, dtype, random_inputs(kernel, problem.shape, dtype, options.seed));
    const auto outputs = kernel.host_reference(inputs, problem.shape);
    for (const auto& output : outputs) {
      problem_frame.header["expected_elements"].push_back(output.size());
      const auto* raw = reinterpret_cast<const char*>(output.data());
      problem_frame.payload.insert(problem_frame.payload.end(), raw, raw + output.size() * sizeof(double));
    }
  }
  const std::size_t restarts_before = s.restarts;
  s.set_problem(problem_frame);

  // Resumed trials keep their results; every other configuration is checked against the
  // constraints and the device's limits before anything is compiled.
  std::vector<Config> candidates;
  std::vector<LaunchGeometry> geometries;
  std::vector<std::size_t> resumed_ok;  // indices into report.trials
  for (auto& config : templates::all_configs(kernel)) {
    const auto prior = std::find_if(options.prior_trials.begin(), options.prior_trials.end(),
                                    [&](const TrialReport& t) { return t.config == config; });
    if (prior != options.prior_trials.end()) {
      TrialReport trial = *prior;
      trial.resumed = true;
      const bool ok = trial.status == TrialStatus::ok;
      const std::size_t index = finish(std::move(trial));
      if (ok) resumed_ok.push_back(index);
      continue;
    }
    TrialReport trial;
    trial.config = config;
    if (std::string why = kernel.violation(config, problem.shape); !why.empty()) {
      trial.status = TrialStatus::invalid;
      trial.detail = why;
      finish(std::move(trial));
      continue;
    }
    const LaunchGeometry geometry = kernel.geometry(config, problem.shape, dtype);
    if (geometry.threads_per_block() > 1024) {
      trial.status = TrialStatus::invalid;
      trial.detail = fmt::format("{} threads per block; the device allows 1024", geometry.threads_per_block());
      finish(std::move(trial));
      continue;
    }
    if (geometry.dynamic_shared_bytes > static_cast<unsigned>(s.device.shared_optin_bytes)) {
      trial.status = TrialStatus::invalid;
      trial.detail = fmt::format("needs {} bytes of dynamic shared memory; the device allows {}",
                                 geometry.dynamic_shared_bytes, s.device.shared_optin_bytes);
      finish(std::move(trial));
      continue;
    }
    candidates.push_back(std::move(config));
    geometries.push_back(geometry);
  }
  report.valid_candidates = candidates.size() + resumed_ok.size();

  std::vector<double> estimates;
  for (const auto& config : candidates) estimates.push_back(estimate_ms(kernel, config, problem.shape, dtype, s.device));
  std::vector<Config> seeds;
  if (options.strategy == Strategy::transfer && !options.db_path.empty()) {
    seeds = nearest_winner_configs(options.db_path, report.device_key, problem, 3);
  }
  const std::vector<std::size_t> order = visit_order(options.strategy, candidates, estimates, options.seed, seeds);

  // Sources in visit order; binaries already in the cache skip NVRTC.
  std::optional<cache::Store> store;
  if (!options.db_path.empty()) store.emplace(options.db_path);
  std::vector<codegen::GeneratedSource> sources;
  std::vector<CompiledPtr> cached;
  for (std::size_t k : order) {
    sources.push_back(codegen::specialize(kernel, problem.shape, problem.dtype, candidates[k]));
    CompiledPtr hit;
    if (store) {
      if (auto binary = store->get_binary(codegen::compile_key(sources.back(), s.device.arch))) {
        try {
          auto module = std::make_shared<codegen::CompiledModule>();
          const auto description = nlohmann::json::parse(binary->resources_json);
          module->source = sources.back();
          module->arch = binary->arch;
          module->compile_key = binary->compile_key;
          module->lowered_name = description.at("lowered_name").get<std::string>();
          module->cubin = binary->cubin;
          module->ptx = binary->ptx;
          hit = module;
        } catch (const std::exception& e) {
          detail::logger().warn("cached binary {} is unreadable ({}); recompiling", binary->compile_key, e.what());
        }
      }
    }
    cached.push_back(std::move(hit));
  }
  CompilePool pool(sources, cached, s.device.arch, options.compile_threads);

  // id -> (trial index, the worker generation that holds it loaded, cubin and name to reload)
  struct Loaded {
    std::size_t trial = 0;
    std::size_t generation = 0;
    CompiledPtr compiled;
    LaunchGeometry geometry;
  };
  std::map<std::int64_t, Loaded> loaded;
  std::int64_t next_id = 0;

  // Sends one candidate to the worker and records what came back, surviving any worker death.
  double best_ms = 0;  // fastest verified median of this run so far
  auto run_candidate = [&](TrialReport& trial, const CompiledPtr& compiled, const LaunchGeometry& geometry,
                           bool quick, bool may_give_up = true) -> std::int64_t {
    s.ensure_ready();
    const std::int64_t id = next_id++;
    Frame request;
    request.header = {{"op", "trial"},          {"id", id},
                      {"config", trial.config}, {"lowered_name", compiled->lowered_name},
                      {"geometry", geometry_json(geometry)}, {"measure", measure_json(quick, options, may_give_up ? best_ms : 0.0)}};
    request.payload = compiled->cubin;
    Frame answer;
    std::string why;
    const auto outcome = s.worker.call(&request, answer, s.options.watchdog_seconds, why);
    if (outcome != WorkerProcess::Outcome::answered) s.check_stopped();
    switch (outcome) {
      case WorkerProcess::Outcome::timed_out:
        trial.status = TrialStatus::timeout;
        trial.detail = why;
        s.replace_worker();
        return -1;
      case WorkerProcess::Outcome::died:
        trial.status = TrialStatus::crashed;
        trial.detail = why;
        s.replace_worker();
        return -1;
      case WorkerProcess::Outcome::answered:
        break;
    }
    const auto& h = answer.header;
    if (!h.value("ok", false)) {
      trial.status = TrialStatus::launch_failed;
      trial.detail = h.value("error", std::string("the worker refused the candidate"));
      return -1;
    }
    trial.status = parse_trial_status(h.at("status").get<std::string>());
    trial.detail = h.value("detail", std::string());
    const double error = h.value("verify_error", 0.0);
    trial.verify_error = error < 0 ? std::numeric_limits<double>::infinity() : error;
    if (trial.status == TrialStatus::crashed) {
      // The worker answered, then exits: its context is gone.
      s.replace_worker();
      return -1;
    }
    if (trial.status != TrialStatus::ok) return -1;
    apply_timing(trial, h);
    if (h.value("gave_up", false)) {
      trial.detail = fmt::format("timing stopped after {} samples: over {:.2f}x the best so far", trial.repetitions,
                                 kGiveUpMargin);
    }
    if (best_ms == 0 || trial.median_ms < best_ms) best_ms = trial.median_ms;
    loaded[id] = Loaded{0, s.generation, compiled, geometry};
    return id;
  };

  const bool halving = options.strategy == Strategy::model || options.strategy == Strategy::transfer;
  std::map<std::size_t, std::int64_t> id_of;  // trial index -> worker id of its latest run
  std::map<std::size_t, CompiledPtr> compiled_of;
  std::map<std::size_t, LaunchGeometry> geometry_of;
  auto record_curve = [&] {
    double best = 0;
    for (const auto& t : report.trials) {
      if (t.status == TrialStatus::ok && !t.resumed && (best == 0 || t.median_ms < best)) best = t.median_ms;
    }
    if (best > 0) report.curve.push_back({report.evaluations, seconds_since(began), best});
  };

  for (std::size_t position = 0; position < order.size(); ++position) {
    if (s.interrupted) throw Interrupted("the session was stopped");
    if (options.max_evaluations > 0 && report.evaluations >= options.max_evaluations) break;
    if (options.max_seconds > 0 && seconds_since(began) >= options.max_seconds) break;
    const std::size_t k = order[position];
    TrialReport trial;
    trial.config = candidates[k];
    trial.binary_cached = cached[position] != nullptr;
    CompiledPtr compiled;
    try {
      compiled = pool.get(position);
    } catch (const Error& e) {
      trial.status = TrialStatus::compile_failed;
      trial.detail = e.what();
      ++report.evaluations;
      finish(std::move(trial));
      continue;
    }
    if (store && !trial.binary_cached) cache::store_binary(*store, *compiled);
    trial.compile_ms = compiled->compile_ms;
    trial.resources = compiled->resources;
    const unsigned shared = static_cast<unsigned>(compiled->resources.shared_bytes) + geometries[k].dynamic_shared_bytes;
    ++report.evaluations;
    if (compiled->resources.shared_bytes > 0 && shared > static_cast<unsigned>(s.device.shared_optin_bytes)) {
      trial.status = TrialStatus::invalid;
      trial.detail = fmt::format("needs {} bytes of shared memory; the device allows {}", shared,
                                 s.device.shared_optin_bytes);
      finish(std::move(trial));
      continue;
    }
    const std::int64_t id = run_candidate(trial, compiled, geometries[k], halving);
    const std::size_t index = finish(std::move(trial));
    if (id >= 0) {
      id_of[index] = id;
      compiled_of[index] = compiled;
      geometry_of[index] = geometries[k];
    }
    record_curve();
  }

  // The top of a ranking needs its sources again when a worker was replaced or the trial was
  // measured by an earlier run.
  auto reload = [&](std::size_t index) -> bool {
    auto& trial = report.trials[index];
    if (!compiled_of.count(index)) {
      try {
        compiled_of[index] = codegen::shared_compiler()
                                 .compile(codegen::specialize(kernel, problem.shape, problem.dtype, trial.config),
                                          s.device.arch)
                                 .module;
      } catch (const Error&) {
        return false;
      }
      geometry_of[index] = kernel.geometry(trial.config, problem.shape, dtype);
    }
    TrialReport rerun = trial;
    rerun.resumed = false;
    const std::int64_t id = run_candidate(rerun, compiled_of[index], geometry_of[index], false, false);
    if (id < 0) {
      trial = rerun;  // it failed now: the new status stands
      return false;
    }
    trial = rerun;
    id_of[index] = id;
    return true;
  };
  auto ranked_ok = [&] {
    std::vector<std::size_t> ok;
    for (std::size_t i = 0; i < report.trials.size(); ++i) {
      if (report.trials[i].status == TrialStatus::ok) ok.push_back(i);
    }
    std::stable_sort(ok.begin(), ok.end(),
                     [&](std::size_t a, std::size_t b) { return report.trials[a].median_ms < report.trials[b].median_ms; });
    return ok;
  };

  // Successive halving: the best quarter of the briefly timed candidates is timed in full.
  if (halving) {
    const auto ok = ranked_ok();
    const std::size_t keep = std::max<std::size_t>(options.retime_top, (ok.size() + 3) / 4);
    for (std::size_t r = 0; r < ok.size() && r < keep; ++r) reload(ok[r]);
    record_curve();
  }

  // The fastest few are re-timed interleaved, in one worker, before anything is chosen.
  std::vector<std::size_t> finalists;
  for (std::size_t index : ranked_ok()) {
    if (finalists.size() >= std::max<std::size_t>(1, options.retime_top)) break;
    const bool current = id_of.count(index) && loaded.count(id_of[index]) &&
                         loaded[id_of[index]].generation == s.generation && s.worker.running();
    if (!current && !reload(index)) continue;
    finalists.push_back(index);
  }
  if (finalists.size() > 1) {
    s.ensure_ready();
    Frame request;
    request.header = {{"op", "retime"}, {"rounds", 15}};
    for (std::size_t index : finalists) request.header["ids"].push_back(id_of[index]);
    Frame answer;
    std::string why;
    const auto outcome = s.worker.call(&request, answer, s.options.watchdog_seconds * 2, why);
    if (outcome != WorkerProcess::Outcome::answered) s.check_stopped();
    if (outcome == WorkerProcess::Outcome::answered && answer.header.value("ok", false)) {
      const auto& timings = answer.header.at("timings");
      for (std::size_t f = 0; f < finalists.size(); ++f) {
        auto& trial = report.trials[finalists[f]];
        apply_timing(trial, timings.at(f));
        trial.detail = "re-timed interleaved with the other finalists";
      }
    } else {
      detail::logger().warn("interleaved re-timing failed ({}); choosing from the individual timings",
                            outcome == WorkerProcess::Outcome::answered ? answer.header.value("error", std::string()) : why);
      if (outcome != WorkerProcess::Outcome::answered) s.replace_worker();
    }
  }

  // Finalists in domain order, so that within the noise the simpler configuration stays.
  const auto domain = templates::all_configs(kernel);
  auto domain_index = [&](const Config& c) {
    return static_cast<std::size_t>(std::find(domain.begin(), domain.end(), c) - domain.begin());
  };
  std::vector<std::size_t> pool_indices = finalists.empty() ? ranked_ok() : finalists;
  std::stable_sort(pool_indices.begin(), pool_indices.end(), [&](std::size_t a, std::size_t b) {
    return domain_index(report.trials[a].config) < domain_index(report.trials[b].config);
  });
  std::vector<TrialReport> contenders;
  for (std::size_t index : pool_indices) contenders.push_back(report.trials[index]);
  const Choice choice = choose(contenders, options.incumbent);
  if (choice.winner) report.winner = pool_indices[*choice.winner];
  if (choice.runner_up) {
    report.runner_up = pool_indices[*choice.runner_up];
  } else if (report.winner) {
    for (std::size_t index : ranked_ok()) {
      if (index != *report.winner) {
        report.runner_up = index;
        break;
      }
    }
  }
  report.worker_restarts = s.restarts - restarts_before;
  report.wall_seconds = seconds_since(began);
  return report;
}

}  // namespace gmjit::tuner
