// evolve: an evolutionary search that learns from its measurements. The first population is the
// winners of the nearest tuned shapes, the model's cheapest few and some random candidates, so
// it starts from what the cache and the model know but is not trapped where the model is wrong.
// Then, steady state: each child has two parents, each the fastest of a small tournament in the
// population, and takes every parameter from either parent, then moves one or two of them a
// step along their axis; a child that is not a valid candidate is repaired to the nearest
// untried one within a short distance, or dropped. A tile space is smooth along each axis and
// its good regions are combinations of good values, which is what crossover and small steps
// search. The population is the fastest measured so far, but only two from any one region
// (clearing), so a second basin found by a random pick is searched too where pure descent
// (climb) stays in the first. When the population breeds nothing new, the model's order goes on.
//
// The session asks many candidates ahead so compiles overlap measuring (twice its compile
// threads); children bred from stale results teach nothing, so only a few are outstanding at a
// time and ask() hands out fewer while they are.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <map>
#include <optional>
#include <random>

#include "tuner/strategies/searcher.hpp"

namespace gmjit::tuner {

namespace {

// The model's cheapest in the first population, and random ones beside them against a misleading
// model. Replayed on 8 shapes an H100 recorded (tests/data/search_h100_recording.tar.xz), 4 and 8
// brought 6 within 2% in 10% of the evaluations, 8 and 4 brought 7: random picks found little in
// spaces of 600-2200 candidates (random alone: 1 of 8), the model's fifth to eighth more.
constexpr std::size_t kModelSeeds = 8;
constexpr std::size_t kRandomSeeds = 4;
constexpr std::size_t kPopulation = 12;     // the measured ones parents are drawn from
constexpr std::size_t kPerNiche = 2;        // of them within one niche radius of each other
constexpr std::size_t kTournament = 3;      // a parent is the fastest of this many drawn
constexpr std::size_t kMaxBredOutstanding = 6;  // children handed out before their parents' news
constexpr std::size_t kAttempts = 24;       // children bred per ask before the model's order
constexpr int kRepairRadius = 2;            // steps along the axes a repair may move a child
constexpr double kCrossover = 0.7;          // chance that a child mixes two distinct parents
constexpr double kSecondStep = 0.35;        // chance that a mutation moves a second parameter

class EvolveSearcher : public Searcher {
 public:
  explicit EvolveSearcher(const SearchSpace& space)
      : size_(space.candidates.size()),
        model_order_(space.estimate_ms ? cheapest_first(space) : domain_order(size_)),
        handed_(size_, false),
        bred_(size_, false),
        seeded_(size_, false),
        rng_(space.seed) {
    index_axes(space.candidates);
    seed_population(space);
  }

  std::vector<std::size_t> ask(std::size_t count) override {
    std::vector<std::size_t> out;
    while (out.size() < count) {
      std::optional<std::size_t> next = next_seed();
      if (!next && !measured_.empty()) {
        if (bred_outstanding_ >= kMaxBredOutstanding) break;  // wait for the children's results
        next = breed();
        if (next) {
          bred_[*next] = true;
          ++bred_outstanding_;
        }
      }
      // Nothing measured yet: wait for the first population's results, the parents to be. Once
      // all of them failed the model's order goes on at full pace.
      if (!next && measured_.empty() && seeds_told_ < seeds_handed_) break;
      if (!next) next = next_in_model_order();
      if (!next) break;  // every candidate handed out
      handed_[*next] = true;
      ++outstanding_;
      out.push_back(*next);
    }
    return out;
  }

  void tell(std::size_t candidate, const TrialReport& trial) override {
    if (outstanding_ > 0) --outstanding_;
    if (candidate < size_ && bred_[candidate] && bred_outstanding_ > 0) --bred_outstanding_;
    if (candidate < size_ && seeded_[candidate]) ++seeds_told_;
    // A failed trial is unfit: never a parent; it was handed out, so it is never tried again.
    if (trial.status != TrialStatus::ok || !(trial.median_ms > 0) || candidate >= size_) return;
    const auto at = std::lower_bound(measured_.begin(), measured_.end(), std::make_pair(trial.median_ms, candidate));
    measured_.insert(at, {trial.median_ms, candidate});
  }

 private:
  using Ranks = std::vector<int>;  // a candidate as its value's position along each varying axis

  static std::vector<std::size_t> domain_order(std::size_t n) {
    std::vector<std::size_t> order(n);
    for (std::size_t i = 0; i < n; ++i) order[i] = i;
    return order;
  }

  // The axes are the parameters that vary among the candidates (one that is the same everywhere
  // can be neither crossed nor stepped), each value's rank along its axis, and every candidate
  // as its ranks. A parameter missing from a configuration counts as one more value.
  void index_axes(const std::vector<Config>& candidates) {
    constexpr std::int64_t kMissing = std::numeric_limits<std::int64_t>::min();
    std::map<std::string, std::vector<std::int64_t>> values;
    for (const auto& config : candidates) {
      for (const auto& [name, value] : config) values[name];
    }
    for (auto& [name, list] : values) {
      for (const auto& config : candidates) {
        const auto it = config.find(name);
        list.push_back(it == config.end() ? kMissing : it->second);
      }
      std::sort(list.begin(), list.end());
      list.erase(std::unique(list.begin(), list.end()), list.end());
      if (list.size() > 1) axes_.push_back({name, list});
    }
    ranks_.resize(candidates.size());
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      for (const auto& axis : axes_) {
        const auto it = candidates[i].find(axis.name);
        const std::int64_t value = it == candidates[i].end() ? kMissing : it->second;
        ranks_[i].push_back(static_cast<int>(std::lower_bound(axis.values.begin(), axis.values.end(), value) -
                                             axis.values.begin()));
      }
      by_ranks_.emplace(ranks_[i], i);
    }
    // A niche spans about a third of the way across the space, in steps: on a synthetic space of
    // two basins (tests/unit/test_strategies.cpp) a smaller one let the first basin found fill the
    // population, a larger one bred too little around the fastest.
    int diameter = 0;
    for (const auto& axis : axes_) diameter += static_cast<int>(axis.values.size()) - 1;
    niche_radius_ = std::max(1, diameter * 3 / 10);
  }

  void seed_population(const SearchSpace& space) {
    auto add = [&](std::size_t index) {
      if (std::find(seeds_.begin(), seeds_.end(), index) == seeds_.end()) seeds_.push_back(index);
    };
    for (std::size_t index : nearest_winner_indices(space)) add(index);
    for (std::size_t i = 0; i < model_order_.size() && i < kModelSeeds; ++i) add(model_order_[i]);
    const std::size_t wanted = std::min(size_, seeds_.size() + kRandomSeeds);
    while (seeds_.size() < wanted) add(below(size_));
  }

  std::optional<std::size_t> next_seed() {
    while (seed_next_ < seeds_.size()) {
      const std::size_t index = seeds_[seed_next_++];
      if (!handed_[index]) {
        seeded_[index] = true;
        ++seeds_handed_;
        return index;
      }
    }
    return std::nullopt;
  }

  std::optional<std::size_t> next_in_model_order() {
    while (model_next_ < model_order_.size() && handed_[model_order_[model_next_]]) ++model_next_;
    if (model_next_ == model_order_.size()) return std::nullopt;
    return model_order_[model_next_];
  }

  // An untried valid child of two tournament winners, or none after kAttempts tries.
  std::optional<std::size_t> breed() {
    const std::vector<std::size_t> population = parents();
    for (std::size_t attempt = 0; attempt < kAttempts; ++attempt) {
      const std::size_t a = tournament(population);
      const std::size_t b = tournament(population);
      Ranks child = ranks_[a];
      if (a != b && chance(kCrossover)) {
        for (std::size_t p = 0; p < axes_.size(); ++p) {
          if (chance(0.5)) child[p] = ranks_[b][p];
        }
      }
      mutate(child);
      if (auto index = valid_untried(child)) return index;
    }
    return std::nullopt;
  }

  // The fastest measured, but no more than kPerNiche of them within niche_radius_ steps of each
  // other (clearing): a population of the fastest alone would gather in the first good basin it
  // finds and breed nothing but its neighbours, while a basin found later by a random pick keeps
  // a place here and is searched too.
  std::vector<std::size_t> parents() const {
    std::vector<std::size_t> population;
    for (const auto& measured : measured_) {
      if (population.size() == kPopulation) break;
      const Ranks& ranks = ranks_[measured.second];
      std::size_t near = 0;
      for (std::size_t member : population) near += distance(ranks_[member], ranks, niche_radius_ + 1) <= niche_radius_;
      if (near < kPerNiche) population.push_back(measured.second);
    }
    return population;
  }

  static int distance(const Ranks& a, const Ranks& b, int enough) {
    int d = 0;
    for (std::size_t p = 0; p < a.size() && d < enough; ++p) d += std::abs(a[p] - b[p]);
    return d;
  }

  // The fastest of kTournament drawn from the population (fastest first).
  std::size_t tournament(const std::vector<std::size_t>& population) {
    std::size_t best = below(population.size());
    for (std::size_t t = 1; t < kTournament; ++t) best = std::min(best, below(population.size()));
    return population[best];
  }

  // One parameter a step along its axis, sometimes a second one; a step off the end of an axis
  // goes the other way.
  void mutate(Ranks& child) {
    if (axes_.empty()) return;
    const std::size_t first = below(axes_.size());
    step(child, first);
    if (axes_.size() > 1 && chance(kSecondStep)) {
      std::size_t second = below(axes_.size() - 1);
      if (second >= first) ++second;
      step(child, second);
    }
  }

  void step(Ranks& child, std::size_t p) {
    const int last = static_cast<int>(axes_[p].values.size()) - 1;
    int to = child[p] + (chance(0.5) ? 1 : -1);
    if (to < 0 || to > last) to = child[p] + (to < 0 ? 1 : -1);
    child[p] = std::clamp(to, 0, last);
  }

  // The candidate the child is, if valid and untried; else the nearest untried candidate within
  // kRepairRadius steps (ties: the lower index). Constraints cut holes in a tile space, and a
  // child in a hole is usually a step or two from a valid configuration.
  std::optional<std::size_t> valid_untried(const Ranks& child) {
    if (const auto it = by_ranks_.find(child); it != by_ranks_.end()) {
      if (handed_[it->second]) return std::nullopt;
      return it->second;
    }
    std::optional<std::size_t> nearest;
    int nearest_distance = kRepairRadius + 1;
    for (std::size_t i = 0; i < size_; ++i) {
      if (handed_[i]) continue;
      if (const int d = distance(ranks_[i], child, nearest_distance); d < nearest_distance) {
        nearest = i;
        nearest_distance = d;
      }
    }
    return nearest;
  }

  // std::mt19937_64 is specified bit for bit; the standard distributions are not, so these two
  // keep a seed's search the same on every platform.
  std::size_t below(std::size_t n) { return static_cast<std::size_t>(rng_() % n); }
  bool chance(double p) { return static_cast<double>(rng_() >> 11) * 0x1.0p-53 < p; }

  struct Axis {
    std::string name;
    std::vector<std::int64_t> values;  // ascending
  };

  std::size_t size_;
  std::vector<std::size_t> model_order_;
  std::vector<Axis> axes_;
  std::vector<Ranks> ranks_;
  int niche_radius_ = 1;
  std::map<Ranks, std::size_t> by_ranks_;
  std::vector<std::size_t> seeds_;  // the first population, in the order handed out
  std::vector<bool> handed_;
  std::vector<bool> bred_;    // handed out as a child
  std::vector<bool> seeded_;  // handed out as one of the first population
  std::vector<std::pair<double, std::size_t>> measured_;  // ok trials, fastest first
  std::mt19937_64 rng_;
  std::size_t seed_next_ = 0;
  std::size_t seeds_handed_ = 0;
  std::size_t seeds_told_ = 0;
  std::size_t model_next_ = 0;
  std::size_t outstanding_ = 0;
  std::size_t bred_outstanding_ = 0;
};

}  // namespace

StrategyInfo evolve_strategy() {
  return {"evolve",
          "learns from each measurement: an evolutionary search from the nearest winners, the model's best 8 and 4 "
          "random picks; children cross the fastest so far and step one or two parameters; seeded by --seed",
          false, [](const SearchSpace& space) { return std::make_unique<EvolveSearcher>(space); }};
}

}  // namespace gmjit::tuner
