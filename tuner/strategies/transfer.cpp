// transfer: the winners of the three nearest tuned shapes of the same kernel and dtype on this
// device (log2 distance, from the cache) first, then the rest as `model` ranks them, with its
// successive halving. A new shape near tuned ones then finds its winner in a few evaluations;
// without a cache or a near shape it is `model`.
#include <algorithm>

#include "tuner/strategies/searcher.hpp"

namespace gmjit::tuner {

namespace {

std::vector<std::size_t> nearest_winners_first(const SearchSpace& space) {
  std::vector<std::size_t> order = nearest_winner_indices(space);
  const std::size_t seeded = order.size();
  for (std::size_t index : cheapest_first(space)) {
    if (std::find(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(seeded), index) ==
        order.begin() + static_cast<std::ptrdiff_t>(seeded)) {
      order.push_back(index);
    }
  }
  return order;
}

}  // namespace

StrategyInfo transfer_strategy() {
  return {"transfer", "the winners of the nearest cached shapes first, then as model", true,
          [](const SearchSpace& space) { return std::make_unique<OrderedSearcher>(nearest_winners_first(space)); }};
}

}  // namespace gmjit::tuner
