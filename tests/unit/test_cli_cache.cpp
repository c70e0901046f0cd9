#include <gtest/gtest.h>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "cache/store.hpp"
#include "cli_runner.hpp"
#include "temp_dir.hpp"

namespace gmjit {
namespace {

namespace fs = std::filesystem;
using testing::line_count;
using testing::run_gmtune;

class CliCache : public testing::TempDirTest {
 protected:
  CliCache() : TempDirTest("gmjit-cli-cache") {}
  void SetUp() override {
    a_ = (dir_ / "a" / "gmjit.db").string();
    populate(a_, "dev-a", "GPU A", {{"sgemm", 1.0}, {"vector_add", 0.5}});
  }

  // Winners as a sweep records them: several verified trials, the fastest first.
  static void populate(const std::string& path, const std::string& device_key, const std::string& device_name,
                       const std::vector<std::pair<std::string, double>>& kernels) {
    cache::Store store(path);
    for (const auto& [kernel, best] : kernels) {
      const cache::DeviceRecord device{device_key, device_name, "sm_90a", R"({"name":")" + device_name + "\"}"};
      const cache::ProblemRecord problem{kernel + "-problem", kernel, "hash", "fp32", "row_major",
                                         kernel == "sgemm" ? R"({"k":64,"m":64,"n":64})" : R"({"n":1024})"};
      std::vector<cache::TrialRecord> trials(3);
      for (std::size_t i = 0; i < trials.size(); ++i) {
        trials[i].config_json = R"({"block":)" + std::to_string(128 << i) + "}";
        trials[i].status = "ok";
        trials[i].median_ms = best * (1.0 + 0.25 * static_cast<double>(i));
        trials[i].repetitions = 10;
      }
      store.record_tuning(device, problem, trials, 0, "test");
    }
    cache::BinaryRecord binary;
    binary.compile_key = device_key + "-key";
    binary.kernel = "sgemm";
    binary.arch = "sm_90a";
    binary.cubin.assign(4096, 'x');
    binary.resources_json = "{}";
    store.put_binary(binary);
  }

  std::string a_;
};

TEST_F(CliCache, ShowPrintsWinnersTrialCountsAndMargins) {
  const auto table = run_gmtune("show --db " + a_);
  ASSERT_EQ(table.status, 0) << table.err;
  EXPECT_NE(table.out.find("2 winners"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("25.0"), std::string::npos) << "runner-up 25% slower: " << table.out;

  const auto json = run_gmtune("show --json --kernel sgemm --db " + a_);
  ASSERT_EQ(json.status, 0) << json.err;
  const auto winners = nlohmann::json::parse(json.out)["winners"];
  ASSERT_EQ(winners.size(), 1u);
  EXPECT_EQ(winners[0]["kernel"], "sgemm");
  EXPECT_EQ(winners[0]["trials"], 3);
  EXPECT_NEAR(winners[0]["margin_percent"].get<double>(), 25.0, 1e-6);
  EXPECT_EQ(winners[0]["config"]["block"], 128);

  const auto csv = run_gmtune("show --csv --db " + a_);
  ASSERT_EQ(csv.status, 0) << csv.err;
  EXPECT_EQ(line_count(csv.out), 3) << csv.out;
  EXPECT_EQ(csv.out.rfind("device,device_key,kernel", 0), 0u);
  EXPECT_EQ(run_gmtune("show --json --csv --db " + a_).status, 2);
}

TEST_F(CliCache, ExportImportRoundTripIsIdempotent) {
  const std::string file = (dir_ / "export.json").string();
  ASSERT_EQ(run_gmtune("export " + file + " --db " + a_).status, 0);
  const std::string b = (dir_ / "b" / "gmjit.db").string();
  const auto first = run_gmtune("import " + file + " --db " + b);
  ASSERT_EQ(first.status, 0) << first.err;
  EXPECT_NE(first.out.find("6 trials added, 2 winners changed"), std::string::npos) << first.out;
  const auto second = run_gmtune("import " + file + " --db " + b);
  ASSERT_EQ(second.status, 0) << second.err;
  EXPECT_NE(second.out.find("0 trials added, 0 winners changed"), std::string::npos) << second.out;
  EXPECT_EQ(run_gmtune("show --csv --db " + b).out, run_gmtune("show --csv --db " + a_).out);
}

TEST_F(CliCache, MergeKeepsTheFasterWinnerPerDeviceAndProblem) {
  const std::string b = (dir_ / "b" / "gmjit.db").string();
  populate(b, "dev-a", "GPU A", {{"sgemm", 0.8}});  // faster on the same device and problem
  const std::string c = (dir_ / "c" / "gmjit.db").string();
  const auto merged = run_gmtune("merge " + a_ + " " + b + " --into " + c);
  ASSERT_EQ(merged.status, 0) << merged.err;
  const auto winners = nlohmann::json::parse(run_gmtune("show --json --kernel sgemm --db " + c).out)["winners"];
  ASSERT_EQ(winners.size(), 1u);
  EXPECT_DOUBLE_EQ(winners[0]["median_ms"].get<double>(), 0.8);
}

TEST_F(CliCache, VerifyPassesThenFailsOnACorruptFile) {
  const auto good = run_gmtune("verify --db " + a_);
  EXPECT_EQ(good.status, 0) << good.out << good.err;
  const std::string bad = (dir_ / "bad" / "gmjit.db").string();
  fs::create_directories(fs::path(bad).parent_path());
  fs::permissions(fs::path(bad).parent_path(), fs::perms::owner_all, fs::perm_options::replace);
  {
    std::ofstream junk(bad, std::ios::binary);
    for (int i = 0; i < 8192; ++i) junk.put(static_cast<char>((i * 7919) & 0xff));
  }
  ::chmod(bad.c_str(), 0600);
  const auto result = run_gmtune("verify --db " + bad);
  EXPECT_EQ(result.status, 1) << result.out << result.err;
  EXPECT_NE(result.out.find(".corrupt-"), std::string::npos) << result.out;
  EXPECT_EQ(line_count(result.err), 2) << "the logger's warning and gmtune's one line: " << result.err;
}

TEST_F(CliCache, GcHonoursTheCap) {
  const auto kept = run_gmtune("gc --max-size 1M --db " + a_);
  ASSERT_EQ(kept.status, 0) << kept.err;
  EXPECT_NE(kept.out.find("evicted 0"), std::string::npos) << kept.out;
  const auto evicted = run_gmtune("gc --max-size 0 --db " + a_);
  ASSERT_EQ(evicted.status, 0) << evicted.err;
  EXPECT_NE(evicted.out.find("evicted 1"), std::string::npos) << evicted.out;
  EXPECT_EQ(run_gmtune("gc --max-size lots --db " + a_).status, 2);
}

TEST_F(CliCache, BadImportsAreOneLineAndLeaveTheCacheUntouched) {
  const std::string before = run_gmtune("show --csv --db " + a_).out;
  const std::string valid = (dir_ / "valid.json").string();
  ASSERT_EQ(run_gmtune("export " + valid + " --db " + a_).status, 0);
  std::string text = testing::read_text(valid);
  auto write = [&](const std::string& name, const std::string& content) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << content;
    return path;
  };
  auto doc = nlohmann::json::parse(text);
  auto other_version = doc;
  other_version["version"] = 99;
  auto unknown_kernel = doc;
  unknown_kernel["problems"][0]["kernel"] = "nosuch";
  const std::vector<std::string> files = {
      write("truncated.json", text.substr(0, text.size() / 2)), write("garbage.json", "not json at all"),
      write("version.json", other_version.dump()), write("kernel.json", unknown_kernel.dump()),
      (dir_ / "missing.json").string()};
  for (const auto& file : files) {
    SCOPED_TRACE(file);
    const auto result = run_gmtune("import " + file + " --db " + a_);
    EXPECT_TRUE(result.status == 1 || result.status == 2) << result.status;
    EXPECT_EQ(line_count(result.err), 1) << result.err;
  }
  EXPECT_EQ(run_gmtune("show --csv --db " + a_).out, before);
}

TEST_F(CliCache, GroupWritableCacheIsRefusedWithTheFix) {
  ::chmod(a_.c_str(), 0660);
  const auto result = run_gmtune("show --db " + a_);
  EXPECT_EQ(result.status, 1);
  EXPECT_EQ(line_count(result.err), 1) << result.err;
  EXPECT_NE(result.err.find("chmod"), std::string::npos) << result.err;
}

}  // namespace
}  // namespace gmjit
