#include "tuner/stop.hpp"

#include <fmt/format.h>

#include <utility>

namespace gmjit::tuner {

StopCondition::StopCondition(std::string what, Test test) { terms_.push_back({std::move(what), std::move(test)}); }

StopCondition StopCondition::evaluations(std::size_t count) {
  if (count == 0) return {};
  return {fmt::format("{} evaluations", count), [count](const SearchProgress& p) { return p.evaluations >= count; }};
}

StopCondition StopCondition::seconds(double limit) {
  if (!(limit > 0)) return {};
  return {fmt::format("{:g} s", limit), [limit](const SearchProgress& p) { return p.seconds() >= limit; }};
}

StopCondition StopCondition::deadline(Clock::time_point when) {
  return {"the deadline", [when](const SearchProgress& p) { return p.now >= when; }};
}

StopCondition StopCondition::operator|(const StopCondition& other) const {
  StopCondition both = *this;
  both.terms_.insert(both.terms_.end(), other.terms_.begin(), other.terms_.end());
  return both;
}

bool StopCondition::reached(const SearchProgress& progress) const {
  for (const auto& term : terms_) {
    if (term.test(progress)) return true;
  }
  return false;
}

std::string StopCondition::why(const SearchProgress& progress) const {
  std::string out;
  for (const auto& term : terms_) {
    if (term.test(progress)) out += (out.empty() ? "" : " and ") + term.what;
  }
  return out;
}

}  // namespace gmjit::tuner
