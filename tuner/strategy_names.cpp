// The names of the search strategies, as gmtune and the cache spell them.
// Stand-in until tuner/tune.cpp (the lead's rewrite) defines these two; drop this file then.
#include <fmt/format.h>

#include "gmjit/error.hpp"
#include "gmjit/tune.hpp"

namespace gmjit {
namespace {

constexpr Strategy kStrategies[] = {Strategy::exhaustive, Strategy::random, Strategy::model, Strategy::transfer};

}  // namespace

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
  std::string names;
  for (const auto strategy : kStrategies) {
    if (name == to_string(strategy)) return strategy;
    names += (names.empty() ? "" : ", ") + std::string(to_string(strategy));
  }
  throw Error(ErrorKind::usage, 0, fmt::format("'{}': not a strategy ({})", name, names));
}

}  // namespace gmjit
