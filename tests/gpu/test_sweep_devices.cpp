// Problems of the llm preset swept on one GPU and on every GPU of the host, in the same run
// (issue 6). On a host with one GPU, two workers share it (--devices 0,0): the timings disturb
// each other, but the queue, the protocol and the concurrent writers are the same.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <vector>

#include "cache/store.hpp"
#include "cli_runner.hpp"
#include "gmjit/tune.hpp"
#include "require_gpu.hpp"

namespace gmjit {
namespace {

namespace fs = std::filesystem;

// problem key -> trials recorded, over every device.
std::map<std::string, std::size_t> winners_with_trials(const std::string& db, std::size_t& duplicated) {
  cache::Store store(db);
  std::map<std::string, std::size_t> out;
  duplicated = 0;
  for (const auto& w : store.winners("")) {  // the smallest llm problems: gemm bf16 at m = 1
    const auto trials = store.trials(w.device_key, w.problem_key);
    std::set<std::string> configs;
    for (const auto& t : trials) configs.insert(t.config_json);
    // Each configuration once, then the winner's final record.
    if (trials.size() != configs.size() + 1) ++duplicated;
    out[w.problem_key] = trials.size();
  }
  return out;
}

// The `count` smallest problems of the llm preset (by m*n*k), as a shapes file at `path`; returns
// how many there are. The multi-device machinery is what is under test, not the tuning of large
// GEMMs: the whole preset took two and a half minutes of the gpu tier.
std::size_t write_smallest_llm_problems(const fs::path& path, std::size_t count) {
  auto problems = preset_problems("llm");
  const auto volume = [](const Problem& p) { return p.shape.at("m") * p.shape.at("n") * p.shape.at("k"); };
  std::stable_sort(problems.begin(), problems.end(),
                   [&](const Problem& a, const Problem& b) { return volume(a) < volume(b); });
  problems.resize(std::min(count, problems.size()));
  nlohmann::json sweeps = nlohmann::json::array();
  for (const auto& p : problems) {
    nlohmann::json shape(p.shape);
    shape["from"] = p.label;
    sweeps.push_back({{"kernel", p.kernel}, {"dtype", p.dtype}, {"shapes", {shape}}});
  }
  std::ofstream(path) << nlohmann::json{{"sweeps", sweeps}}.dump();
  return problems.size();
}

TEST(SM90_SweepDevices, LlmPresetOnOneGpuAndOnAllGpus) {
  GMJIT_REQUIRE_SM90();
  const int count = driver_status().device_count;
  const std::string devices = count >= 2 ? "all" : "0,0";
  const std::size_t workers = count >= 2 ? static_cast<std::size_t>(count) : 2;
  char pattern[] = "/tmp/gmjit-sweep-devices-XXXXXX";
  ASSERT_NE(::mkdtemp(pattern), nullptr);
  const fs::path dir = pattern;
  // Two problems a worker, so that every worker takes one from the queue however the others race.
  const std::size_t problems = write_smallest_llm_problems(dir / "llm.json", std::max<std::size_t>(4, 2 * workers));
  ASSERT_GE(problems, workers);
  // A small budget per problem keeps each sweep to seconds; the queue and the cache see every
  // problem all the same.
  const std::string args = "sweep --shapes " + (dir / "llm.json").string() + " --json --budget 2 --db ";

  const auto one = testing::run_gmtune(args + (dir / "one.db").string() + " --device 0");
  ASSERT_EQ(one.status, 0) << one.err;
  const auto all = testing::run_gmtune(args + (dir / "all.db").string() + " --devices " + devices);
  ASSERT_EQ(all.status, 0) << all.err;

  const auto a = nlohmann::json::parse(one.out);
  const auto b = nlohmann::json::parse(all.out);
  EXPECT_EQ(a["tuned"], problems);
  EXPECT_EQ(b["tuned"], problems) << "devices of one fingerprint tune each problem once";
  ASSERT_EQ(b["devices"].size(), workers) << all.out;
  std::size_t sum = 0;
  for (const auto& d : b["devices"]) {
    sum += d["tuned"].get<std::size_t>();
    EXPECT_GE(d["tuned"].get<std::size_t>(), 1u) << "gpu" << d["device"] << " took no problem: " << all.out;
  }
  EXPECT_EQ(sum, problems);

  std::size_t duplicated_one = 0, duplicated_all = 0;
  const auto from_one = winners_with_trials((dir / "one.db").string(), duplicated_one);
  const auto from_all = winners_with_trials((dir / "all.db").string(), duplicated_all);
  EXPECT_EQ(from_one.size(), problems);
  EXPECT_EQ(from_all.size(), problems);
  EXPECT_EQ(duplicated_one, 0u);
  EXPECT_EQ(duplicated_all, 0u) << "a configuration of a problem was measured on two devices";

  const double rate_one = a["problems_per_minute"], rate_all = b["problems_per_minute"];
  std::printf("%zu llm problems, budget 2: %.1f problems/min on gpu0, %.1f on %s (%zu workers): %.2fx\n",
              problems, rate_one, rate_all, devices.c_str(), workers, rate_all / rate_one);
  RecordProperty("speedup", std::to_string(rate_all / rate_one));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace gmjit
