// gmtune sweep and tune as a user runs them, and gmtune's option parsing and formatting, on a
// machine without a GPU.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "cache/store.hpp"
#include "cli_runner.hpp"
#include "templates/registry.hpp"
#include "temp_dir.hpp"
#include "tools/gmtune_format.hpp"
#include "cache/keys.hpp"
#include "unit/cache_test_support.hpp"

namespace gmjit {
namespace {

namespace fs = std::filesystem;
using cache_test::capture_error;
using testing::line_count;
using testing::run_gmtune;

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

class CliSweep : public testing::TempDirTest {
 protected:
  CliSweep() : TempDirTest("gmjit-cli-sweep") {}

  const fs::path db_ = dir_ / "cache" / "gmjit.db";
  // A dry run without --db reads the default cache: point it here, never at the user's.
  const std::string env_ = "GMJIT_CACHE=" + db_.string();
};

TEST_F(CliSweep, DryRunListsTheLlmPresetOneProblemALine) {
  const auto result = run_gmtune("sweep --preset llm --dry-run", env_);
  ASSERT_EQ(result.status, 0) << result.err;
  const auto listed = lines(result.out);
  EXPECT_EQ(listed.size(), preset_problems("llm").size());
  std::size_t gemm_lines = 0;
  for (const auto& line : listed) {
    if (line.rfind("sgemm fp32 k=", 0) == 0) continue;  // the file's own fp32 sweep
    ++gemm_lines;
    EXPECT_TRUE(line.rfind("gemm bf16 k=", 0) == 0 || line.rfind("gemm fp16 k=", 0) == 0) << line;
    EXPECT_NE(line.find(",trans_b=1 "), std::string::npos) << "the weight layout: " << line;
  }
  EXPECT_EQ(gemm_lines, 60u) << "61 gemm shapes, bf16 4096^3 twice";
  EXPECT_NE(result.out.find("gemm bf16 k=4096,m=16,n=6144,trans_b=1 llama-3-8b"), std::string::npos) << result.out;
  EXPECT_FALSE(fs::exists(db_)) << "a dry run never creates the cache";
  EXPECT_FALSE(fs::exists(db_.parent_path()));
}

TEST_F(CliSweep, ShardsOfADryRunCoverThePresetOnce) {
  std::map<std::string, int> seen;
  std::size_t smallest = 1000, largest = 0;
  for (int index = 0; index < 4; ++index) {
    const auto result = run_gmtune("sweep --preset llm --dry-run --shard " + std::to_string(index) + "/4", env_);
    ASSERT_EQ(result.status, 0) << result.err;
    const auto listed = lines(result.out);
    smallest = std::min(smallest, listed.size());
    largest = std::max(largest, listed.size());
    for (const auto& line : listed) ++seen[line];
  }
  const auto all = lines(run_gmtune("sweep --preset llm --dry-run", env_).out);
  EXPECT_EQ(seen.size(), all.size());
  for (const auto& line : all) EXPECT_EQ(seen[line], 1) << line;
  EXPECT_LE(largest - smallest, 1u);
}

TEST_F(CliSweep, FirstAndLastShardAreDisjoint) {
  const auto first = lines(run_gmtune("sweep --preset llm --dry-run --shard 0/4", env_).out);
  const auto last = lines(run_gmtune("sweep --preset llm --dry-run --shard 3/4", env_).out);
  ASSERT_FALSE(first.empty());
  ASSERT_FALSE(last.empty());
  const std::set<std::string> a(first.begin(), first.end());
  for (const auto& line : last) EXPECT_EQ(a.count(line), 0u) << line;
}

TEST_F(CliSweep, DryRunJsonIsAnArrayOfProblems) {
  const auto result = run_gmtune("sweep --preset gpumode --dry-run --json", env_);
  ASSERT_EQ(result.status, 0) << result.err;
  const auto doc = nlohmann::json::parse(result.out);
  ASSERT_TRUE(doc.is_array());
  ASSERT_EQ(doc.size(), preset_problems("gpumode").size());
  std::set<std::string> kernels;
  for (const auto& p : doc) {
    kernels.insert(p["kernel"].get<std::string>());
    EXPECT_NO_THROW(templates::find_kernel(p["kernel"].get<std::string>()));
    EXPECT_TRUE(p["shape"].is_object());
    for (const auto& [key, value] : p["shape"].items()) EXPECT_TRUE(value.is_number_integer()) << key;
    EXPECT_TRUE(p["label"].is_string());
  }
  for (const char* name : {"vector_add", "vector_sum", "grayscale", "histogram", "prefix_sum", "softmax", "rmsnorm",
                           "layernorm", "transpose"}) {
    EXPECT_TRUE(kernels.count(name)) << name;
  }
  EXPECT_EQ(result.err.find("skipping"), std::string::npos) << "every preset kernel is in the catalog: " << result.err;
}

TEST_F(CliSweep, DryRunFiltersKernelsBeforeSharding) {
  const auto result = run_gmtune("sweep --dry-run --kernels vector_add --shard 0/1", env_);
  ASSERT_EQ(result.status, 0) << result.err;
  const auto listed = lines(result.out);
  ASSERT_EQ(listed.size(), 2u);
  for (const auto& line : listed) EXPECT_EQ(line.rfind("vector_add ", 0), 0u) << line;
  EXPECT_EQ(run_gmtune("sweep --dry-run --kernels nosuch", env_).status, 2);
}

TEST_F(CliSweep, DryRunSkipsProblemsWithAWinnerUnlessRetune) {
  const Problem done = preset_problems("default")[1];
  ASSERT_EQ(done.dtype, "fp16");
  {
    // The winner a sweep on some GPU records for the default preset's fp16 vector_add.
    cache::Store store(db_);
    const auto& kernel = templates::find_kernel(done.kernel);
    const std::string hash = templates::template_hash(kernel.header);
    const cache::ProblemRecord problem{cache::problem_key(done.kernel, hash, done.dtype, cache::kRowMajor, done.shape),
                                       done.kernel, hash, done.dtype, cache::kRowMajor, nlohmann::json(done.shape).dump()};
    cache::TrialRecord trial;
    trial.config_json = R"({"block":128})";
    trial.status = "ok";
    trial.median_ms = 0.5;
    store.record_tuning({"dev-a", "GPU A", "sm_90a", R"({"name":"GPU A"})"}, problem, {trial}, 0, "test");
  }
  const auto result = run_gmtune("sweep --dry-run --db " + db_.string());
  ASSERT_EQ(result.status, 0) << result.err;
  const auto listed = lines(result.out);
  ASSERT_EQ(listed.size(), 3u) << result.out;
  for (const auto& line : listed) EXPECT_EQ(line.find("vector_add fp16"), std::string::npos) << line;
  EXPECT_NE(result.err.find("1 already have a winner"), std::string::npos) << result.err;
  EXPECT_EQ(lines(run_gmtune("sweep --dry-run --retune", env_).out).size(), 4u) << "same cache through GMJIT_CACHE";
}

TEST_F(CliSweep, BadShardIsUsageWithOneLine) {
  for (const char* shard : {"4/4", "0/0", "x", "1/"}) {
    SCOPED_TRACE(shard);
    const auto result = run_gmtune(std::string("sweep --preset llm --dry-run --shard ") + shard, env_);
    EXPECT_EQ(result.status, 2);
    EXPECT_EQ(line_count(result.err), 1) << result.err;
    EXPECT_NE(result.err.find(shard), std::string::npos) << result.err;
    EXPECT_TRUE(result.out.empty()) << result.out;
  }
  EXPECT_FALSE(fs::exists(db_));
}

TEST_F(CliSweep, BadBudgetOrStrategyIsUsageBeforeTheDevice) {
  for (const std::string args :
       {"tune vector_add --shape n=1024 --budget 0", "tune vector_add --shape n=1024 --budget 10x",
        "tune vector_add --shape n=1024 --budget s", "tune vector_add --shape n=1024 --budget -5",
        "tune vector_add --shape n=1024 --strategy fastest", "sweep --budget 3m", "sweep --strategy nope",
        "tune vector_add --shape m=1024", "tune nosuch --shape n=1"}) {
    SCOPED_TRACE(args);
    const auto result = run_gmtune(args + " --db " + db_.string(), env_);
    EXPECT_EQ(result.status, 2);
    EXPECT_EQ(line_count(result.err), 1) << result.err;
    EXPECT_TRUE(result.out.empty()) << result.out;
  }
  EXPECT_FALSE(fs::exists(db_));
}

TEST_F(CliSweep, HelpNamesThePresetsAndTheGemmLayout) {
  const auto result = run_gmtune("sweep --help");
  EXPECT_EQ(result.status, 0);
  for (const char* text : {"llm", "gpumode", "trans_b=1", "--shard", "--dry-run", "--budget", "--strategy"}) {
    EXPECT_NE(result.out.find(text), std::string::npos) << text;
  }
}

TEST(GmtuneBudget, CountsOrSeconds) {
  EXPECT_EQ(gmtune::parse_budget("40").evaluations, 40u);
  EXPECT_EQ(gmtune::parse_budget("40").seconds, 0.0);
  EXPECT_EQ(gmtune::parse_budget("30s").seconds, 30.0);
  EXPECT_EQ(gmtune::parse_budget("30s").evaluations, 0u);
  EXPECT_EQ(gmtune::parse_budget("1.5s").seconds, 1.5);
  for (const char* bad : {"", "0", "0s", "-3", "3.5", "s", ".s", "1..2s", "inf", "infs", "1e3s", " 5", "5 ", "30m",
                          "99999999999999999999999"}) {
    SCOPED_TRACE(bad);
    const auto error = capture_error([&] { gmtune::parse_budget(bad); });
    EXPECT_EQ(error.kind(), ErrorKind::usage);
  }
}

TEST(GmtuneProgress, TerminalLineHasBarCountsTrialsAndEta) {
  gmtune::Progress p;
  p.index = 2;
  p.total = 10;
  p.problem = {"sgemm", "fp32", {{"m", 16}, {"n", 6144}, {"k", 4096}}, "llama-3-8b"};
  p.state = "tuning";
  p.trials = 37;
  p.elapsed_seconds = 62;
  p.eta_seconds = 250;
  const auto line = gmtune::format_progress(p, true, 200);
  EXPECT_NE(line.find("[####"), std::string::npos) << line;
  EXPECT_NE(line.find("2/10"), std::string::npos) << line;
  EXPECT_NE(line.find("sgemm fp32 k=4096,m=16,n=6144"), std::string::npos) << line;
  EXPECT_NE(line.find("37 trials"), std::string::npos) << line;
  EXPECT_NE(line.find("1m02s elapsed"), std::string::npos) << line;
  EXPECT_NE(line.find("eta 4m10s"), std::string::npos) << line;
  EXPECT_EQ(line.find('\n'), std::string::npos);
  EXPECT_LE(gmtune::format_progress(p, true, 40).size(), 40u);

  p.state = "done 0.1234 ms";
  EXPECT_NE(gmtune::format_progress(p, true, 200).find("3/10"), std::string::npos) << "a finished problem counts";
  const auto plain = gmtune::format_progress(p, false);
  EXPECT_EQ(plain.rfind("[3/10] sgemm fp32 k=4096,m=16,n=6144 (llama-3-8b): done 0.1234 ms", 0), 0u) << plain;
  EXPECT_EQ(plain.find('\r'), std::string::npos);
}

TEST(GmtuneProgress, EtaAveragesTunedProblemsOnly) {
  EXPECT_FALSE(gmtune::estimate_eta(0, 0, 3, 10).has_value()) << "only cached problems so far";
  EXPECT_DOUBLE_EQ(*gmtune::estimate_eta(2, 20, 5, 10), 50);
  EXPECT_DOUBLE_EQ(*gmtune::estimate_eta(10, 100, 10, 10), 0);
  EXPECT_EQ(gmtune::format_duration(7322), "2h02m");
  EXPECT_EQ(gmtune::format_duration(59.4), "59s");
}

TuneReport sample_report() {
  TuneReport r;
  r.problem = {"vector_add", "fp32", {{"n", 1024}}, "command line"};
  r.device_name = "GPU";
  r.device_key = "dev";
  r.strategy = "random";
  auto trial = [](std::int64_t block, TrialStatus status, double ms) {
    TrialReport t;
    t.config = {{"block", block}};
    t.status = status;
    t.median_ms = ms;
    t.ci_percent = 0.7;
    t.batch = 4;
    t.resources.registers = 16;
    return t;
  };
  r.trials = {trial(64, TrialStatus::ok, 0.2), trial(128, TrialStatus::ok, 0.1), trial(2048, TrialStatus::invalid, 0),
              trial(4096, TrialStatus::invalid, 0), trial(256, TrialStatus::crashed, 0)};
  r.trials[4].detail = "illegal address";
  r.trials[4].verify_error = std::numeric_limits<double>::quiet_NaN();
  r.trials[1].binary_cached = true;
  r.winner = 1;
  r.runner_up = 0;
  r.valid_candidates = 3;
  r.evaluations = 3;
  r.worker_restarts = 1;
  r.curve = {{1, 0.5, 0.2}, {2, 0.9, 0.1}};
  r.wall_seconds = 1.25;
  return r;
}

TEST(GmtuneReport, TableSummarizesInvalidAndNamesTheMargin) {
  const auto text = gmtune::format_report(sample_report());
  EXPECT_EQ(text.find("block=2048"), std::string::npos) << "invalid candidates are counted, not listed";
  EXPECT_NE(text.find("2 invalid candidates"), std::string::npos) << text;
  EXPECT_NE(text.find("block=256"), std::string::npos);
  EXPECT_NE(text.find("illegal address"), std::string::npos);
  EXPECT_NE(text.find("winner: block=128  0.1000 ms, 100.0% faster than the runner-up block=64"), std::string::npos)
      << text;
  EXPECT_NE(text.find("3 evaluated of 3 valid candidates (strategy random), 1 worker restart,"), std::string::npos)
      << text;
  EXPECT_NE(text.find("cached cubin"), std::string::npos);
}

TEST(GmtuneReport, JsonHoldsEveryField) {
  const auto doc = nlohmann::json::parse(gmtune::report_json(sample_report()).dump());
  EXPECT_EQ(doc["winner"], 1);
  EXPECT_EQ(doc["runner_up"], 0);
  EXPECT_EQ(doc["strategy"], "random");
  EXPECT_EQ(doc["valid_candidates"], 3);
  EXPECT_EQ(doc["evaluations"], 3);
  EXPECT_EQ(doc["worker_restarts"], 1);
  ASSERT_EQ(doc["curve"].size(), 2u);
  EXPECT_EQ(doc["curve"][1]["best_ms"], 0.1);
  ASSERT_EQ(doc["trials"].size(), 5u);
  const auto& t = doc["trials"][1];
  for (const char* field : {"config", "status", "median_ms", "spread", "ci_percent", "repetitions", "batch",
                            "verify_error", "compile_ms", "binary_cached", "resumed", "resources", "detail"}) {
    EXPECT_TRUE(t.contains(field)) << field;
  }
  EXPECT_EQ(t["binary_cached"], true);
  EXPECT_EQ(t["batch"], 4);
  EXPECT_EQ(t["config"]["block"], 128);
  EXPECT_TRUE(doc["trials"][4]["verify_error"].is_null()) << "NaN is not JSON";
  TuneReport none = sample_report();
  none.winner.reset();
  none.runner_up.reset();
  EXPECT_TRUE(gmtune::report_json(none)["winner"].is_null());
}

}  // namespace
}  // namespace gmjit
