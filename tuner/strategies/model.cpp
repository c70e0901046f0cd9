// model (the default): the candidates ranked by the analytic estimate of tuner/search.hpp (bytes
// moved, flops, occupancy, waves over the SMs), cheapest first, with successive halving: each is
// timed briefly, then the best quarter in full. A budget then spends itself on the likely
// winners; the model does not price per-row reductions, so the row kernels are best swept
// without one (README, How tuning works).
#include <algorithm>
#include <numeric>

#include "tuner/strategies/searcher.hpp"

namespace gmjit::tuner {

std::vector<std::size_t> cheapest_first(const SearchSpace& space) {
  std::vector<double> estimates;
  for (const auto& config : space.candidates) estimates.push_back(space.estimate_ms(config));
  return cheapest_first(estimates);
}

std::vector<std::size_t> cheapest_first(const std::vector<double>& estimates) {
  std::vector<std::size_t> order(estimates.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return estimates[a] < estimates[b]; });
  return order;
}

StrategyInfo model_strategy() {
  return {"model", "ranked by an analytic estimate, timed briefly, the best quarter again in full", true,
          [](const SearchSpace& space) { return std::make_unique<OrderedSearcher>(cheapest_first(space)); }};
}

}  // namespace gmjit::tuner
