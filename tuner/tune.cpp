#include "gmjit/tune.hpp"

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

}  // namespace gmjit
