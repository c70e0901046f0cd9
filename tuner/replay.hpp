#pragma once
// A strategy replayed offline against recorded measurements: one long search (exhaustive, say)
// measured once on the device gives every candidate's trial, and each strategy is then driven
// through its ask/tell loop as the session drives it, told the recorded trial instead of a new
// measurement. Comparing strategies, or seeds of one, then costs no device time (bench_tuner
// search). What a replay cannot show is the cost of timing: every evaluation counts one, whether
// the session would have timed it briefly (successive halving) or in full.

#include <cstddef>
#include <optional>
#include <vector>

#include "gmjit/tune.hpp"
#include "tuner/strategies/searcher.hpp"

namespace gmjit::tuner {

struct ReplayOptions {
  // Candidates asked for ahead of the one told, as the session asks for its compile pool's
  // lookahead (twice its compile threads) before it measures the next; at least 1.
  std::size_t ahead = 2;
  // Evaluations after which the replay stops; 0: when the strategy hands out nothing more.
  std::size_t max_evaluations = 0;
};

struct ReplayResult {
  std::vector<std::size_t> order;  // the candidates told, in order
  // best_ms[e]: the fastest verified median among the first e + 1 told; 0 until one verified.
  std::vector<double> best_ms;
};

// Drives `strategy` over `space`, telling it recorded[i] for space.candidates[i]. Throws
// Error(usage) when there is not one recorded trial per candidate, and when the strategy breaks
// its contract (a candidate out of range or handed out twice).
ReplayResult replay(const StrategyInfo& strategy, const SearchSpace& space, const std::vector<TrialReport>& recorded,
                    const ReplayOptions& options = {});

// The trial of each candidate among `trials` (the last one of its configuration: a re-timed
// trial follows the first), in the order of space.candidates. Throws Error(usage) naming a
// candidate that has none.
std::vector<TrialReport> recorded_for(const SearchSpace& space, const std::vector<TrialReport>& trials);

// The fastest verified median among `recorded`; 0 when none verified.
double best_recorded_ms(const std::vector<TrialReport>& recorded);

// The number of evaluations after which the replay's best first came within `percent` of
// `reference_ms`; none when it never did.
std::optional<std::size_t> evaluations_to_within(const ReplayResult& result, double reference_ms, double percent);

}  // namespace gmjit::tuner
