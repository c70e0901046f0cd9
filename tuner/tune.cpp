#include <fmt/format.h>

#include "gmjit/error.hpp"
#include "gmjit/tune.hpp"
#include "templates/registry.hpp"
#include "tuner/session.hpp"

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

TrialStatus parse_trial_status(const std::string& name) {
  for (auto status : {TrialStatus::ok, TrialStatus::compile_failed, TrialStatus::invalid, TrialStatus::launch_failed,
                      TrialStatus::crashed, TrialStatus::timeout, TrialStatus::wrong_result}) {
    if (name == to_string(status)) return status;
  }
  throw Error(ErrorKind::usage, 0, fmt::format("unknown trial status '{}'", name));
}

const char* to_string(Strategy strategy) {
  switch (strategy) {
    case Strategy::exhaustive: return "exhaustive";
    case Strategy::random: return "random";
    case Strategy::model: return "model";
    case Strategy::transfer: return "transfer";
  }
  return "unknown";
}

Strategy parse_strategy(const std::string& name) {
  for (auto strategy : {Strategy::exhaustive, Strategy::random, Strategy::model, Strategy::transfer}) {
    if (name == to_string(strategy)) return strategy;
  }
  throw Error(ErrorKind::usage, 0,
              fmt::format("unknown strategy '{}' (strategies: exhaustive, random, model, transfer)", name));
}

TuneReport tune(const Problem& problem, const TuneOptions& options) {
  // A bad problem is a usage error before any worker starts.
  const auto& kernel = templates::find_kernel(problem.kernel);
  templates::validate_shape(kernel, problem.shape);
  if (!problem.dtype.empty()) templates::validate_dtype(kernel, problem.dtype);
  tuner::Session session(options);
  return session.tune(problem, options);
}

}  // namespace gmjit
