// climb: learns from its measurements. The model's cheapest few first; then, from the fastest
// configurations measured so far, untried neighbours: one parameter moved to the nearest value
// along its axis that gives a valid candidate. A neighbour that continues the move which made the
// fastest configuration comes first (a climb keeps its direction while it gains), the others
// cheapest estimate first; the model's order again once the fastest have no untried neighbour.
// A tile space is smooth enough along each parameter that the winner is usually some steps from
// the model's picks, where `model` would measure its whole ranking first.
#include <algorithm>
#include <iterator>
#include <map>
#include <optional>
#include <set>

#include "tuner/strategies/searcher.hpp"

namespace gmjit::tuner {

namespace {

constexpr std::size_t kSeeds = 8;      // the model's picks measured before climbing
constexpr std::size_t kIncumbents = 3;  // the fastest whose neighbours are tried

class ClimbSearcher : public Searcher {
 public:
  explicit ClimbSearcher(const SearchSpace& space)
      : candidates_(space.candidates),
        model_order_(cheapest_first(space)),
        handed_(space.candidates.size(), false),
        via_(space.candidates.size()) {
    for (std::size_t i = 0; i < candidates_.size(); ++i) {
      by_config_.emplace(candidates_[i], i);
      for (const auto& [name, value] : candidates_[i]) axes_[name].insert(value);
      estimates_.push_back(space.estimate_ms ? space.estimate_ms(candidates_[i]) : 0.0);
    }
  }

  std::vector<std::size_t> ask(std::size_t count) override {
    std::vector<std::size_t> out;
    while (out.size() < count) {
      std::optional<std::size_t> next;
      if (seeded_ < std::min(kSeeds, candidates_.size())) {
        next = next_in_model_order();
        ++seeded_;
      } else if (auto neighbour = best_neighbour()) {
        next = neighbour->first;
        via_[*next] = neighbour->second;
      } else if (outstanding_ == 0) {
        next = next_in_model_order();  // nothing to climb from yet, or every neighbour tried
      }
      if (!next) break;  // wait for the outstanding results, or nothing is left
      handed_[*next] = true;
      ++outstanding_;
      out.push_back(*next);
    }
    return out;
  }

  void tell(std::size_t candidate, const TrialReport& trial) override {
    if (outstanding_ > 0) --outstanding_;
    if (trial.status == TrialStatus::ok && trial.median_ms > 0) measured_.emplace(trial.median_ms, candidate);
  }

 private:
  std::optional<std::size_t> next_in_model_order() {
    while (model_next_ < model_order_.size() && handed_[model_order_[model_next_]]) ++model_next_;
    if (model_next_ == model_order_.size()) return std::nullopt;
    return model_order_[model_next_];
  }

  struct Move {
    std::string parameter;
    int direction = 0;  // +1 toward larger values, -1 toward smaller
  };

  // The nearest value of `parameter` in `direction` that makes a candidate with the others kept.
  std::optional<std::size_t> step(std::size_t of, const std::string& parameter, int direction) const {
    const Config& base = candidates_[of];
    const auto& values = axes_.at(parameter);
    const auto at = values.find(base.at(parameter));
    if (direction > 0) {
      for (auto it = std::next(at); it != values.end(); ++it) {
        if (auto index = candidate_with(base, parameter, *it)) return index;
      }
    } else {
      for (auto it = std::make_reverse_iterator(at); it != values.rend(); ++it) {
        if (auto index = candidate_with(base, parameter, *it)) return index;
      }
    }
    return std::nullopt;
  }

  std::optional<std::size_t> candidate_with(Config config, const std::string& name, std::int64_t value) const {
    config[name] = value;
    const auto it = by_config_.find(config);
    if (it == by_config_.end()) return std::nullopt;
    return it->second;
  }

  // The next neighbour to try, from the fastest configuration that has an untried one among the
  // fastest few: the continuation of the move that reached it, else its cheapest by estimate.
  // While results are outstanding only the fastest's: the others' would climb from what the
  // pending results may already have beaten.
  std::optional<std::pair<std::size_t, Move>> best_neighbour() const {
    std::size_t rank = 0;
    const std::size_t incumbents = outstanding_ > 0 ? 1 : kIncumbents;
    for (const auto& [ms, index] : measured_) {
      if (rank++ == incumbents) break;
      if (const Move& via = via_[index]; via.direction != 0) {
        if (auto next = step(index, via.parameter, via.direction); next && !handed_[*next]) {
          return std::make_pair(*next, via);
        }
      }
      std::optional<std::pair<std::size_t, Move>> best;
      for (const auto& [parameter, value] : candidates_[index]) {
        for (int direction : {+1, -1}) {
          const auto n = step(index, parameter, direction);
          if (!n || handed_[*n]) continue;
          if (!best || estimates_[*n] < estimates_[best->first] ||
              (estimates_[*n] == estimates_[best->first] && *n < best->first)) {
            best = std::make_pair(*n, Move{parameter, direction});
          }
        }
      }
      if (best) return best;
    }
    return std::nullopt;
  }

  std::vector<Config> candidates_;
  std::vector<std::size_t> model_order_;
  std::vector<bool> handed_;
  std::vector<Move> via_;  // the move that proposed each candidate (none for the model's)
  std::map<Config, std::size_t> by_config_;
  std::map<std::string, std::set<std::int64_t>> axes_;
  std::vector<double> estimates_;
  std::multimap<double, std::size_t> measured_;  // ok trials, fastest first
  std::size_t model_next_ = 0;
  std::size_t seeded_ = 0;
  std::size_t outstanding_ = 0;
};

}  // namespace

StrategyInfo climb_strategy() {
  return {"climb",
          "learns from each measurement: the model's best 8, then the untried neighbours (one parameter a step) of "
          "the fastest so far, cheapest estimate first",
          false, [](const SearchSpace& space) { return std::make_unique<ClimbSearcher>(space); }};
}

}  // namespace gmjit::tuner
