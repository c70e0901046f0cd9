#pragma once
// When a search, or a sweep, stops starting work: after a number of evaluations, after some
// seconds, or at a point in time, and any union of those (KTT's StopCondition: count, duration,
// union). The session checks its conditions before each candidate and the sweep its deadline
// before each problem, so what has started always finishes.

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace gmjit::tuner {

using Clock = std::chrono::steady_clock;

// Where a search or sweep stands when a condition is asked.
struct SearchProgress {
  std::size_t evaluations = 0;
  Clock::time_point began;
  Clock::time_point now;
  double seconds() const { return std::chrono::duration<double>(now - began).count(); }
};

class StopCondition {
 public:
  using Test = std::function<bool(const SearchProgress&)>;

  // Never reached.
  StopCondition() = default;
  // `what` names it where a stop is reported, e.g. "40 evaluations".
  StopCondition(std::string what, Test test);

  // 0 means no limit, as in TuneOptions.
  static StopCondition evaluations(std::size_t count);
  static StopCondition seconds(double limit);
  // Reached once `when` has come, whenever the work began.
  static StopCondition deadline(Clock::time_point when);

  // Reached as soon as either is.
  StopCondition operator|(const StopCondition& other) const;

  bool reached(const SearchProgress& progress) const;
  // What was reached, "and"-joined; empty when nothing is.
  std::string why(const SearchProgress& progress) const;
  bool never() const { return terms_.empty(); }

 private:
  struct Term {
    std::string what;
    Test test;
  };
  std::vector<Term> terms_;
};

}  // namespace gmjit::tuner
