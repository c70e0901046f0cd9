// The whole tuning pipeline against the simulated device: real NVRTC compiles, a real worker
// process and protocol, simulated timings. Needs no GPU.
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>

#include "gmjit/error.hpp"
#include "gmjit/tune.hpp"
#include "templates/registry.hpp"

namespace {

gmjit::TuneOptions simulated(const std::string& strategy) {
  gmjit::TuneOptions options;
  options.simulated_device = true;
  options.strategy = strategy;
  return options;
}

const gmjit::Problem kVectorAdd{"vector_add", "fp32", {{"n", 1000003}}, "test"};

TEST(TunerSimulated, ExhaustiveTimesEveryValidConfigurationAndPicksTheFastest) {
  const auto report = gmjit::tune(kVectorAdd, simulated("exhaustive"));
  const auto& kernel = gmjit::templates::find_kernel("vector_add");
  EXPECT_EQ(report.trials.size(), gmjit::templates::all_configs(kernel).size());
  EXPECT_EQ(report.evaluations, report.valid_candidates);
  EXPECT_EQ(report.device_name, "gmjit simulated H200");
  ASSERT_TRUE(report.winner.has_value());
  ASSERT_TRUE(report.runner_up.has_value());
  const auto& winner = report.trials[*report.winner];
  for (const auto& t : report.trials) {
    if (t.status == gmjit::TrialStatus::ok) EXPECT_LE(winner.median_ms, t.median_ms * 1.005) << gmjit::format_assignments(t.config);
  }
  EXPECT_NE(report.trials[*report.runner_up].config, winner.config);
  EXPECT_FALSE(report.curve.empty());
  for (std::size_t i = 1; i < report.curve.size(); ++i) {
    EXPECT_LE(report.curve[i].best_ms, report.curve[i - 1].best_ms);
    EXPECT_GE(report.curve[i].evaluations, report.curve[i - 1].evaluations);
  }
}

TEST(TunerSimulated, SameSeedSameWinner) {
  for (const std::string strategy : {"random", "model"}) {
    auto options = simulated(strategy);
    options.max_evaluations = 12;
    const auto a = gmjit::tune(kVectorAdd, options);
    const auto b = gmjit::tune(kVectorAdd, options);
    ASSERT_TRUE(a.winner && b.winner);
    EXPECT_EQ(a.trials[*a.winner].config, b.trials[*b.winner].config) << strategy;
  }
}

// surrogate holds back for results (four outstanding), so the session compiles what it names as
// likely next on the idle threads. That changes when a candidate is built, never which candidates
// are measured or in what order: four and eight compile threads (both ask far enough ahead for its
// four) measure the same sequence, and with eight some candidates were built before their ask.
TEST(TunerSimulated, CompilingEarlyChangesNothingButWhenCandidatesAreBuilt) {
  auto options = simulated("surrogate");
  options.max_evaluations = 24;
  std::vector<std::vector<gmjit::Config>> sequences;
  std::size_t early_asked = 0;
  for (unsigned threads : {4u, 8u}) {
    options.compile_threads = threads;
    const auto report = gmjit::tune(kVectorAdd, options);
    EXPECT_EQ(report.evaluations, 24u) << threads << " threads";
    EXPECT_LE(report.compiled_early_asked, report.compiled_early);
    std::vector<gmjit::Config> measured;
    for (const auto& t : report.trials) {
      if (measured.size() < 24) measured.push_back(t.config);
    }
    sequences.push_back(std::move(measured));
    early_asked = report.compiled_early_asked;
  }
  EXPECT_EQ(sequences[0], sequences[1]);
  EXPECT_GT(early_asked, 0u) << "with eight threads and four candidates outstanding, some were built early";
}

TEST(TunerSimulated, BudgetInEvaluationsIsHonoured) {
  auto options = simulated("model");
  options.max_evaluations = 7;
  const auto report = gmjit::tune(kVectorAdd, options);
  EXPECT_EQ(report.evaluations, 7u);
  std::size_t timed = 0;
  for (const auto& t : report.trials) timed += t.status == gmjit::TrialStatus::ok;
  EXPECT_EQ(timed, 7u);
}

TEST(TunerSimulated, ResumedTrialsAreNotRunAgain) {
  auto options = simulated("exhaustive");
  const auto full = gmjit::tune(kVectorAdd, options);
  // Pretend an earlier run measured the first ten valid configurations.
  for (const auto& t : full.trials) {
    if (t.status == gmjit::TrialStatus::ok && options.prior_trials.size() < 10) options.prior_trials.push_back(t);
  }
  std::size_t seen = 0;
  options.on_trial = [&](const gmjit::TrialReport& t) { seen += t.resumed ? 0 : 1; };
  const auto resumed = gmjit::tune(kVectorAdd, options);
  std::size_t marked = 0;
  for (const auto& t : resumed.trials) marked += t.resumed;
  EXPECT_EQ(marked + resumed.evaluations, full.evaluations + 0u) << "every configuration exactly once";
  EXPECT_GE(marked, 7u);  // the finalists may be re-run, the rest stay as recorded
  EXPECT_EQ(seen, resumed.evaluations);
  ASSERT_TRUE(full.winner && resumed.winner);
  EXPECT_EQ(full.trials[*full.winner].config, resumed.trials[*resumed.winner].config);
}

TEST(TunerSimulated, UnknownKernelIsAUsageErrorBeforeAnyWorkerStarts) {
  try {
    gmjit::tune({"no_such_kernel", "fp32", {{"n", 1}}, ""}, simulated("model"));
    FAIL() << "expected a usage error";
  } catch (const gmjit::Error& e) {
    EXPECT_EQ(e.kind(), gmjit::ErrorKind::usage);
  }
}

}  // namespace

#include "isolation_check.hpp"

namespace {

TEST(TunerSimulated, BrokenTemplateEveryFailureRecordedAndACorrectWinner) {
  gmjit::testing::check_broken_template_isolation(/*simulated=*/true);
}

}  // namespace
