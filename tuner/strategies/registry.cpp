// The strategies by name. Adding one takes its file in tuner/strategies/ (the build globs them),
// its declaration and its entry in the table below, and its test.
#include <algorithm>

#include "tuner/names.hpp"
#include "tuner/strategies/searcher.hpp"

namespace gmjit::tuner {

// Each defined in tuner/strategies/NAME.cpp.
StrategyInfo exhaustive_strategy();
StrategyInfo random_strategy();
StrategyInfo model_strategy();
StrategyInfo transfer_strategy();

const std::vector<StrategyInfo>& strategies() {
  static const std::vector<StrategyInfo> all{
      exhaustive_strategy(),
      random_strategy(),
      model_strategy(),
      transfer_strategy(),
  };
  return all;
}

const StrategyInfo& find_strategy(const std::string& name) {
  const auto& all = strategies();
  const auto it = std::find_if(all.begin(), all.end(), [&](const StrategyInfo& s) { return s.name == name; });
  if (it == all.end()) throw unknown_name("strategy", "strategies", name, strategy_names());
  return *it;
}

}  // namespace gmjit::tuner

namespace gmjit {

std::vector<std::string> strategy_names() {
  std::vector<std::string> names;
  for (const auto& s : tuner::strategies()) names.push_back(s.name);
  return names;
}

std::string strategy_summary(const std::string& name) { return tuner::find_strategy(name).summary; }

}  // namespace gmjit
