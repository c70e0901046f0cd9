// tuner/replay: strategies driven offline against a table of recorded trials, as the session
// drives them, with no device and no worker.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gmjit/error.hpp"
#include "gmjit/tune.hpp"
#include "tuner/replay.hpp"

namespace gmjit::tuner {
namespace {

// Eight candidates x=0..7, recorded at 10 - x ms but x=7, which failed; the cost model ranks them
// in domain order.
SearchSpace eight() {
  SearchSpace space;
  for (std::int64_t x = 0; x < 8; ++x) space.candidates.push_back({{"x", x}});
  space.estimate_ms = [](const Config& c) { return static_cast<double>(c.at("x")); };
  return space;
}

std::vector<TrialReport> recorded_eight() {
  std::vector<TrialReport> trials;
  for (const auto& config : eight().candidates) {
    TrialReport t;
    t.config = config;
    t.median_ms = 10.0 - static_cast<double>(config.at("x"));
    if (config.at("x") == 7) {
      t.status = TrialStatus::compile_failed;
      t.median_ms = 0;
    }
    trials.push_back(t);
  }
  return trials;
}

TEST(Replay, ExhaustiveTellsEveryRecordedTrialAndTheCurveIsTheRunningBest) {
  const auto result = replay(find_strategy("exhaustive"), eight(), recorded_eight());
  EXPECT_EQ(result.order, (std::vector<std::size_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(result.best_ms, (std::vector<double>{10, 9, 8, 7, 6, 5, 4, 4})) << "a failed trial improves nothing";
  EXPECT_EQ(best_recorded_ms(recorded_eight()), 4.0);
  EXPECT_EQ(evaluations_to_within(result, 4.0, 0), 7u);
  EXPECT_EQ(evaluations_to_within(result, 4.0, 30), 6u) << "5 ms is within 30% of 4";
  EXPECT_EQ(evaluations_to_within(result, 1.0, 2), std::nullopt);
}

TEST(Replay, AFailedFirstTrialLeavesTheCurveAtZeroUntilOneVerifies) {
  SearchSpace space = eight();
  space.estimate_ms = [](const Config& c) { return -static_cast<double>(c.at("x")); };  // x=7 first
  const auto result = replay(find_strategy("model"), space, recorded_eight(), {1, 3});
  EXPECT_EQ(result.order, (std::vector<std::size_t>{7, 6, 5}));
  EXPECT_EQ(result.best_ms, (std::vector<double>{0, 4, 4}));
  EXPECT_EQ(evaluations_to_within(result, 4.0, 2), 2u);
}

// A searcher that records how it is asked and told, handing out the domain order.
struct Spy : Searcher {
  std::vector<std::string>* log;
  std::size_t next = 0, size = 0, repeat = 0;
  std::vector<std::size_t> ask(std::size_t count) override {
    std::vector<std::size_t> out;
    while (out.size() < count && next < size) out.push_back(next++);
    if (repeat > 0 && next == repeat) out.push_back(0);  // breaks the contract: 0 again
    log->push_back("ask " + std::to_string(count) + ":" + std::to_string(out.size()));
    return out;
  }
  void tell(std::size_t candidate, const TrialReport&) override { log->push_back("tell " + std::to_string(candidate)); }
};

StrategyInfo spy(std::vector<std::string>& log, std::size_t repeat = 0) {
  return {"spy", "", false, [&log, repeat](const SearchSpace& space) {
            auto s = std::make_unique<Spy>();
            s->log = &log;
            s->size = space.candidates.size();
            s->repeat = repeat;
            return s;
          }};
}

TEST(Replay, AsksAheadAsTheSessionDoesAndStopsAtItsBudget) {
  std::vector<std::string> log;
  const auto result = replay(spy(log), eight(), recorded_eight(), {3, 4});
  EXPECT_EQ(log, (std::vector<std::string>{"ask 3:3", "ask 1:1", "tell 0", "ask 1:1", "tell 1", "ask 1:1", "tell 2",
                                           "ask 1:1", "tell 3"}));
  EXPECT_EQ(result.order.size(), 4u);
  log.clear();
  EXPECT_EQ(replay(spy(log), eight(), recorded_eight(), {0, 0}).order.size(), 8u) << "ahead 0 is 1; budget 0: none";
  EXPECT_EQ(log.front(), "ask 1:1");
}

TEST(Replay, ATableThatDoesNotMatchOrAStrategyThatBreaksItsContractIsAUsageError) {
  auto short_table = recorded_eight();
  short_table.pop_back();
  EXPECT_THROW(replay(find_strategy("random"), eight(), short_table), Error);
  std::vector<std::string> log;
  try {
    replay(spy(log, 3), eight(), recorded_eight());
    FAIL() << "expected a usage error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::usage);
    EXPECT_NE(e.message().find("twice"), std::string::npos) << e.message();
  }
}

TEST(Replay, RecordedForTakesEachCandidatesLastTrialAndNamesAMissingOne) {
  auto trials = recorded_eight();
  TrialReport retimed = trials[2];
  retimed.median_ms = 3.5;  // the finalists' interleaved re-timing replaces the first median
  trials.push_back(retimed);
  TrialReport other;
  other.config = {{"x", 42}};  // a configuration that is not a candidate is left out
  trials.insert(trials.begin(), other);
  const auto table = recorded_for(eight(), trials);
  ASSERT_EQ(table.size(), 8u);
  EXPECT_EQ(table[2].median_ms, 3.5);
  EXPECT_EQ(table[7].status, TrialStatus::compile_failed);
  trials.erase(trials.begin() + 4);  // x=3
  try {
    recorded_for(eight(), trials);
    FAIL() << "expected a usage error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::usage);
    EXPECT_NE(e.message().find("x=3"), std::string::npos) << e.message();
  }
}

// Every registered strategy replays to the end of the table without breaking its contract, and a
// seeded one replays alike for its seed.
TEST(Replay, EveryStrategyReplaysTheWholeTableDeterministically) {
  for (const auto& name : strategy_names()) {
    SCOPED_TRACE(name);
    for (std::size_t ahead : {1u, 4u, 32u}) {
      const auto a = replay(find_strategy(name), eight(), recorded_eight(), {ahead, 0});
      EXPECT_EQ(a.order.size(), 8u);
      EXPECT_EQ(a.best_ms.back(), 4.0);
      EXPECT_EQ(a.order, replay(find_strategy(name), eight(), recorded_eight(), {ahead, 0}).order);
    }
  }
}

}  // namespace
}  // namespace gmjit::tuner
