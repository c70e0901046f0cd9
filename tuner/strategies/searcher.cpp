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

}  // namespace gmjit::tuner
