#include <fmt/format.h>
#include <nlohmann/json.hpp>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>

#include "cache/store.hpp"
#include "codegen/compiler.hpp"
#include "gmjit/device.hpp"
#include "gmjit/tune.hpp"
#include "lib/core/device.hpp"
#include "lib/core/log.hpp"
#include "templates/registry.hpp"
#include "tuner/binaries.hpp"
#include "tuner/keys.hpp"
#include "tuner/session.hpp"

namespace gmjit {
namespace {

constexpr const char* kLibraryVersion = "0.1.0";
constexpr const char* kLayout = tuner::kRowMajor;

std::string to_json_text(const std::map<std::string, std::int64_t>& values) {
  return nlohmann::json(values).dump();
}

void check_problem(const Problem& problem, const std::string& where) {
  try {
    const auto& kernel = templates::find_kernel(problem.kernel);
    templates::validate_dtype(kernel, problem.dtype);
    templates::validate_shape(kernel, problem.shape);
  } catch (const Error& e) {
    throw Error(ErrorKind::usage, 0, where + ": " + e.message());
  }
}

}  // namespace

namespace tuner {

std::string problem_key(const std::string& kernel, const std::string& template_hash, const std::string& dtype,
                        const std::string& layout, const Shape& shape) {
  const std::string canonical =
      fmt::format("{}|{}|{}|{}|{}", kernel, template_hash, dtype, layout, format_assignments(shape));
  return fmt::format("{:016x}", XXH3_64bits(canonical.data(), canonical.size()));
}

}  // namespace tuner

std::string default_cache_path() { return cache::default_path().string(); }

namespace {

cache::TrialRecord trial_record(const TrialReport& trial) {
  cache::TrialRecord record;
  record.config_json = to_json_text(trial.config);
  record.status = to_string(trial.status);
  record.median_ms = trial.median_ms;
  record.spread = trial.spread;
  record.repetitions = trial.repetitions;
  record.verify_error = std::isfinite(trial.verify_error) ? trial.verify_error : -1.0;
  record.compile_ms = trial.compile_ms;
  record.registers = trial.resources.registers;
  record.spill_bytes = trial.resources.spill_store_bytes;
  record.shared_bytes = trial.resources.shared_bytes;
  record.detail = trial.detail;
  return record;
}

// The trials an interrupted run recorded, latest first per configuration, for the tuner to
// skip. A configuration recorded twice (re-timed) keeps its latest measurement.
std::vector<TrialReport> recorded_trials(cache::Store& store, const std::string& device_key,
                                         const std::string& problem_key) {
  std::map<Config, TrialReport> latest;
  for (const auto& record : store.trials(device_key, problem_key)) {
    TrialReport trial;
    trial.config = nlohmann::json::parse(record.config_json).get<Config>();
    trial.status = parse_trial_status(record.status);
    trial.median_ms = record.median_ms;
    trial.spread = record.spread;
    trial.repetitions = record.repetitions;
    trial.verify_error = record.verify_error < 0 ? std::numeric_limits<double>::infinity() : record.verify_error;
    trial.compile_ms = record.compile_ms;
    trial.resources.registers = record.registers;
    trial.resources.spill_store_bytes = record.spill_bytes;
    trial.resources.shared_bytes = record.shared_bytes;
    trial.detail = record.detail;
    latest[trial.config] = std::move(trial);
  }
  std::vector<TrialReport> trials;
  for (auto& [config, trial] : latest) trials.push_back(std::move(trial));
  return trials;
}

}  // namespace

SweepSummary sweep(const std::vector<Problem>& requested, const SweepOptions& options) {
  std::vector<Problem> problems = requested;
  for (std::size_t i = 0; i < problems.size(); ++i) {
    if (problems[i].dtype.empty()) problems[i].dtype = templates::find_kernel(problems[i].kernel).dtypes.front();
    check_problem(problems[i], fmt::format("problem {} ({})", i, problems[i].kernel));
  }
  SweepSummary summary;
  // The worker opens the device before the cache is touched, so a machine without a GPU gets
  // the driver's reason and no empty database.
  tuner::Session session(options.tune);
  const DeviceInfo& device = session.device();
  cache::Store store(options.db_path.empty() ? cache::default_path() : std::filesystem::path(options.db_path));
  summary.db_path = store.path().string();
  const cache::DeviceRecord device_record{device.fingerprint(), device.name, device.arch, device.to_json()};

  for (std::size_t i = 0; i < problems.size(); ++i) {
    const Problem& problem = problems[i];
    const auto& kernel = templates::find_kernel(problem.kernel);
    const std::string template_hash = templates::template_hash(kernel.header);
    const cache::ProblemRecord problem_record{
        tuner::problem_key(problem.kernel, template_hash, problem.dtype, kLayout, problem.shape), problem.kernel,
        template_hash, problem.dtype, kLayout, to_json_text(problem.shape)};
    const auto existing = store.find_winner(device_record.key, problem_record.key);
    if (!options.retune && existing) {
      ++summary.skipped;
      if (options.on_progress) options.on_progress(i, problems.size(), problem, "cached");
      continue;
    }
    TuneOptions tune_options = options.tune;
    tune_options.db_path = summary.db_path;
    if (existing) {
      tune_options.incumbent = nlohmann::json::parse(existing->config_json).get<Config>();
    } else {
      // A problem an interrupted sweep left half-tuned resumes from the trials it recorded.
      tune_options.prior_trials = recorded_trials(store, device_record.key, problem_record.key);
    }
    const std::size_t resumed = tune_options.prior_trials.size();
    if (options.on_progress) {
      options.on_progress(i, problems.size(), problem,
                          resumed ? fmt::format("tuning (resuming after {} recorded trials)", resumed) : "tuning");
    }
    // Each trial is committed as it ends, so a kill loses at most the candidate being timed.
    tune_options.on_trial = [&](const TrialReport& trial) {
      if (!trial.resumed) store.record_tuning(device_record, problem_record, {trial_record(trial)}, std::nullopt, kLibraryVersion);
      if (options.tune.on_trial) options.tune.on_trial(trial);
    };
    const TuneReport report = session.tune(problem, tune_options);
    if (report.winner) {
      // The winner is recorded with the numbers of its final, interleaved timing.
      store.record_tuning(device_record, problem_record, {trial_record(report.trials[*report.winner])}, 0,
                          kLibraryVersion, report.trials.size());
      // The winner's cubin goes to the binary cache, so a later process launches it without NVRTC.
      const auto source = codegen::specialize(kernel, problem.shape, problem.dtype, report.trials[*report.winner].config);
      tuner::store_binary(store, *codegen::shared_compiler().compile(source, device.arch).module);
      ++summary.tuned;
    } else {
      ++summary.failed;
    }
    if (options.on_progress) {
      options.on_progress(i, problems.size(), problem,
                          report.winner ? fmt::format("done {:.4f} ms", report.trials[*report.winner].median_ms)
                                        : std::string("no configuration verified"));
    }
  }
  return summary;
}

}  // namespace gmjit
