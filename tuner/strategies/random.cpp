// random: the candidates in a shuffle seeded by TuneOptions::seed, each timed in full once. Under
// a budget it samples the whole space evenly instead of one corner of the domain order; the same
// seed gives the same order on every platform (std::mt19937_64 is specified bit for bit).
#include <algorithm>
#include <numeric>
#include <random>

#include "tuner/strategies/searcher.hpp"

namespace gmjit::tuner {

StrategyInfo random_strategy() {
  return {"random", "a seeded shuffle of the valid configurations", false, [](const SearchSpace& space) {
            std::vector<std::size_t> order(space.candidates.size());
            std::iota(order.begin(), order.end(), 0);
            std::mt19937_64 rng(space.seed);
            std::shuffle(order.begin(), order.end(), rng);
            return std::make_unique<OrderedSearcher>(std::move(order));
          }};
}

}  // namespace gmjit::tuner
