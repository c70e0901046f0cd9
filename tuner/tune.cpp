#include "gmjit/tune.hpp"

#include <nlohmann/json.hpp>

#include <filesystem>

#include "gmjit/error.hpp"
#include "cache/store.hpp"
#include "templates/registry.hpp"
#include "tuner/names.hpp"
#include "tuner/recording.hpp"
#include "tuner/session.hpp"
#include "tuner/strategies/searcher.hpp"

namespace gmjit {
namespace {

// The names are the cache's status column: renaming one orphans recorded trials.
constexpr tuner::EnumNames<TrialStatus, 7> kTrialStatuses{
    "trial status", "statuses",
    {{TrialStatus::ok, "ok"}, {TrialStatus::compile_failed, "compile_failed"}, {TrialStatus::invalid, "invalid"},
     {TrialStatus::launch_failed, "launch_failed"}, {TrialStatus::crashed, "crashed"},
     {TrialStatus::timeout, "timeout"}, {TrialStatus::wrong_result, "wrong_result"}}};

}  // namespace

const char* to_string(TrialStatus status) { return kTrialStatuses.name(status); }

TrialStatus parse_trial_status(const std::string& name) { return kTrialStatuses.parse(name); }

TuneReport tune(const Problem& problem, const TuneOptions& options) {
  // A bad problem or strategy is a usage error before any worker starts.
  Problem normalized = problem;
  const auto checked = templates::normalize_problem(problem.kernel, problem.shape, problem.dtype);
  normalized.dtype = checked.dtype;
  normalized.shape = checked.shape;
  tuner::find_strategy(options.strategy);
  tuner::Session session(options);
  if (!options.record) return session.tune(normalized, options);
  // Opened once the worker has the device, so a machine without a GPU gets no empty cache.
  cache::Store store(options.db_path.empty() ? cache::default_path() : std::filesystem::path(options.db_path));
  TuneOptions run = options;
  run.db_path = store.path().string();
  tuner::Recording recording(store, session.device(), normalized);
  recording.start_from(run, recording.winner(), /*resume=*/true);
  return recording.tune(session, run);
}

namespace {

nlohmann::json optional_index(const std::optional<std::size_t>& index) {
  return index ? nlohmann::json(*index) : nlohmann::json();
}

}  // namespace

std::string tune_report_json(const TuneReport& report) {
  nlohmann::json trials = nlohmann::json::array();
  for (const auto& t : report.trials) {
    const auto& r = t.resources;
    trials.push_back({{"config", t.config},
                      {"status", to_string(t.status)},
                      {"median_ms", t.median_ms},
                      {"spread", t.spread},
                      {"ci_percent", t.ci_percent},
                      {"repetitions", t.repetitions},
                      {"batch", t.batch},
                      {"verify_error", t.verify_error},
                      {"compile_ms", t.compile_ms},
                      {"binary_cached", t.binary_cached},
                      {"resumed", t.resumed},
                      {"resources",
                       {{"registers", r.registers},
                        {"barriers", r.barriers},
                        {"stack_bytes", r.stack_bytes},
                        {"spill_store_bytes", r.spill_store_bytes},
                        {"spill_load_bytes", r.spill_load_bytes},
                        {"shared_bytes", r.shared_bytes},
                        {"constant_bytes", r.constant_bytes},
                        {"spills_known", r.spills_known}}},
                      {"detail", t.detail}});
  }
  nlohmann::json curve = nlohmann::json::array();
  for (const auto& point : report.curve) {
    curve.push_back({{"evaluations", point.evaluations}, {"seconds", point.seconds}, {"best_ms", point.best_ms}});
  }
  const nlohmann::json out = {{"kernel", report.problem.kernel},
              {"dtype", report.problem.dtype},
              {"shape", report.problem.shape},
              {"label", report.problem.label},
              {"device", report.device_name},
              {"device_key", report.device_key},
              {"strategy", report.strategy},
              {"winner", optional_index(report.winner)},
              {"runner_up", optional_index(report.runner_up)},
              {"valid_candidates", report.valid_candidates},
              {"evaluations", report.evaluations},
              {"worker_restarts", report.worker_restarts},
              {"compiled_early", report.compiled_early},
              {"compiled_early_asked", report.compiled_early_asked},
              {"wall_seconds", report.wall_seconds},
              {"curve", curve},
              {"trials", trials}};
  return out.dump(2);
}

}  // namespace gmjit
