// What a sweep works on, without a GPU: presets, shapes files, job-array shards, and which
// problems a cache has already finished.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "cache/store.hpp"
#include "gmjit/kernels.hpp"
#include "gmjit/tune.hpp"
#include "templates/registry.hpp"
#include "temp_dir.hpp"
#include "cache/keys.hpp"
#include "unit/cache_test_support.hpp"

namespace gmjit {
namespace {

namespace fs = std::filesystem;
using cache_test::capture_error;

std::string id(const Problem& p) { return p.kernel + "|" + p.dtype + "|" + format_assignments(p.shape) + "|" + p.label; }

nlohmann::json preset_file(const std::string& name) {
  std::ifstream in(std::string(GMJIT_SOURCE_DIR) + "/tuner/presets/" + name + ".json");
  return nlohmann::json::parse(in);
}

std::vector<Problem> synthetic(std::size_t count) {
  std::vector<Problem> problems;
  for (std::size_t i = 0; i < count; ++i) {
    problems.push_back({"sgemm", "fp32", {{"m", 16 * static_cast<std::int64_t>(i + 1)}, {"n", 64}, {"k", 64}}, ""});
  }
  return problems;
}

// Every problem in exactly one shard, shards within one of each other, each shard in list order.
void expect_partition(const std::vector<Problem>& problems) {
  std::map<std::string, std::size_t> position;
  for (std::size_t i = 0; i < problems.size(); ++i) position[id(problems[i])] = i;
  ASSERT_EQ(position.size(), problems.size()) << "test problems must be distinct";
  for (std::size_t count = 1; count <= 16; ++count) {
    SCOPED_TRACE("count " + std::to_string(count));
    std::map<std::string, int> seen;
    std::size_t smallest = problems.size(), largest = 0;
    for (std::size_t index = 0; index < count; ++index) {
      const auto shard = shard_problems(problems, index, count);
      smallest = std::min(smallest, shard.size());
      largest = std::max(largest, shard.size());
      for (std::size_t i = 0; i < shard.size(); ++i) {
        ++seen[id(shard[i])];
        if (i > 0) EXPECT_LT(position.at(id(shard[i - 1])), position.at(id(shard[i])));
      }
      const auto again = shard_problems(problems, index, count);
      ASSERT_EQ(again.size(), shard.size());
      for (std::size_t i = 0; i < shard.size(); ++i) EXPECT_EQ(id(again[i]), id(shard[i]));
    }
    EXPECT_EQ(seen.size(), problems.size());
    for (const auto& [key, times] : seen) EXPECT_EQ(times, 1) << key;
    EXPECT_LE(largest - smallest, 1u);
  }
}

TEST(Shards, PartitionTheLlmPreset) { expect_partition(preset_problems("llm")); }

TEST(Shards, PartitionSyntheticSetsOfEverySize) {
  for (std::size_t size : {0, 1, 2, 3, 7, 16, 17, 100}) {
    SCOPED_TRACE("size " + std::to_string(size));
    expect_partition(synthetic(size));
  }
}

// Tasks of one job array may list the problems in different orders (e.g. files merged in
// another order); the rule ranks by hash, so they still agree.
TEST(Shards, DependOnTheProblemsNotTheirOrder) {
  auto problems = synthetic(10);
  auto reversed = std::vector<Problem>(problems.rbegin(), problems.rend());
  for (std::size_t index = 0; index < 3; ++index) {
    std::set<std::string> a, b;
    for (const auto& p : shard_problems(problems, index, 3)) a.insert(id(p));
    for (const auto& p : shard_problems(reversed, index, 3)) b.insert(id(p));
    EXPECT_EQ(a, b);
  }
}

// Tasks of one array may run different builds (a resubmitted task after an upgrade); the split
// is pinned so that a change of hash or ranking shows here rather than as a shape tuned twice.
TEST(Shards, FollowThePinnedRule) {
  const std::vector<std::vector<std::int64_t>> expected = {{48, 64, 80, 128}, {112, 144, 160}, {16, 32, 96}};
  for (std::size_t index = 0; index < 3; ++index) {
    std::vector<std::int64_t> ms;
    for (const auto& p : shard_problems(synthetic(10), index, 3)) ms.push_back(p.shape.at("m"));
    EXPECT_EQ(ms, expected[index]) << "shard " << index;
  }
}

TEST(Shards, SpreadRunsOfSimilarShapes) {
  // Positional round robin would give shard 0 of 7 every m=1 shape of the llm preset.
  const auto problems = preset_problems("llm");
  std::set<std::int64_t> ms;
  for (const auto& p : shard_problems(problems, 0, 7)) ms.insert(p.shape.at("m"));
  EXPECT_GT(ms.size(), 1u);
}

TEST(Shards, RejectAnIndexOutsideTheCount) {
  EXPECT_EQ(capture_error([] { shard_problems(synthetic(3), 4, 4); }).kind(), ErrorKind::usage);
  EXPECT_EQ(capture_error([] { shard_problems(synthetic(3), 0, 0); }).kind(), ErrorKind::usage);
}

TEST(ShardSpec, ParsesIndexOverCount) {
  EXPECT_EQ(parse_shard("0/1").index, 0u);
  EXPECT_EQ(parse_shard("0/1").count, 1u);
  EXPECT_EQ(parse_shard("3/4").index, 3u);
  EXPECT_EQ(parse_shard("3/4").count, 4u);
  EXPECT_EQ(parse_shard("15/16").index, 15u);
}

TEST(ShardSpec, RejectsMalformedSpecsAsUsage) {
  for (const char* text : {"4/4", "5/4", "0/0", "", "/", "1/", "/4", "-1/4", "1/-4", "+1/4", "a/4", "1/b", "1/4x",
                           " 1/4", "1 /4", "1/4/2", "1", "1.0/4", "99999999999999999999999/4"}) {
    SCOPED_TRACE(text);
    const auto error = capture_error([&] { parse_shard(text); });
    EXPECT_EQ(error.kind(), ErrorKind::usage);
    EXPECT_NE(error.message().find(text), std::string::npos) << error.message();
  }
}

TEST(Presets, LlmTunesItsGemmSweepsInTheWeightLayout) {
  std::set<std::string> listed;
  std::size_t entries = 0;
  const auto file = preset_file("llm");
  for (const auto& sweep : file["sweeps"]) {
    const std::string kernel = sweep["kernel"].get<std::string>();
    for (const auto& s : sweep["shapes"]) {
      ++entries;
      Shape shape{{"m", s["m"].get<std::int64_t>()}, {"n", s["n"].get<std::int64_t>()}, {"k", s["k"].get<std::int64_t>()}};
      if (kernel == "gemm") shape["trans_b"] = 1;
      listed.insert(fmt::format("{} {} {}", kernel, sweep["dtype"].get<std::string>(), format_assignments(shape)));
    }
  }
  EXPECT_EQ(entries, 65u) << "the bundled gemm.json: 51 bf16, 10 fp16 and 4 sgemm shapes";
  EXPECT_EQ(listed.size(), 64u) << "bf16 4096^3 is listed twice (llama-3-8b, square)";
  std::set<std::string> problems;
  for (const auto& p : preset_problems("llm")) {
    problems.insert(fmt::format("{} {} {}", p.kernel, p.dtype, format_assignments(p.shape)));
  }
  EXPECT_EQ(problems, listed);
}

TEST(Presets, GpumodeKeepsTheKernelsOfTheCatalog) {
  std::vector<Problem> expected;
  std::set<std::string> kernels;
  const auto file = preset_file("gpumode");
  for (const auto& sweep : file["sweeps"]) {
    const std::string kernel = sweep["kernel"].get<std::string>();
    const auto& known = templates::catalog();
    if (std::none_of(known.begin(), known.end(), [&](const auto& k) { return k.name == kernel; })) continue;
    kernels.insert(kernel);
    for (const auto& s : sweep["shapes"]) {
      Problem p{kernel, sweep["dtype"].get<std::string>(), {}, s.value("from", std::string())};
      for (const auto& [key, value] : s.items()) {
        if (key != "from") p.shape[key] = value.get<std::int64_t>();
      }
      p.shape = gmjit::validate(p.kernel, p.shape, p.dtype).shape;  // with the data keys it leaves out
      expected.push_back(std::move(p));
    }
  }
  EXPECT_TRUE(kernels.count("vector_add"));
  EXPECT_LT(kernels.size(), file["sweeps"].size()) << "the preset lists kernels the catalog lacks";
  const auto problems = preset_problems("gpumode");
  ASSERT_EQ(problems.size(), expected.size());
  for (std::size_t i = 0; i < problems.size(); ++i) {
    EXPECT_EQ(problems[i].kernel, expected[i].kernel);
    EXPECT_EQ(problems[i].dtype, expected[i].dtype);
    EXPECT_EQ(problems[i].shape, expected[i].shape);
    EXPECT_EQ(problems[i].label, expected[i].label);
  }
}

TEST(Presets, NamesSummariesAndUnknownNames) {
  EXPECT_EQ(preset_names(), (std::vector<std::string>{"default", "llm", "gpumode"}));
  for (const auto& name : preset_names()) EXPECT_FALSE(preset_summary(name).empty()) << name;
  EXPECT_NE(preset_summary("llm").find("trans_b=1"), std::string::npos);
  EXPECT_EQ(preset_problems("default").size(), 4u);
  const auto error = capture_error([] { preset_problems("nosuch"); });
  EXPECT_EQ(error.kind(), ErrorKind::usage);
  EXPECT_NE(error.message().find("llm"), std::string::npos) << "names the presets: " << error.message();
}

class ShapesFile : public testing::TempDirTest {
 protected:
  ShapesFile() : TempDirTest("gmjit-problems") {}

  std::string write(const std::string& text) {
    const auto path = dir_ / "shapes.json";
    std::ofstream(path) << text;
    return path.string();
  }
};

TEST_F(ShapesFile, RepeatedProblemsAreListedOnce) {
  const auto problems = read_shapes_file(write(R"({"sweeps": [
      {"kernel": "vector_add", "dtype": "fp32", "shapes": [{"n": 64, "from": "a"}, {"n": 128}, {"n": 64, "from": "b"}]},
      {"kernel": "vector_add", "shapes": [{"n": 64, "from": "a"}]}]})"));
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_EQ(problems[0].shape.at("n"), 64);
  EXPECT_EQ(problems[0].label, "a; b");
  EXPECT_EQ(problems[1].shape.at("n"), 128);
}

TEST_F(ShapesFile, ASweepsKeysGoToEveryShapeThatDoesNotNameThem) {
  const auto problems = read_shapes_file(write(R"({"sweeps": [{"kernel": "gemm", "dtype": "bf16", "keys": {"trans_b": 1}, "shapes": [
      {"m": 16, "n": 4096, "k": 4096, "from": "decode"}, {"m": 8, "n": 64, "k": 32, "trans_b": 0},
      {"m": 16, "n": 4096, "k": 4096, "trans_b": 1, "from": "llama"}]}]})"));
  ASSERT_EQ(problems.size(), 2u) << "the third shape is the first one";
  EXPECT_EQ(problems[0].shape, (Shape{{"m", 16}, {"n", 4096}, {"k", 4096}, {"trans_b", 1}}));
  EXPECT_EQ(problems[0].label, "decode; llama");
  EXPECT_EQ(problems[1].shape, (Shape{{"m", 8}, {"n", 64}, {"k", 32}, {"trans_b", 0}}));
  for (const char* keys : {R"("keys": [1])", R"("keys": {"trans_b": "1"})", R"("keys": {"nosuch": 1})"}) {
    SCOPED_TRACE(keys);
    const std::string text = std::string(R"({"sweeps": [{"kernel": "gemm", "dtype": "bf16", )") + keys +
                             R"(, "shapes": [{"m": 1, "n": 1, "k": 1}]}]})";
    const auto error = capture_error([&] { read_shapes_file(write(text)); });
    EXPECT_EQ(error.kind(), ErrorKind::usage);
    EXPECT_NE(error.message().find("sweep 0"), std::string::npos) << error.message();
  }
}

TEST_F(ShapesFile, UnknownKernelStaysAUsageErrorNamingTheSweep) {
  const auto error = capture_error([&] {
    read_shapes_file(write(R"({"sweeps": [{"kernel": "vector_add", "shapes": [{"n": 64}]},
                                          {"kernel": "matmul", "dtype": "bf16", "shapes": [{"m": 1, "n": 2, "k": 3}]}]})"));
  });
  EXPECT_EQ(error.kind(), ErrorKind::usage);
  EXPECT_NE(error.message().find("sweep 1"), std::string::npos) << error.message();
  EXPECT_NE(error.message().find("matmul"), std::string::npos) << error.message();
}

TEST_F(ShapesFile, KernelFilterKeepsOnlyThoseSweeps) {
  const auto problems = read_shapes_file(write(R"({"sweeps": [{"kernel": "vector_add", "shapes": [{"n": 64}]},
      {"kernel": "sgemm", "shapes": [{"m": 64, "n": 64, "k": 64}]}]})"),
                                         {"sgemm"});
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].kernel, "sgemm");
}

class Pending : public ShapesFile {
 protected:
  static std::string key_of(const Problem& p) {
    const auto& kernel = templates::find_kernel(p.kernel);
    return cache::problem_key(p.kernel, templates::template_hash(kernel.header), p.dtype, cache::kRowMajor, p.shape);
  }

  void record_winner(const fs::path& db, const std::string& device_key, const Problem& p) {
    cache::Store store(db);
    const cache::DeviceRecord device{device_key, "GPU " + device_key, "sm_90a", R"({"name":"test"})"};
    const auto& kernel = templates::find_kernel(p.kernel);
    const cache::ProblemRecord problem{key_of(p), p.kernel, templates::template_hash(kernel.header), p.dtype,
                                       cache::kRowMajor, nlohmann::json(p.shape).dump()};
    cache::TrialRecord trial;
    trial.config_json = R"({"block":128})";
    trial.status = "ok";
    trial.median_ms = 0.5;
    trial.repetitions = 10;
    store.record_tuning(device, problem, {trial}, 0, "test");
  }

  std::vector<Problem> problems_ = {
      {"vector_add", "fp32", {{"n", 1024}}, "x"},
      {"vector_add", "fp16", {{"n", 1024}}, "y"},
      {"sgemm", "fp32", {{"m", 64}, {"n", 64}, {"k", 64}}, "z"},
  };
};

TEST_F(Pending, AMissingCacheFinishesNothingAndIsNotCreated) {
  const auto db = dir_ / "sub" / "gmjit.db";
  EXPECT_EQ(pending_problems(problems_, db.string(), "").size(), 3u);
  EXPECT_EQ(pending_problems(problems_, db.string(), "dev-a").size(), 3u);
  EXPECT_FALSE(fs::exists(db));
  EXPECT_FALSE(fs::exists(db.parent_path()));
}

TEST_F(Pending, AWinnerFinishesItsProblemOnItsDevice) {
  const auto db = dir_ / "sub" / "gmjit.db";
  record_winner(db, "dev-a", problems_[1]);
  const auto on_a = pending_problems(problems_, db.string(), "dev-a");
  ASSERT_EQ(on_a.size(), 2u);
  EXPECT_EQ(on_a[0].label, "x");
  EXPECT_EQ(on_a[1].label, "z");
  EXPECT_EQ(pending_problems(problems_, db.string(), "dev-b").size(), 3u) << "another GPU has not tuned it";
  const auto anywhere = pending_problems(problems_, db.string(), "");
  ASSERT_EQ(anywhere.size(), 2u) << "without a device, a winner on any device counts";
  EXPECT_EQ(anywhere[1].label, "z");
}

TEST_F(Pending, AnEmptyDtypeMeansTheKernelsFirst) {
  const auto db = dir_ / "sub" / "gmjit.db";
  record_winner(db, "dev-a", problems_[2]);
  const std::vector<Problem> implicit = {{"sgemm", "", {{"m", 64}, {"n", 64}, {"k", 64}}, ""}};
  EXPECT_TRUE(pending_problems(implicit, db.string(), "dev-a").empty());
}

}  // namespace
}  // namespace gmjit
