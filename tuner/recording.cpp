#include "tuner/recording.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>
#include <map>

#include "cache/binaries.hpp"
#include "cache/launch_index.hpp"
#include "cache/keys.hpp"
#include "codegen/compiler.hpp"
#include "templates/registry.hpp"

namespace gmjit::tuner {
namespace {

std::string to_json_text(const std::map<std::string, std::int64_t>& values) { return nlohmann::json(values).dump(); }

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

Recording::Recording(cache::Store& store, const DeviceInfo& device, const Problem& problem)
    : store_(store), tuned_(problem), arch_(device.arch) {
  const auto& kernel = templates::find_kernel(problem.kernel);
  const std::string template_hash = templates::template_hash(kernel.header);
  device_ = {device.fingerprint(), device.name, device.arch, device.to_json()};
  problem_ = {cache::problem_key(problem.kernel, template_hash, problem.dtype, cache::kRowMajor, problem.shape),
              problem.kernel,
              template_hash,
              problem.dtype,
              cache::kRowMajor,
              to_json_text(problem.shape)};
}

std::optional<cache::WinnerRecord> Recording::winner() { return store_.find_winner(device_.key, problem_.key); }

void Recording::start_from(TuneOptions& options, const std::optional<cache::WinnerRecord>& winner, bool resume) {
  if (winner) {
    options.incumbent = nlohmann::json::parse(winner->config_json).get<Config>();
  } else if (resume) {
    options.prior_trials = recorded_trials(store_, device_.key, problem_.key);
  }
}

TuneReport Recording::tune(Session& session, TuneOptions options) {
  options.on_trial = [this, notify = std::move(options.on_trial)](const TrialReport& trial) {
    if (!trial.resumed) {
      store_.record_tuning(device_, problem_, {trial_record(trial)}, std::nullopt, GMJIT_VERSION);
    }
    if (notify) notify(trial);
  };
  const TuneReport report = session.tune(tuned_, options);
  if (report.winner) {
    const TrialReport& best = report.trials[*report.winner];
    // The winner is recorded with the numbers of its final, interleaved timing.
    store_.record_tuning(device_, problem_, {trial_record(best)}, 0, GMJIT_VERSION, report.trials.size());
    // The winner's cubin goes to the binary cache, so a later process launches it without NVRTC.
    const auto source = codegen::specialize(templates::find_kernel(tuned_.kernel), tuned_.shape, tuned_.dtype,
                                            best.config);
    cache::store_binary(store_, *codegen::shared_compiler().compile(source, arch_).module);
    cache::try_publish_launch_index(store_);
  }
  return report;
}

void Recording::record_failure(const std::string& reason) {
  store_.record_problem_failure(device_, problem_, reason, GMJIT_VERSION);
}

}  // namespace gmjit::tuner
