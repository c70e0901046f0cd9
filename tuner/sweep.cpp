#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "cache/store.hpp"
#include "gmjit/device.hpp"
#include "gmjit/tune.hpp"
#include "core/device.hpp"
#include "core/log.hpp"
#include "templates/registry.hpp"
#include "tuner/problems.hpp"
#include "tuner/recording.hpp"
#include "tuner/session.hpp"
#include "tuner/stop.hpp"
#include "tuner/strategies/searcher.hpp"
#include "tuner/sweep_queue.hpp"

namespace gmjit {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

bool simulated_from_environment() {
  const char* value = std::getenv("GMJIT_SIMULATED_DEVICE");
  return value != nullptr && std::string(value) == "1";
}

// With per_device each worker has a queue of its own.
std::string worker_group(std::size_t slot) { return "worker " + std::to_string(slot); }

// What every device's thread shares: the queue, the counts and the callbacks, which run one at a
// time under `mutex`.
struct SweepRun {
  SweepRun(const std::vector<Problem>& all, const SweepOptions& given, Clock::time_point start)
      : problems(all), options(given), began(start) {
    if (options.deadline_seconds) {
      deadline = tuner::StopCondition::deadline(began + std::chrono::duration_cast<Clock::duration>(
                                                            std::chrono::duration<double>(*options.deadline_seconds)));
    }
  }
  const std::vector<Problem>& problems;
  const SweepOptions& options;
  const Clock::time_point began;
  tuner::StopCondition deadline;  // no problem starts once it is reached
  std::set<std::size_t> not_started;
  std::string db_path;
  tuner::SweepQueue queue;
  std::mutex mutex;
  std::condition_variable done;
  std::size_t running = 0;  // device threads not yet finished
  std::size_t finished = 0;
  std::size_t total = 0;
  SweepSummary summary;
  std::exception_ptr failure;
  std::string interruption;
  // per_device: which problems had a winner on a fingerprint when the sweep began.
  std::map<std::string, std::vector<bool>> had_winner;
};

// One device's share of a sweep: takes problems from its group's queue until none is left.
void sweep_device(SweepRun& run, tuner::Session& session, const std::string& group, std::size_t slot) {
  const SweepOptions& options = run.options;
  const DeviceInfo& device = session.device();
  cache::Store store(run.db_path);  // a connection per thread; SQLite's locking orders the writers
  SweepEvent event;
  event.device = device.ordinal;
  event.worker = slot;
  event.device_name = device.name;
  auto emit = [&](SweepEvent::Kind kind, const std::string& state) {  // with run.mutex held
    event.kind = kind;
    event.state = state;
    event.finished = run.finished;
    event.total = run.total;
    if (options.on_event) options.on_event(event);
    if (options.on_progress && kind != SweepEvent::Kind::trial) {
      options.on_progress(event.index, run.problems.size(), event.problem, state);
    }
  };

  while (const auto taken = run.queue.take(group)) {
    const std::size_t i = *taken;
    const Problem& problem = run.problems[i];
    tuner::Recording recording(store, device, problem);
    event.index = i;
    event.problem = problem;
    event.trials = 0;
    event.candidates = templates::all_configs(templates::find_kernel(problem.kernel)).size();

    const auto existing = recording.winner();
    const bool cached = options.per_device ? run.had_winner.at(recording.device().key)[i] : existing.has_value();
    if (!options.retune && cached) {
      std::lock_guard lock(run.mutex);
      ++run.summary.skipped;
      ++run.summary.devices[slot].skipped;
      ++run.finished;
      emit(SweepEvent::Kind::finished, "cached");
      continue;
    }
    // Past the deadline a problem with a winner is still skipped above, so what is listed as left
    // is what a new sweep would tune.
    if (run.deadline.reached({0, run.began, Clock::now()})) {
      std::lock_guard lock(run.mutex);
      run.not_started.insert(i);
      continue;
    }
    TuneOptions tune_options = options.tune;
    tune_options.device = device.ordinal;
    tune_options.db_path = run.db_path;
    // A problem an interrupted sweep left half-tuned resumes from the trials it recorded. With
    // per_device another device of this fingerprint may be recording trials of it right now.
    recording.start_from(tune_options, existing, /*resume=*/!options.per_device);
    const std::size_t resumed = tune_options.prior_trials.size();
    if (options.tune.max_evaluations > 0) {
      event.candidates = std::min(event.candidates, options.tune.max_evaluations + resumed);
    }
    {
      std::lock_guard lock(run.mutex);
      emit(SweepEvent::Kind::started,
           resumed ? fmt::format("tuning (resuming after {} recorded trials)", resumed) : "tuning");
    }
    tune_options.on_trial = [&](const TrialReport& trial) {
      std::lock_guard lock(run.mutex);
      // Configurations ruled out before anything ran are not progress.
      if (trial.status != TrialStatus::invalid || trial.resumed) ++event.trials;
      if (options.tune.on_trial) options.tune.on_trial(trial);
      emit(SweepEvent::Kind::trial, "tuning");
    };
    const auto began = Clock::now();
    TuneReport report;
    std::string failure = "no configuration verified";
    try {
      report = recording.tune(session, tune_options);
    } catch (const tuner::ProblemFailed& e) {
      // One problem the worker cannot even set up ends neither this device's share nor the sweep.
      failure = e.message();
      recording.record_failure(failure);
    }
    std::lock_guard lock(run.mutex);
    auto& mine = run.summary.devices[slot];
    mine.tuning_seconds += seconds_since(began);
    ++(report.winner ? mine.tuned : mine.failed);
    ++(report.winner ? run.summary.tuned : run.summary.failed);
    if (!report.winner) run.summary.failures.push_back({i, problem, device.ordinal, failure});
    ++run.finished;
    emit(SweepEvent::Kind::finished, report.winner ? fmt::format("done {:.4f} ms", report.trials[*report.winner].median_ms)
                                                   : "failed: " + failure);
  }
}

}  // namespace

std::vector<int> parse_devices(const std::string& text, bool simulated) {
  if (text == "all") {
    if (simulated || simulated_from_environment()) {
      const std::size_t count = std::max<std::size_t>(1, tuner::simulated_device_names().size());
      std::vector<int> all(count);
      for (std::size_t i = 0; i < count; ++i) all[i] = static_cast<int>(i);
      return all;
    }
    const auto status = driver_status();
    if (!status.available) throw Error(ErrorKind::driver, 0, status.reason.empty() ? "no CUDA device" : status.reason);
    std::vector<int> all(static_cast<std::size_t>(status.device_count));
    for (int i = 0; i < status.device_count; ++i) all[static_cast<std::size_t>(i)] = i;
    return all;
  }
  const auto bad = [&](const std::string& why) {
    return Error(ErrorKind::usage, 0, fmt::format("--devices '{}': {} (give all, or ordinals such as 0,1,3)", text, why));
  };
  std::vector<int> ordinals;
  std::size_t begin = 0;
  for (;;) {
    const std::size_t comma = text.find(',', begin);
    const std::string item = text.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
    int ordinal = -1;
    const auto [end, error] = std::from_chars(item.data(), item.data() + item.size(), ordinal);
    if (item.empty() || error != std::errc() || end != item.data() + item.size() || ordinal < 0) {
      throw bad(fmt::format("'{}' is not a device ordinal", item));
    }
    ordinals.push_back(ordinal);
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  return ordinals;
}

SweepSummary sweep(const std::vector<Problem>& requested, const SweepOptions& options) {
  const auto began = Clock::now();
  std::vector<Problem> problems = requested;
  for (std::size_t i = 0; i < problems.size(); ++i) {
    tuner::normalize_problem(problems[i], fmt::format("problem {} ({})", i, problems[i].kernel));
  }
  tuner::find_strategy(options.tune.strategy);
  const std::vector<int> ordinals = options.devices.empty() ? std::vector<int>{options.tune.device} : options.devices;
  for (std::size_t i = 0; i < ordinals.size(); ++i) {
    if (std::count(ordinals.begin(), ordinals.begin() + static_cast<std::ptrdiff_t>(i), ordinals[i]) == 1) {
      detail::logger().warn("device {} has several workers: their candidates run at once and disturb each "
                            "other's timings (use this to test sweeps, not to tune)", ordinals[i]);
    }
  }

  // The workers open their devices before the cache is touched, so a machine without a GPU gets
  // the driver's reason and no empty database. They start in parallel: a CUDA context takes
  // seconds to create.
  std::vector<std::unique_ptr<tuner::Session>> sessions;
  {
    std::vector<std::future<std::unique_ptr<tuner::Session>>> opening;
    for (int ordinal : ordinals) {
      opening.push_back(std::async(std::launch::async, [&options, ordinal] {
        TuneOptions tune = options.tune;
        tune.device = ordinal;
        return std::make_unique<tuner::Session>(tune);
      }));
    }
    std::exception_ptr failure;
    for (auto& session : opening) {
      try {
        sessions.push_back(session.get());
      } catch (...) {
        if (!failure) failure = std::current_exception();
      }
    }
    if (failure) std::rethrow_exception(failure);
  }

  SweepRun run(problems, options, began);
  {
    cache::Store store(options.db_path.empty() ? cache::default_path() : std::filesystem::path(options.db_path));
    run.db_path = store.path().string();
    run.summary.db_path = run.db_path;
    // Devices of one fingerprint share a queue: a problem tuned on one is done for all of them.
    std::vector<std::size_t> all(problems.size());
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
    std::set<std::string> groups;
    for (std::size_t slot = 0; slot < sessions.size(); ++slot) {
      const DeviceInfo& device = sessions[slot]->device();
      const std::string key = device.fingerprint();
      run.summary.devices.push_back({device.ordinal, device.name, key, 0, 0, 0, 0});
      const std::string group = options.per_device ? worker_group(slot) : key;
      if (groups.insert(group).second) run.queue.add_group(group, all);
      if (options.per_device && !run.had_winner.count(key)) {
        auto& had = run.had_winner[key];
        for (const auto& problem : problems) had.push_back(tuner::Recording(store, device, problem).winner().has_value());
      }
    }
    run.total = groups.size() * problems.size();
  }

  std::vector<std::thread> threads;
  run.running = sessions.size();
  for (std::size_t slot = 0; slot < sessions.size(); ++slot) {
    threads.emplace_back([&run, &sessions, &options, slot] {
      tuner::Session& session = *sessions[slot];
      const std::string group = options.per_device ? worker_group(slot) : session.device().fingerprint();
      try {
        sweep_device(run, session, group, slot);
      } catch (const tuner::Interrupted& e) {
        // Stopped from outside: the others stop too; what they committed stays.
        std::lock_guard lock(run.mutex);
        if (run.interruption.empty()) run.interruption = e.message();
      } catch (...) {
        std::lock_guard lock(run.mutex);
        if (!run.failure) run.failure = std::current_exception();
      }
      std::lock_guard lock(run.mutex);
      --run.running;
      run.done.notify_all();
    });
  }
  {
    std::unique_lock lock(run.mutex);
    bool stopping = false;
    while (run.running > 0) {
      run.done.wait_for(lock, std::chrono::milliseconds(50));
      if (stopping) continue;
      const bool asked = options.stop_requested && options.stop_requested();
      if (asked || run.failure || !run.interruption.empty()) {
        stopping = true;
        if (asked && run.interruption.empty()) run.interruption = "stop requested";
        run.queue.stop();
        for (auto& session : sessions) session->interrupt();
      }
    }
  }
  for (auto& thread : threads) thread.join();
  if (run.failure) std::rethrow_exception(run.failure);
  run.summary.interrupted = !run.interruption.empty();
  for (std::size_t i : run.not_started) run.summary.not_started.push_back(problems[i]);
  std::stable_sort(run.summary.failures.begin(), run.summary.failures.end(),
                   [](const SweepFailure& a, const SweepFailure& b) { return a.index < b.index; });
  run.summary.wall_seconds = seconds_since(began);
  return run.summary;
}

}  // namespace gmjit
