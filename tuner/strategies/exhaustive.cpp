// exhaustive: every candidate in domain order, each timed in full once. Slow on a large space,
// but it cannot miss the best configuration, and its result is the reference the other
// strategies are measured against (bench/bench_tuner.cpp efficiency).
#include <numeric>

#include "tuner/strategies/searcher.hpp"

namespace gmjit::tuner {

StrategyInfo exhaustive_strategy() {
  return {"exhaustive", "every valid configuration, in domain order", false, [](const SearchSpace& space) {
            std::vector<std::size_t> order(space.candidates.size());
            std::iota(order.begin(), order.end(), 0);
            return std::make_unique<OrderedSearcher>(std::move(order));
          }};
}

}  // namespace gmjit::tuner
