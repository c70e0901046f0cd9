#include "tuner/strategies/searcher.hpp"

#include <algorithm>

namespace gmjit::tuner {

std::vector<std::size_t> OrderedSearcher::ask(std::size_t count) {
  const std::size_t end = std::min(order_.size(), next_ + count);
  std::vector<std::size_t> next(order_.begin() + static_cast<std::ptrdiff_t>(next_),
                                order_.begin() + static_cast<std::ptrdiff_t>(end));
  next_ = end;
  return next;
}

std::vector<std::size_t> nearest_winner_indices(const SearchSpace& space) {
  constexpr std::size_t kNearestShapes = 3;
  std::vector<std::size_t> indices;
  if (!space.nearest_winners) return indices;
  const auto& candidates = space.candidates;
  for (const auto& wanted : space.nearest_winners(kNearestShapes)) {
    const auto it = std::find(candidates.begin(), candidates.end(), wanted);
    if (it == candidates.end()) continue;
    const auto index = static_cast<std::size_t>(it - candidates.begin());
    if (std::find(indices.begin(), indices.end(), index) == indices.end()) indices.push_back(index);
  }
  return indices;
}

}  // namespace gmjit::tuner
