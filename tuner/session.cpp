#include "tuner/session.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <csignal>
#include <deque>
#include <future>
#include <limits>
#include <map>
#include <mutex>
#include <sstream>

#include "cache/binaries.hpp"
#include "cache/store.hpp"
#include "codegen/compiler.hpp"
#include "core/log.hpp"
#include "templates/registry.hpp"
#include "tuner/compile_pool.hpp"
#include "tuner/harness.hpp"
#include "tuner/search.hpp"
#include "tuner/stop.hpp"
#include "tuner/strategies/searcher.hpp"
#include "tuner/worker.hpp"
#include "tuner/worker_process.hpp"

namespace gmjit::tuner {
namespace {

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

bool simulated_from_environment() {
  const char* value = std::getenv("GMJIT_SIMULATED_DEVICE");
  return value && std::strcmp(value, "1") == 0;
}

nlohmann::json geometry_json(const LaunchGeometry& g) {
  return {{"grid", {g.grid[0], g.grid[1], g.grid[2]}},
          {"block", {g.block[0], g.block[1], g.block[2]}},
          {"shared_bytes", g.dynamic_shared_bytes},
          {"cluster", {g.cluster[0], g.cluster[1], g.cluster[2]}}};
}

// The first rung of successive halving times briefly; the survivors are timed in full.
// A candidate 25% slower than the best so far after its first samples cannot win; it stops
// there (its median is then rougher, which no decision depends on).
constexpr double kGiveUpMargin = 1.25;

// The brief rung (successive halving's first) or the full one; the full one times to the
// options' confidence target.
MeasureOptions rung(bool brief, const TuneOptions& options, double best_ms) {
  MeasureOptions m;
  if (brief) {
    m.min_repetitions = 5;
    m.max_repetitions = 30;
    m.max_seconds = 0.05;
    m.target_ci_percent = 3.0;
  } else {
    m.max_seconds = options.max_seconds_per_candidate;
    m.target_ci_percent = options.target_ci_percent;
  }
  if (best_ms > 0) m.give_up_above_ms = best_ms * kGiveUpMargin;
  return m;
}

void apply_timing(TrialReport& trial, const Timing& t) {
  trial.median_ms = t.median_ms;
  trial.spread = t.spread;
  trial.ci_percent = t.ci_percent;
  trial.repetitions = t.repetitions;
  trial.batch = t.batch;
}

// Winners of the same kernel and dtype on this device, nearest shape first (cache::shape_distance,
// the distance the runtime's nearest-shape fallback ranks by).
std::vector<Config> nearest_winner_configs(const std::string& db_path, const std::string& device_key,
                                           const Problem& problem, std::size_t count) {
  const auto& kernel = templates::find_kernel(problem.kernel);
  std::vector<std::pair<double, Config>> ranked;
  try {
    cache::Store store(db_path);
    const std::string shape_json = nlohmann::json(problem.shape).dump();
    for (const auto& w : store.winners(problem.kernel)) {
      if (w.device_key != device_key || w.dtype != problem.dtype) continue;
      if (const auto distance = cache::shape_distance(shape_json, w.shape_json)) {
        ranked.emplace_back(*distance,
                            templates::with_defaults(kernel, nlohmann::json::parse(w.config_json).get<Config>()));
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

// The session's worker process: spawned, given the problem, replaced after a crash or a hang, and
// asked one candidate (or one re-timing) at a time.
struct WorkerLink {
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
      throw ProblemFailed(ErrorKind::launch, "the tuning worker died while preparing the problem: " + why);
    }
    if (!answer.header.value("ok", false)) throw refused(answer);
  }

  static ProblemFailed refused(const Frame& answer) {
    return ProblemFailed(ErrorKind::usage, answer.header.value("error", std::string("the worker refused the problem")));
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
    if (!answer.header.value("ok", false)) throw refused(answer);
  }

  void replace_worker() {
    if (worker.running()) worker.stop();
    ++restarts;
  }

  // Verifies and times one candidate under `id`, surviving any worker death, and records the
  // outcome in `trial`. True when it verified and was timed: the worker then holds it loaded.
  bool run_trial(TrialReport& trial, std::int64_t id, const codegen::CompiledModule& compiled,
                 const LaunchGeometry& geometry, const MeasureOptions& measure) {
    ensure_ready();
    Frame request;
    request.header = {{"op", "trial"},          {"id", id},
                      {"config", trial.config}, {"lowered_name", compiled.lowered_name},
                      {"geometry", geometry_json(geometry)}, {"measure", measure}};
    request.payload = compiled.cubin;
    Frame answer;
    std::string why;
    const auto outcome = worker.call(&request, answer, options.watchdog_seconds, why);
    if (outcome != WorkerProcess::Outcome::answered) check_stopped();
    switch (outcome) {
      case WorkerProcess::Outcome::timed_out:
        trial.status = TrialStatus::timeout;
        trial.detail = why;
        replace_worker();
        return false;
      case WorkerProcess::Outcome::died:
        trial.status = TrialStatus::crashed;
        trial.detail = why;
        replace_worker();
        return false;
      case WorkerProcess::Outcome::answered:
        break;
    }
    const auto& h = answer.header;
    if (!h.value("ok", false)) {
      trial.status = TrialStatus::launch_failed;
      trial.detail = h.value("error", std::string("the worker refused the candidate"));
      return false;
    }
    trial.status = parse_trial_status(h.at("status").get<std::string>());
    trial.detail = h.value("detail", std::string());
    const double error = h.value("verify_error", 0.0);
    trial.verify_error = error < 0 ? std::numeric_limits<double>::infinity() : error;
    if (trial.status == TrialStatus::crashed) {
      // The worker answered, then exits: its context is gone.
      replace_worker();
      return false;
    }
    if (trial.status != TrialStatus::ok) return false;
    const auto timing = h.get<Timing>();
    apply_timing(trial, timing);
    if (timing.gave_up) {
      trial.detail = fmt::format("timing stopped after {} samples: over {:.2f}x the best so far", trial.repetitions,
                                 kGiveUpMargin);
    }
    return true;
  }

  // Times loaded candidates interleaved, in one worker; one timing per id, or none (logged) when
  // the re-timing failed and the individual timings must do.
  std::optional<nlohmann::json> retime(const std::vector<std::int64_t>& ids) {
    ensure_ready();
    Frame request;
    request.header = {{"op", "retime"}, {"rounds", 15}, {"ids", ids}};
    Frame answer;
    std::string why;
    const auto outcome = worker.call(&request, answer, options.watchdog_seconds * 2, why);
    if (outcome != WorkerProcess::Outcome::answered) check_stopped();
    if (outcome == WorkerProcess::Outcome::answered && answer.header.value("ok", false)) {
      return answer.header.at("timings");
    }
    detail::logger().warn("interleaved re-timing failed ({}); choosing from the individual timings",
                          outcome == WorkerProcess::Outcome::answered ? answer.header.value("error", std::string()) : why);
    if (outcome != WorkerProcess::Outcome::answered) replace_worker();
    return std::nullopt;
  }
};

namespace {

// One Session::tune, in its steps: send the problem, filter the candidates, search (ask, compile,
// measure, tell), successive halving, re-time the finalists, choose.
class Tuning {
 public:
  Tuning(WorkerLink& link, const Problem& request, const TuneOptions& options)
      : link_(link), options_(options), kernel_(templates::find_kernel(request.kernel)), problem_(request) {
    auto normalized = templates::normalize_problem(kernel_, problem_.shape, problem_.dtype);
    problem_.dtype = std::move(normalized.dtype);
    problem_.shape = std::move(normalized.shape);
    dtype_ = &templates::dtype_info(problem_.dtype);
    strategy_ = &find_strategy(options.strategy);
    link_.options.watchdog_seconds = options.watchdog_seconds;
    report_.problem = problem_;
    report_.device_name = link_.device.name;
    report_.device_key = link_.device.fingerprint();
    report_.strategy = strategy_->name;
  }

  TuneReport run() {
    const std::size_t restarts_before = link_.restarts;
    search(filter_candidates());
    if (strategy_->successive_halving) successive_halving();
    choose_winner(retime_finalists());
    report_.worker_restarts = link_.restarts - restarts_before;
    report_.wall_seconds = seconds_since(began_);
    return std::move(report_);
  }

 private:
  // Where the worker holds a measured candidate.
  struct Loaded {
    std::int64_t id = 0;
    std::size_t generation = 0;  // of the worker that loaded it
  };
  // What it takes to run a trial again: the worker may have been replaced since.
  struct Runnable {
    CompiledPtr compiled;
    LaunchGeometry geometry;
    std::optional<Loaded> loaded;
  };
  // A candidate the search handed to the compile pool.
  struct Asked {
    std::size_t candidate = 0;
    bool binary_cached = false;
    std::shared_future<CompiledPtr> compiled;
  };
  static bool is_ready(const std::shared_future<CompiledPtr>& compiled) {
    return compiled.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  }

  // The worker generates the inputs and computes the reference (a second or more at large
  // shapes, its compile included) while the pool builds the first candidates: search() sends the
  // problem once their compiles are queued. A problem the worker refuses ends the tuning there.
  void send_problem() {
    Frame frame;
    frame.header = {{"op", "problem"}, {"kernel", problem_.kernel}, {"dtype", problem_.dtype},
                    {"shape", problem_.shape}, {"seed", options_.seed}};
    // A user's kernel exists in this process only: the worker registers it from the same texts.
    if (!kernel_.manifest_json.empty()) {
      frame.header["user_kernel"] = {{"manifest", kernel_.manifest_json}, {"source", kernel_.header_source}};
    }
    // So is an expression's, and its reference (the program evaluated in float64) with it.
    if (!kernel_.expression.empty()) frame.header["expression"] = {{"name", kernel_.name}, {"text", kernel_.expression}};
    // A user's host reference exists in this process only: it runs here, on the inputs the worker
    // will generate from the same seed. A built-in's or an expression's runs in the worker.
    if (kernel_.host_reference && templates::is_user_kernel(kernel_.name) && kernel_.expression.empty()) {
      try {
        const auto inputs = widen_inputs(kernel_, problem_.shape, *dtype_,
                                         random_inputs(kernel_, problem_.shape, *dtype_, options_.seed));
        for (const auto& output : kernel_.host_reference(inputs, problem_.shape)) {
          frame.header["expected_elements"].push_back(output.size());
          const auto* raw = reinterpret_cast<const char*>(output.data());
          frame.payload.insert(frame.payload.end(), raw, raw + output.size() * sizeof(double));
        }
      } catch (const std::exception& e) {
        throw ProblemFailed(ErrorKind::usage, fmt::format("the host reference of {} failed: {}", kernel_.name, e.what()));
      }
    }
    link_.set_problem(frame);
  }

  // Resumed trials keep their results; every other configuration is checked against the
  // constraints and the device's limits before anything is compiled. Both are reported (decided_)
  // once the worker has taken the problem: a refused problem records no trial.
  SearchSpace filter_candidates() {
    SearchSpace space;
    for (auto& config : templates::all_configs(kernel_)) {
      const auto prior = std::find_if(options_.prior_trials.begin(), options_.prior_trials.end(),
                                      [&](const TrialReport& t) { return t.config == config; });
      if (prior != options_.prior_trials.end()) {
        TrialReport trial = *prior;
        trial.resumed = true;
        space.resumed.push_back(trial);
        decided_.push_back(std::move(trial));
        continue;
      }
      TrialReport trial;
      trial.config = config;
      trial.status = TrialStatus::invalid;
      trial.detail = kernel_.violation(config, problem_.shape);
      if (!trial.detail.empty()) {
        decided_.push_back(std::move(trial));
        continue;
      }
      // The geometry of a configuration that breaks the constraints may be meaningless.
      const LaunchGeometry geometry = kernel_.geometry(config, problem_.shape, *dtype_);
      if (kernel_.device_violation) trial.detail = kernel_.device_violation(config, link_.device);
      if (trial.detail.empty() && geometry.threads_per_block() > 1024) {
        trial.detail = fmt::format("{} threads per block; the device allows 1024", geometry.threads_per_block());
      } else if (trial.detail.empty() && geometry.dynamic_shared_bytes > static_cast<unsigned>(link_.device.shared_optin_bytes)) {
        trial.detail = fmt::format("needs {} bytes of dynamic shared memory; the device allows {}",
                                   geometry.dynamic_shared_bytes, link_.device.shared_optin_bytes);
      }
      if (!trial.detail.empty()) {
        decided_.push_back(std::move(trial));
        continue;
      }
      space.candidates.push_back(std::move(config));
      geometries_.push_back(geometry);
    }
    std::size_t resumed_ok = 0;
    for (const auto& trial : space.resumed) resumed_ok += trial.status == TrialStatus::ok;
    report_.valid_candidates = space.candidates.size() + resumed_ok;
    space.estimate_ms = [this](const Config& config) {
      return estimate_ms(kernel_, config, problem_.shape, *dtype_, link_.device);
    };
    space.nearest_winners = [this](std::size_t count) {
      return options_.db_path.empty() ? std::vector<Config>{}
                                      : nearest_winner_configs(options_.db_path, report_.device_key, problem_, count);
    };
    space.seed = options_.seed;
    return space;
  }

  // Ask, compile, measure, tell, until the searcher has nothing more or a stop condition is met.
  // Compiles run a few candidates ahead of the one being measured; the first ones are queued
  // before the problem goes to the worker, so they build while it prepares. A searcher that holds back
  // for results (surrogate: four outstanding) would leave most of the pool idle and every ask
  // waiting on a compile, so the idle threads compile what it names as likely next; its asks then
  // mostly find them built. The pool outlives the search (pool_), so compiles still running at
  // its end overlap the re-timing instead of delaying it.
  void search(const SearchSpace& space) {
    const auto searcher = strategy_->make(space);
    const StopCondition stop =
        StopCondition::evaluations(options_.max_evaluations) | StopCondition::seconds(options_.max_seconds);
    std::optional<cache::Store> store;
    if (!options_.db_path.empty()) store.emplace(options_.db_path);
    CompilePool& pool = pool_.emplace(link_.device.arch, options_.compile_threads, space.candidates.size());
    std::deque<Asked> ahead;
    std::map<std::size_t, Asked> early;  // compiled before the searcher asked for them
    std::size_t early_used = 0;
    auto start_compile = [&](std::size_t k) {
      auto source = codegen::specialize(kernel_, problem_.shape, problem_.dtype, space.candidates.at(k));
      CompiledPtr hit = store ? cached_module(*store, source, link_.device.arch) : nullptr;
      const bool cached = hit != nullptr;
      return Asked{k, cached, pool.submit(std::move(source), std::move(hit))};
    };
    auto ask_ahead = [&] {
      if (ahead.size() >= pool.lookahead()) return;
      for (std::size_t k : searcher->ask(pool.lookahead() - ahead.size())) {
        if (const auto it = early.find(k); it != early.end()) {
          ahead.push_back(std::move(it->second));
          early.erase(it);
          ++early_used;
        } else {
          ahead.push_back(start_compile(k));
        }
      }
    };
    auto compile_early = [&] {
      std::size_t compiling = 0;
      for (const auto& asked : ahead) compiling += !is_ready(asked.compiled);
      for (const auto& [k, asked] : early) compiling += !is_ready(asked.compiled);
      if (compiling >= pool.threads()) return;  // new jobs would queue behind these
      std::size_t free = pool.threads() - compiling;
      for (std::size_t k : searcher->likely_next(pool.threads())) {
        if (free == 0) break;
        if (early.count(k) != 0) continue;
        early.emplace(k, start_compile(k));
        --free;
      }
    };
    ask_ahead();
    compile_early();
    send_problem();
    for (auto& trial : decided_) finish(std::move(trial));
    decided_.clear();
    for (;;) {
      if (link_.interrupted) throw Interrupted("the session was stopped");
      if (stop.reached({report_.evaluations, began_, Clock::now()})) break;
      ask_ahead();
      if (ahead.empty()) break;
      const Asked next = std::move(ahead.front());
      ahead.pop_front();
      ask_ahead();  // so the pool compiles the next ones while the worker times this one
      compile_early();
      TrialReport trial;
      trial.config = space.candidates[next.candidate];
      trial.binary_cached = next.binary_cached;
      const std::size_t index = evaluate(std::move(trial), next.compiled, geometries_[next.candidate], store);
      searcher->tell(next.candidate, report_.trials[index]);
    }
    // What was built early and never asked for goes to the binary cache all the same: the shapes
    // of a sweep share most kernels.
    std::size_t early_stored = 0;
    for (auto& [k, asked] : early) {
      if (!store || asked.binary_cached || !is_ready(asked.compiled)) continue;
      try {
        cache::store_binary(*store, *asked.compiled.get());
        ++early_stored;
      } catch (const Error&) {
        // a compile that failed: nothing to keep
      }
    }
    report_.compiled_early = early_used + early.size();
    report_.compiled_early_asked = early_used;
    if (report_.compiled_early > 0) {
      detail::logger().debug("{}: {} candidates compiled before they were asked for, {} of them then asked; {} "
                             "others kept in the binary cache",
                             report_.problem.kernel, report_.compiled_early, early_used, early_stored);
    }
  }

  // Compiles (waits for) one candidate, checks what only the cubin tells, and measures it.
  std::size_t evaluate(TrialReport trial, const std::shared_future<CompiledPtr>& future, const LaunchGeometry& geometry,
                       std::optional<cache::Store>& store) {
    ++report_.evaluations;
    CompiledPtr compiled;
    try {
      compiled = future.get();
    } catch (const Interrupted&) {
      throw;
    } catch (const Error& e) {
      trial.status = TrialStatus::compile_failed;
      trial.detail = e.what();
      return finish(std::move(trial));
    }
    if (store && !trial.binary_cached) cache::store_binary(*store, *compiled);
    trial.compile_ms = compiled->compile_ms;
    trial.resources = compiled->resources;
    const unsigned shared = static_cast<unsigned>(compiled->resources.shared_bytes) + geometry.dynamic_shared_bytes;
    if (compiled->resources.shared_bytes > 0 && shared > static_cast<unsigned>(link_.device.shared_optin_bytes)) {
      trial.status = TrialStatus::invalid;
      trial.detail = fmt::format("needs {} bytes of shared memory; the device allows {}", shared,
                                 link_.device.shared_optin_bytes);
      return finish(std::move(trial));
    }
    Runnable runnable{compiled, geometry, std::nullopt};
    runnable.loaded = measure(trial, runnable, strategy_->successive_halving, true);
    const std::size_t index = finish(std::move(trial));
    if (runnable.loaded) runnable_[index] = std::move(runnable);
    record_curve();
    return index;
  }

  // Runs `trial` in the worker; where it stays loaded when it verified and was timed.
  std::optional<Loaded> measure(TrialReport& trial, const Runnable& runnable, bool quick, bool may_give_up) {
    const std::int64_t id = next_id_++;
    const auto how = rung(quick, options_, may_give_up ? best_ms_ : 0.0);
    if (!link_.run_trial(trial, id, *runnable.compiled, runnable.geometry, how)) return std::nullopt;
    if (best_ms_ == 0 || trial.median_ms < best_ms_) best_ms_ = trial.median_ms;
    return Loaded{id, link_.generation};
  }

  // Times a ranked trial again, in full; the top of a ranking needs its cubin again when the
  // trial was measured by an earlier run.
  bool rerun(std::size_t index) {
    auto& trial = report_.trials[index];
    auto it = runnable_.find(index);
    if (it == runnable_.end()) {
      Runnable runnable;
      try {
        runnable.compiled = codegen::shared_compiler()
                                .compile(codegen::specialize(kernel_, problem_.shape, problem_.dtype, trial.config),
                                         link_.device.arch)
                                .module;
      } catch (const Error&) {
        return false;
      }
      runnable.geometry = kernel_.geometry(trial.config, problem_.shape, *dtype_);
      it = runnable_.emplace(index, std::move(runnable)).first;
    }
    TrialReport again = trial;
    again.resumed = false;
    const auto loaded = measure(again, it->second, false, false);
    trial = again;  // a failure now stands too
    if (!loaded) return false;
    it->second.loaded = loaded;
    return true;
  }

  // The best quarter of the briefly timed candidates (at least retime_top) is timed in full.
  void successive_halving() {
    const auto ok = ranked_ok();
    const std::size_t keep = std::max<std::size_t>(options_.retime_top, (ok.size() + 3) / 4);
    for (std::size_t r = 0; r < ok.size() && r < keep; ++r) rerun(ok[r]);
    record_curve();
  }

  // The fastest few are re-timed interleaved, in one worker, before anything is chosen.
  std::vector<std::size_t> retime_finalists() {
    std::vector<std::size_t> finalists;
    for (std::size_t index : ranked_ok()) {
      if (finalists.size() >= std::max<std::size_t>(1, options_.retime_top)) break;
      const auto it = runnable_.find(index);
      const bool current = it != runnable_.end() && it->second.loaded &&
                           it->second.loaded->generation == link_.generation && link_.worker.running();
      if (!current && !rerun(index)) continue;
      finalists.push_back(index);
    }
    if (finalists.size() < 2) return finalists;
    std::vector<std::int64_t> ids;
    for (std::size_t index : finalists) ids.push_back(runnable_.at(index).loaded->id);
    if (const auto timings = link_.retime(ids)) {
      for (std::size_t f = 0; f < finalists.size(); ++f) {
        auto& trial = report_.trials[finalists[f]];
        apply_timing(trial, timings->at(f).get<Timing>());
        trial.detail = "re-timed interleaved with the other finalists";
      }
    }
    return finalists;
  }

  // Finalists in domain order, so that within the noise the simpler configuration stays.
  void choose_winner(const std::vector<std::size_t>& finalists) {
    const auto domain = templates::all_configs(kernel_);
    auto domain_index = [&](const Config& c) {
      return static_cast<std::size_t>(std::find(domain.begin(), domain.end(), c) - domain.begin());
    };
    std::vector<std::size_t> pool = finalists.empty() ? ranked_ok() : finalists;
    std::stable_sort(pool.begin(), pool.end(), [&](std::size_t a, std::size_t b) {
      return domain_index(report_.trials[a].config) < domain_index(report_.trials[b].config);
    });
    std::vector<TrialReport> contenders;
    for (std::size_t index : pool) contenders.push_back(report_.trials[index]);
    const Choice choice = choose(contenders, options_.incumbent);
    if (choice.winner) report_.winner = pool[*choice.winner];
    if (choice.runner_up) {
      report_.runner_up = pool[*choice.runner_up];
    } else if (report_.winner) {
      for (std::size_t index : ranked_ok()) {
        if (index != *report_.winner) {
          report_.runner_up = index;
          break;
        }
      }
    }
  }

  std::size_t finish(TrialReport trial) {
    if (options_.on_trial) options_.on_trial(trial);
    report_.trials.push_back(std::move(trial));
    return report_.trials.size() - 1;
  }

  std::vector<std::size_t> ranked_ok() const {
    std::vector<std::size_t> ok;
    for (std::size_t i = 0; i < report_.trials.size(); ++i) {
      if (report_.trials[i].status == TrialStatus::ok) ok.push_back(i);
    }
    std::stable_sort(ok.begin(), ok.end(),
                     [&](std::size_t a, std::size_t b) { return report_.trials[a].median_ms < report_.trials[b].median_ms; });
    return ok;
  }

  void record_curve() {
    double best = 0;
    for (const auto& t : report_.trials) {
      if (t.status == TrialStatus::ok && !t.resumed && (best == 0 || t.median_ms < best)) best = t.median_ms;
    }
    if (best > 0) report_.curve.push_back({report_.evaluations, seconds_since(began_), best});
  }

  WorkerLink& link_;
  const TuneOptions& options_;
  const Clock::time_point began_ = Clock::now();
  const templates::KernelDescriptor& kernel_;
  Problem problem_;
  const templates::DtypeInfo* dtype_ = nullptr;
  const StrategyInfo* strategy_ = nullptr;
  TuneReport report_;
  std::vector<LaunchGeometry> geometries_;  // of SearchSpace::candidates
  std::map<std::size_t, Runnable> runnable_;  // by trial index: the trials that verified
  std::optional<CompilePool> pool_;  // the search's; its last compiles finish during the re-timing
  std::vector<TrialReport> decided_;  // resumed or invalid, reported once the worker has the problem
  std::int64_t next_id_ = 0;
  double best_ms_ = 0;  // fastest verified median of this run so far
};

}  // namespace

std::vector<std::string> simulated_device_names() {
  std::vector<std::string> names;
  const char* value = std::getenv("GMJIT_SIMULATED_DEVICES");
  if (!value || !*value) return names;
  std::stringstream list(value);
  for (std::string name; std::getline(list, name, ',');) names.push_back(name);
  return names;
}

struct Session::State : WorkerLink {};

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

TuneReport Session::tune(const Problem& problem, const TuneOptions& options) {
  return Tuning(*state_, problem, options).run();
}

}  // namespace gmjit::tuner
