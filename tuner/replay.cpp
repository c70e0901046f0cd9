#include "tuner/replay.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <map>

#include "gmjit/error.hpp"

namespace gmjit::tuner {

ReplayResult replay(const StrategyInfo& strategy, const SearchSpace& space, const std::vector<TrialReport>& recorded,
                    const ReplayOptions& options) {
  if (recorded.size() != space.candidates.size()) {
    throw Error(ErrorKind::usage, 0,
                fmt::format("replay: {} recorded trials for {} candidates", recorded.size(), space.candidates.size()));
  }
  const auto searcher = strategy.make(space);
  const std::size_t ahead = std::max<std::size_t>(1, options.ahead);
  std::vector<bool> handed(space.candidates.size(), false);
  std::deque<std::size_t> asked;
  // The session's loop (tuner/session.cpp, search): top up the candidates asked for, take the
  // first, top up again so the pool compiles while it is measured, then tell its result.
  auto ask_ahead = [&] {
    if (asked.size() >= ahead) return;
    for (std::size_t k : searcher->ask(ahead - asked.size())) {
      if (k >= handed.size() || handed[k]) {
        throw Error(ErrorKind::usage, 0,
                    fmt::format("replay: strategy {} handed out candidate {} {}", strategy.name, k,
                                k >= handed.size() ? "of none" : "twice"));
      }
      handed[k] = true;
      asked.push_back(k);
    }
  };
  ReplayResult result;
  double best = 0;
  for (;;) {
    if (options.max_evaluations > 0 && result.order.size() >= options.max_evaluations) break;
    ask_ahead();
    if (asked.empty()) break;
    const std::size_t next = asked.front();
    asked.pop_front();
    ask_ahead();
    const TrialReport& trial = recorded[next];
    searcher->tell(next, trial);
    if (trial.status == TrialStatus::ok && trial.median_ms > 0 && (best == 0 || trial.median_ms < best)) {
      best = trial.median_ms;
    }
    result.order.push_back(next);
    result.best_ms.push_back(best);
  }
  return result;
}

std::vector<TrialReport> recorded_for(const SearchSpace& space, const std::vector<TrialReport>& trials) {
  std::map<Config, const TrialReport*> last;
  for (const auto& trial : trials) last[trial.config] = &trial;
  std::vector<TrialReport> recorded;
  recorded.reserve(space.candidates.size());
  for (const auto& config : space.candidates) {
    const auto it = last.find(config);
    if (it == last.end()) {
      throw Error(ErrorKind::usage, 0, fmt::format("replay: no recorded trial of {}", format_assignments(config)));
    }
    recorded.push_back(*it->second);
  }
  return recorded;
}

double best_recorded_ms(const std::vector<TrialReport>& recorded) {
  double best = 0;
  for (const auto& trial : recorded) {
    if (trial.status == TrialStatus::ok && trial.median_ms > 0 && (best == 0 || trial.median_ms < best)) {
      best = trial.median_ms;
    }
  }
  return best;
}

std::optional<std::size_t> evaluations_to_within(const ReplayResult& result, double reference_ms, double percent) {
  for (std::size_t e = 0; e < result.best_ms.size(); ++e) {
    if (result.best_ms[e] > 0 && result.best_ms[e] <= reference_ms * (1 + percent / 100)) return e + 1;
  }
  return std::nullopt;
}

}  // namespace gmjit::tuner
