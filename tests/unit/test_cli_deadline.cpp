// gmtune sweep --deadline, run as a user runs it on the simulated device: a deadline already spent
// starts no problem and lists every one the sweep would have tuned, in the human output and in
// --json; problems with a winner are skipped as ever. Nothing is compiled, so it needs neither a
// GPU nor NVRTC.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <string>

#include "cache/keys.hpp"
#include "cache/store.hpp"
#include "cli_runner.hpp"
#include "gmjit/tune.hpp"
#include "templates/registry.hpp"
#include "temp_dir.hpp"
#include "tools/gmtune_format.hpp"
#include "tuner/worker.hpp"
#include "unit/cache_test_support.hpp"

namespace gmjit {
namespace {

using cache_test::capture_error;
using testing::CliResult;
using testing::line_count;
using testing::run_gmtune;

const Problem kSmall{"vector_add", "fp32", {{"n", 4096}}, "small"};
const Problem kLarge{"vector_add", "fp32", {{"n", 8192}}, "large"};
const Problem kGemm{"sgemm", "fp32", {{"m", 64}, {"n", 64}, {"k", 64}}, "gemm"};

class CliDeadline : public testing::TempDirTest {
 protected:
  CliDeadline() : TempDirTest("gmjit-cli-deadline") {}
  void SetUp() override {
    std::ofstream(shapes_) << R"({"sweeps": [
        {"kernel": "vector_add", "dtype": "fp32", "shapes": [{"n": 4096, "from": "small"}, {"n": 8192, "from": "large"}]},
        {"kernel": "sgemm", "dtype": "fp32", "shapes": [{"m": 64, "n": 64, "k": 64, "from": "gemm"}]}]})";
  }

  // The winner an earlier sweep on the simulated device recorded for `problem`.
  void cache_winner(const Problem& problem) const {
    cache::Store store(db_);
    const auto device = tuner::simulated_device(0);
    const std::string hash = templates::template_hash(templates::find_kernel(problem.kernel).header);
    const cache::ProblemRecord record{
        cache::problem_key(problem.kernel, hash, problem.dtype, cache::kRowMajor, problem.shape), problem.kernel, hash,
        problem.dtype, cache::kRowMajor, nlohmann::json(problem.shape).dump()};
    cache::TrialRecord trial;
    trial.config_json = nlohmann::json(templates::find_kernel(problem.kernel).default_config).dump();
    trial.status = "ok";
    trial.median_ms = 0.5;
    store.record_tuning({device.fingerprint(), device.name, device.arch, device.to_json()}, record, {trial}, 0, "test");
  }

  CliResult sweep(const std::string& args) const {
    return run_gmtune("sweep --shapes " + shapes_.string() + " --db " + db_.string() + " " + args,
                      "GMJIT_SIMULATED_DEVICE=1");
  }

  const std::filesystem::path db_ = dir_ / "cache" / "gmjit.db";
  const std::filesystem::path shapes_ = dir_ / "shapes.json";
};

TEST_F(CliDeadline, SpentDeadlineStartsNothingAndListsEveryProblemLeft) {
  const auto result = sweep("--deadline 0s");
  EXPECT_EQ(result.status, 1) << "work left undone fails the run, as an interrupted sweep does\n" << result.err;
  EXPECT_NE(result.out.find("0 tuned, 0 already cached, 0 failed, 3 not started (deadline)"),
            std::string::npos)
      << result.out;
  for (const auto& problem : {kSmall, kLarge, kGemm}) {
    EXPECT_NE(result.out.find("not started: " + gmtune::problem_line(problem) + "\n"), std::string::npos)
        << gmtune::problem_line(problem) << "\n" << result.out;
  }
  EXPECT_NE(result.err.find("deadline 0s passed with 3 problems not started"), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("run the same command again"), std::string::npos) << result.err;
  EXPECT_EQ(result.err.find("tuning"), std::string::npos) << "no problem started:\n" << result.err;

  cache::Store store(db_);
  const auto device_key = tuner::simulated_device(0).fingerprint();
  for (const auto& problem : {kSmall, kLarge, kGemm}) {
    const std::string hash = templates::template_hash(templates::find_kernel(problem.kernel).header);
    const auto key = cache::problem_key(problem.kernel, hash, problem.dtype, cache::kRowMajor, problem.shape);
    EXPECT_TRUE(store.trials(device_key, key).empty()) << problem.kernel;
  }
}

TEST_F(CliDeadline, JsonListsTheProblemsNotStarted) {
  const auto result = sweep("--deadline 0s --json");
  EXPECT_EQ(result.status, 1) << result.err;
  const auto doc = nlohmann::json::parse(result.out);
  EXPECT_EQ(doc["tuned"], 0);
  EXPECT_EQ(doc["interrupted"], false);
  EXPECT_EQ(doc["deadline_reached"], true);
  ASSERT_EQ(doc["not_started"].size(), 3u) << result.out;
  EXPECT_EQ(doc["not_started"][0], gmtune::problem_json(kSmall));
  EXPECT_EQ(doc["not_started"][1], gmtune::problem_json(kLarge));
  EXPECT_EQ(doc["not_started"][2], gmtune::problem_json(kGemm));
}

TEST_F(CliDeadline, ProblemsWithAWinnerAreSkippedNotListed) {
  cache_winner(kLarge);
  const auto result = sweep("--deadline 0s --json");
  EXPECT_EQ(result.status, 1) << result.err;
  const auto doc = nlohmann::json::parse(result.out);
  EXPECT_EQ(doc["skipped"], 1);
  ASSERT_EQ(doc["not_started"].size(), 2u) << result.out;
  EXPECT_EQ(doc["not_started"][0], gmtune::problem_json(kSmall));
  EXPECT_EQ(doc["not_started"][1], gmtune::problem_json(kGemm));
}

TEST_F(CliDeadline, NothingLeftToTuneIsSuccessEvenPastTheDeadline) {
  for (const auto& problem : {kSmall, kLarge, kGemm}) cache_winner(problem);
  const auto result = sweep("--deadline 0s");
  EXPECT_EQ(result.status, 0) << result.err;
  EXPECT_NE(result.out.find("3 already cached"), std::string::npos) << result.out;
  EXPECT_EQ(result.out.find("not started"), std::string::npos) << result.out;
  const auto json = nlohmann::json::parse(sweep("--deadline 0s --json").out);
  EXPECT_EQ(json["deadline_reached"], false);
  EXPECT_TRUE(json["not_started"].empty());
}

TEST_F(CliDeadline, BadDeadlineIsUsageBeforeTheDevice) {
  for (const char* deadline : {"2", "2x", "h", "-1h", "30m1h", "1h1h", "1e3s", "inf"}) {
    SCOPED_TRACE(deadline);
    // No simulated device here: a usage error must come before anything asks for one.
    const auto result = run_gmtune("sweep --shapes " + shapes_.string() + " --db " + db_.string() + " --deadline " +
                                   deadline);
    EXPECT_EQ(result.status, 2);
    EXPECT_EQ(line_count(result.err), 1) << result.err;
    EXPECT_NE(result.err.find("--deadline"), std::string::npos) << result.err;
  }
  EXPECT_FALSE(std::filesystem::exists(db_));
}

TEST(GmtuneDeadline, HoursMinutesAndSecondsInThatOrder) {
  EXPECT_EQ(gmtune::parse_duration("2h"), 7200.0);
  EXPECT_EQ(gmtune::parse_duration("1h30m"), 5400.0);
  EXPECT_EQ(gmtune::parse_duration("90m"), 5400.0);
  EXPECT_EQ(gmtune::parse_duration("1h0m15s"), 3615.0);
  EXPECT_EQ(gmtune::parse_duration("1.5h"), 5400.0);
  EXPECT_EQ(gmtune::parse_duration("45s"), 45.0);
  EXPECT_EQ(gmtune::parse_duration("0s"), 0.0);
  for (const char* bad : {"", "5", "s", "h30m", "30m1h", "1h1h", "1.2.3h", "1 h", " 1h", "1h ", "-1h", "1d", "inf"}) {
    SCOPED_TRACE(bad);
    EXPECT_EQ(capture_error([&] { gmtune::parse_duration(bad); }).kind(), ErrorKind::usage);
  }
}

TEST(GmtuneStrategies, HelpAndErrorsNameEveryRegisteredStrategy) {
  const auto help = run_gmtune("tune --help");
  EXPECT_EQ(help.status, 0);
  const auto sweep_help = run_gmtune("sweep --help");
  EXPECT_NE(sweep_help.out.find("--deadline"), std::string::npos);
  const auto bad = run_gmtune("tune vector_add --shape n=1024 --strategy fastest");
  EXPECT_EQ(bad.status, 2);
  EXPECT_EQ(line_count(bad.err), 1) << bad.err;
  for (const auto& name : strategy_names()) {
    EXPECT_NE(help.out.find(name + ": " + strategy_summary(name)), std::string::npos) << name << "\n" << help.out;
    EXPECT_NE(sweep_help.out.find(name + ": "), std::string::npos) << name;
    EXPECT_NE(bad.err.find(name), std::string::npos) << bad.err;
  }
}

}  // namespace
}  // namespace gmjit
