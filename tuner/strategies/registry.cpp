// The strategies by name. Adding one takes its file in tuner/strategies/ (the build globs them),
// defining NAME_strategy(), its line in the list below, and its test. The list is here, not in
// each strategy's file, because the tests link the tuner as a static archive, whose linker keeps
// only the object files something refers to.
#include <algorithm>

#include "tuner/names.hpp"
#include "tuner/strategies/searcher.hpp"

#define GMJIT_STRATEGIES(X) \
  X(exhaustive)             \
  X(random)                 \
  X(model)                  \
  X(transfer)               \
  X(climb)                  \
  X(evolve)                 \
  X(surrogate)

namespace gmjit::tuner {

#define GMJIT_DECLARE_STRATEGY(name) StrategyInfo name##_strategy();
GMJIT_STRATEGIES(GMJIT_DECLARE_STRATEGY)
#undef GMJIT_DECLARE_STRATEGY

const std::vector<StrategyInfo>& strategies() {
#define GMJIT_STRATEGY_ENTRY(name) name##_strategy(),
  static const std::vector<StrategyInfo> all{GMJIT_STRATEGIES(GMJIT_STRATEGY_ENTRY)};
#undef GMJIT_STRATEGY_ENTRY
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
