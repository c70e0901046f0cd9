#pragma once
// A search strategy asks and is told, as KTT's Searcher and Kernel Tuner's strategies do: the
// session asks it for the next candidates, compiles and measures them, and tells it each result,
// so a strategy may choose what to try next from what it has seen. One file per strategy in
// tuner/strategies/, each registered by name on its line in registry.cpp.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gmjit/tune.hpp"

namespace gmjit::tuner {

// What a strategy may know of the problem before anything is measured.
struct SearchSpace {
  // The configurations to search: valid for the shape and the device and not measured by an
  // earlier run, in domain order. Searchers name them by index.
  std::vector<Config> candidates;
  // Trials an interrupted run measured; their configurations are not among the candidates.
  std::vector<TrialReport> resumed;
  // The analytic cost model (tuner/search.hpp) for this problem on this device, in ms.
  std::function<double(const Config&)> estimate_ms;
  // The winners of the `count` nearest tuned shapes of this kernel and dtype on this device,
  // nearest first; none without a cache.
  std::function<std::vector<Config>(std::size_t count)> nearest_winners;
  std::uint64_t seed = 1;
};

class Searcher {
 public:
  virtual ~Searcher() = default;
  // Up to `count` candidates to evaluate next, as indices into SearchSpace::candidates, none
  // handed out twice. The session asks ahead so that compiles overlap measuring; a searcher
  // that wants results first may hand out fewer, even none while results are outstanding.
  // None with nothing outstanding ends the search.
  virtual std::vector<std::size_t> ask(std::size_t count) = 0;
  // The trial of a candidate ask() handed out, whatever its status.
  virtual void tell(std::size_t candidate, const TrialReport& trial) = 0;
  // Up to `count` candidates not handed out yet that ask() would hand out next if nothing more
  // were told, in that order. While a searcher holds back for results, the session compiles these
  // on the pool's idle threads, so that a later ask mostly finds its candidates built. Default:
  // none (searchers that never hold back already keep the pool busy through ask).
  virtual std::vector<std::size_t> likely_next(std::size_t /*count*/) const { return {}; }
};

// A strategy's entry in the registry.
struct StrategyInfo {
  std::string name;     // the value of --strategy and TuneOptions::strategy
  std::string summary;  // one line, for help texts
  // Successive halving: every candidate is timed briefly, then the best quarter (at least
  // TuneOptions::retime_top) again in full. Pays when a search times many candidates.
  bool successive_halving = false;
  std::function<std::unique_ptr<Searcher>(const SearchSpace&)> make;
};

// Every registered strategy, in registration order.
const std::vector<StrategyInfo>& strategies();
// Throws the Error(usage) of an unknown strategy, which names every registered one.
const StrategyInfo& find_strategy(const std::string& name);

// Hands out a fixed order and learns nothing from what it is told: the base of strategies whose
// order is known before anything is measured.
class OrderedSearcher : public Searcher {
 public:
  explicit OrderedSearcher(std::vector<std::size_t> order) : order_(std::move(order)) {}
  std::vector<std::size_t> ask(std::size_t count) override;
  void tell(std::size_t, const TrialReport&) override {}

 private:
  std::vector<std::size_t> order_;
  std::size_t next_ = 0;
};

// Candidates by the cost model, cheapest first; equal estimates keep domain order, so the order
// never depends on the platform's sort.
std::vector<std::size_t> cheapest_first(const SearchSpace& space);
// The same order from estimates already made, one per candidate.
std::vector<std::size_t> cheapest_first(const std::vector<double>& estimates);

// The candidates that won the nearest tuned shapes (space.nearest_winners, the three nearest),
// nearest first and each once; winners outside the space are skipped. Empty without a cache.
std::vector<std::size_t> nearest_winner_indices(const SearchSpace& space);

}  // namespace gmjit::tuner
