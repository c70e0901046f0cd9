// surrogate: learns where the cost model is wrong and by how much. The winners of the nearest
// tuned shapes and the model's cheapest few first; then, after every measurement, a ridge
// regression of log(measured / estimated) on the candidates' parameter values (one indicator per
// value of each parameter that varies), and the untried candidate whose corrected estimate is
// lowest goes next. The model's errors on a tile space are mostly per parameter value (it
// misprices one consumer, or deep rings, or a split, wherever they occur), so a few measurements
// that share such a value correct the rank of every untried candidate with it; climb and evolve
// only look near what they measured. The ridge pulls every correction toward none: with few
// measurements the model's order stands.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "tuner/strategies/searcher.hpp"

namespace gmjit::tuner {

namespace {

constexpr std::size_t kSeeds = 8;           // the model's picks measured before any correction
constexpr std::size_t kMaxOutstanding = 4;  // handed out before their results refit the correction
// In units of one measurement: a value's correction moves halfway to its measurements' mean
// residual once that many measurements have it.
constexpr double kRidge = 2.0;

// Solves a x = b for the symmetric positive definite a (n x n, row-major) by Cholesky; the ridge
// keeps it definite.
std::vector<double> solve_definite(std::vector<double> a, std::vector<double> b, std::size_t n) {
  for (std::size_t j = 0; j < n; ++j) {
    double d = a[j * n + j];
    for (std::size_t k = 0; k < j; ++k) d -= a[j * n + k] * a[j * n + k];
    d = std::sqrt(std::max(d, 1e-12));
    a[j * n + j] = d;
    for (std::size_t i = j + 1; i < n; ++i) {
      double s = a[i * n + j];
      for (std::size_t k = 0; k < j; ++k) s -= a[i * n + k] * a[j * n + k];
      a[i * n + j] = s / d;
    }
  }
  for (std::size_t i = 0; i < n; ++i) {  // L y = b
    for (std::size_t k = 0; k < i; ++k) b[i] -= a[i * n + k] * b[k];
    b[i] /= a[i * n + i];
  }
  for (std::size_t i = n; i-- > 0;) {  // L^T x = y
    for (std::size_t k = i + 1; k < n; ++k) b[i] -= a[k * n + i] * b[k];
    b[i] /= a[i * n + i];
  }
  return b;
}

class SurrogateSearcher : public Searcher {
 public:
  explicit SurrogateSearcher(const SearchSpace& space)
      : handed_(space.candidates.size(), false) {
    // Without a model every estimate is equal: domain order, corrected all the same.
    std::vector<double> estimates;
    for (const auto& config : space.candidates) {
      estimates.push_back(space.estimate_ms ? std::max(1e-9, space.estimate_ms(config)) : 1.0);
      log_estimate_.push_back(std::log(estimates.back()));
    }
    model_order_ = cheapest_first(estimates);
    std::map<std::string, std::set<std::int64_t>> axes;
    for (const auto& config : space.candidates) {
      for (const auto& [name, value] : config) axes[name].insert(value);
    }
    std::map<std::pair<std::string, std::int64_t>, std::size_t> feature_of;
    for (const auto& [name, values] : axes) {
      if (values.size() < 2) continue;  // a constant parameter tells candidates nothing apart
      for (std::int64_t value : values) feature_of.emplace(std::make_pair(name, value), feature_of.size());
    }
    features_ = feature_of.size();
    for (const auto& config : space.candidates) {
      std::vector<std::size_t> active;
      for (const auto& [name, value] : config) {
        if (const auto it = feature_of.find({name, value}); it != feature_of.end()) active.push_back(it->second);
      }
      active_.push_back(std::move(active));
    }
    correction_.assign(features_, 0.0);
    first_ = nearest_winner_indices(space);
    const std::size_t winners = first_.size();
    for (std::size_t i = 0; i < std::min(kSeeds, model_order_.size()); ++i) {
      const auto end = first_.begin() + static_cast<std::ptrdiff_t>(winners);
      if (std::find(first_.begin(), end, model_order_[i]) == end) first_.push_back(model_order_[i]);
    }
  }

  std::vector<std::size_t> ask(std::size_t count) override {
    std::vector<std::size_t> out;
    while (out.size() < count) {
      std::optional<std::size_t> next;
      if (seeded_ < first_.size()) {
        next = first_[seeded_++];
      } else if (outstanding_ < kMaxOutstanding) {
        next = lowest_corrected();
      }
      if (!next) break;  // wait for the outstanding results, or nothing is left
      handed_[*next] = true;
      ++outstanding_;
      out.push_back(*next);
    }
    return out;
  }

  std::vector<std::size_t> likely_next(std::size_t count) const override {
    std::vector<std::size_t> out;
    for (std::size_t i = seeded_; i < first_.size() && out.size() < count; ++i) out.push_back(first_[i]);
    if (out.size() >= count) return out;
    // (corrected score, rank in the model's order): the order lowest_corrected hands them out in.
    std::vector<std::pair<double, std::size_t>> ranked;
    for (std::size_t rank = 0; rank < model_order_.size(); ++rank) {
      const std::size_t index = model_order_[rank];
      if (handed_[index] || std::find(out.begin(), out.end(), index) != out.end()) continue;
      ranked.emplace_back(corrected_score(index), rank);
    }
    const std::size_t take = std::min(count - out.size(), ranked.size());
    std::partial_sort(ranked.begin(), ranked.begin() + static_cast<std::ptrdiff_t>(take), ranked.end());
    for (std::size_t i = 0; i < take; ++i) out.push_back(model_order_[ranked[i].second]);
    return out;
  }

  void tell(std::size_t candidate, const TrialReport& trial) override {
    if (outstanding_ > 0) --outstanding_;
    if (trial.status != TrialStatus::ok || !(trial.median_ms > 0) || candidate >= log_estimate_.size()) return;
    measured_.push_back(candidate);
    residual_.push_back(std::log(trial.median_ms) - log_estimate_[candidate]);
    refit();
  }

 private:
  // The untried candidate of lowest log estimate plus correction; ties in the model's order.
  std::optional<std::size_t> lowest_corrected() const {
    std::optional<std::size_t> best;
    double best_score = std::numeric_limits<double>::infinity();
    for (std::size_t index : model_order_) {
      if (handed_[index]) continue;
      const double score = corrected_score(index);
      if (score < best_score) {
        best_score = score;
        best = index;
      }
    }
    return best;
  }

  double corrected_score(std::size_t index) const {
    double score = log_estimate_[index];
    for (std::size_t f : active_[index]) score += correction_[f];
    return score;
  }

  // Ridge regression of the residuals, centred: a correction common to every candidate changes
  // no rank.
  void refit() {
    const std::size_t n = features_;
    if (n == 0) return;
    double mean = 0;
    for (double r : residual_) mean += r;
    mean /= static_cast<double>(residual_.size());
    std::vector<double> normal(n * n, 0.0), rhs(n, 0.0);
    for (std::size_t i = 0; i < n; ++i) normal[i * n + i] = kRidge;
    for (std::size_t row = 0; row < measured_.size(); ++row) {
      const auto& active = active_[measured_[row]];
      for (std::size_t a : active) {
        rhs[a] += residual_[row] - mean;
        for (std::size_t b : active) normal[a * n + b] += 1.0;
      }
    }
    correction_ = solve_definite(std::move(normal), std::move(rhs), n);
  }

  std::vector<std::size_t> model_order_;
  std::vector<bool> handed_;
  std::size_t features_ = 0;
  std::vector<std::vector<std::size_t>> active_;  // each candidate's features, one per varying parameter
  std::vector<double> log_estimate_;
  std::vector<double> correction_;  // per feature, added to the log estimate
  std::vector<std::size_t> measured_;  // ok trials, in the order told
  std::vector<double> residual_;       // their log(measured / estimated)
  std::vector<std::size_t> first_;  // the nearest winners, then the model's cheapest
  std::size_t seeded_ = 0;
  std::size_t outstanding_ = 0;
};

}  // namespace

StrategyInfo surrogate_strategy() {
  return {"surrogate",
          "learns the model's errors from each measurement: the nearest shapes' winners and the model's best 8, "
          "then the untried candidate whose estimate, corrected per parameter value by a ridge fit of "
          "log(measured / estimated), is lowest",
          false, [](const SearchSpace& space) { return std::make_unique<SurrogateSearcher>(space); }};
}

}  // namespace gmjit::tuner
