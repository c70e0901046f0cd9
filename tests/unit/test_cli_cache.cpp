#include <gtest/gtest.h>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>

#include "cache/keys.hpp"
#include "cache/store.hpp"
#include "cache_test_support.hpp"
#include "cli_runner.hpp"
#include "temp_dir.hpp"
#include "templates/registry.hpp"

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

  static Shape shape_of(const std::string& kernel) {
    return kernel == "sgemm" ? Shape{{"k", 64}, {"m", 64}, {"n", 64}} : Shape{{"n", 1024}};
  }
  // The first valid configurations of a kernel at its shape here.
  static std::vector<Config> configs_of(const std::string& kernel) {
    return templates::valid_configs(templates::find_kernel(kernel), shape_of(kernel));
  }

  // Winners as a sweep records them: several verified trials, the fastest first.
  static void populate(const std::string& path, const std::string& device_key, const std::string& device_name,
                       const std::vector<std::pair<std::string, double>>& kernels) {
    cache::Store store(path);
    for (const auto& [kernel, best] : kernels) {
      const cache::DeviceRecord device{device_key, device_name, "sm_90a", R"({"name":")" + device_name + "\"}"};
      const std::string hash = templates::template_hash(templates::find_kernel(kernel).header);
      const Shape shape = shape_of(kernel);
      const cache::ProblemRecord problem{cache::problem_key(kernel, hash, "fp32", cache::kRowMajor, shape), kernel,
                                         hash, "fp32", cache::kRowMajor, nlohmann::json(shape).dump()};
      const auto configs = configs_of(kernel);
      std::vector<cache::TrialRecord> trials(3);
      for (std::size_t i = 0; i < trials.size(); ++i) {
        trials[i].config_json = nlohmann::json(configs.at(i)).dump();
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
  EXPECT_EQ(winners[0]["config"], nlohmann::json(configs_of("sgemm").front()));

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

// Each file breaks one import rule in one record; the import is refused with one line naming the
// table and row and why, and the cache stays as it was.
TEST_F(CliCache, PoisonedImportsAreRefusedNamingTheFirstBadRecord) {
  const std::string before = run_gmtune("show --csv --db " + a_).out;
  const std::string valid = (dir_ / "valid.json").string();
  ASSERT_EQ(run_gmtune("export " + valid + " --db " + a_).status, 0);
  const auto doc = nlohmann::json::parse(testing::read_text(valid));
  ASSERT_EQ(doc["problems"][0]["kernel"], "sgemm");
  // The winning trial of the sgemm problem, and a configuration in sgemm's domain that its
  // constraints refuse at this shape.
  std::size_t sgemm_winner = 0;
  for (const auto& w : doc["winners"]) {
    if (w["problem"] == doc["problems"][0]["key"]) sgemm_winner = w["trial"].get<std::size_t>();
  }
  const auto& sgemm = templates::find_kernel("sgemm");
  std::string invalid_config;
  for (const auto& config : templates::all_configs(sgemm)) {
    if (!sgemm.violation(config, shape_of("sgemm")).empty()) {
      invalid_config = nlohmann::json(config).dump();
      break;
    }
  }
  ASSERT_FALSE(invalid_config.empty()) << "sgemm refuses no configuration at 64^3";
  const std::string trial = "trials[" + std::to_string(sgemm_winner) + "]";

  struct Case {
    std::string name;
    std::function<void(nlohmann::json&)> change;
    std::vector<std::string> expected;  // parts of the one line
  };
  auto winner = [&](nlohmann::json& d) -> nlohmann::json& { return d["trials"][sgemm_winner]; };
  auto config_with = [&](const std::string& key, nlohmann::json value) {
    auto config = nlohmann::json(configs_of("sgemm").front());
    config[key] = std::move(value);
    return config.dump();
  };
  const std::string first_param = sgemm.params.front().name;
  const std::vector<Case> cases = {
      {"outside the domain", [&](auto& d) { winner(d)["config_json"] = config_with(first_param, 99999); },
       {trial, first_param + "=99999 is outside the domain"}},
      {"negative median", [&](auto& d) { winner(d)["median_ms"] = -1; },
       {trial, "median_ms -1 of a passing trial is not a positive finite number"}},
      {"zero median", [&](auto& d) { winner(d)["median_ms"] = 0; }, {trial, "median_ms 0"}},
      {"array as a configuration", [&](auto& d) { winner(d)["config_json"] = "[128, 4]"; },
       {trial, "config_json \"[128, 4]\" is not a JSON object"}},
      {"a parameter missing", [&](auto& d) { winner(d)["config_json"] = "{}"; }, {trial, "lacks parameter"}},
      {"a parameter unknown", [&](auto& d) { winner(d)["config_json"] = config_with("warp_magic", 1); },
       {trial, "sgemm has no parameter \"warp_magic\""}},
      {"a fractional value", [&](auto& d) { winner(d)["config_json"] = config_with(first_param, 128.5); },
       {trial, "not an integer"}},
      {"invalid for the shape", [&](auto& d) { winner(d)["config_json"] = invalid_config; },
       {trial, "is not valid for shape"}},
      {"unknown dtype", [&](auto& d) { d["problems"][0]["dtype"] = "fp64"; }, {"problems[0]", "fp64"}},
      {"another shape key", [&](auto& d) { d["problems"][0]["shape_json"] = R"({"k":64,"m":64,"x":64})"; },
       {"problems[0]", "no problem key 'x'"}},
      {"a key that is not the fields'", [&](auto& d) { d["problems"][0]["shape_json"] = R"({"k":64,"m":64,"n":128})"; },
       {"problems[0]", "is not the problem key of its fields"}},
      {"another layout", [&](auto& d) { d["problems"][0]["layout"] = "col_major"; }, {"problems[0]", "layout"}},
      {"a long string", [&](auto& d) { winner(d)["library_version"] = std::string(1000, 'v'); },
       {trial, "library_version is 1000 bytes; at most 256"}},
      {"registers beyond the hardware", [&](auto& d) { winner(d)["registers"] = 256; }, {trial, "registers 256"}},
      {"a negative count", [&](auto& d) { d["winners"][0]["trial_count"] = -5; }, {"winners[0]", "trial_count -5"}},
      {"a control character", [&](auto& d) { d["problems"][0]["kernel"] = "sg\nemm"; },
       {"problems[0]", "unknown kernel \"sg\\nemm\""}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto changed = doc;
    c.change(changed);
    const std::string path = (dir_ / "poisoned.json").string();
    std::ofstream(path, std::ios::trunc) << changed.dump();
    const auto result = run_gmtune("import " + path + " --db " + a_);
    EXPECT_EQ(result.status, 2) << result.out << result.err;
    EXPECT_EQ(line_count(result.err), 1) << result.err;
    EXPECT_NE(result.err.find(path), std::string::npos) << result.err;
    for (const auto& part : c.expected) EXPECT_NE(result.err.find(part), std::string::npos) << part << " in " << result.err;
  }

  // Too large is refused from its size alone: a sparse file, never read.
  const fs::path huge = dir_ / "huge.json";
  std::ofstream(huge).put('{');
  fs::resize_file(huge, (std::uintmax_t{512} << 20) + 1);
  const auto result = run_gmtune("import " + huge.string() + " --db " + a_);
  EXPECT_EQ(result.status, 2);
  EXPECT_NE(result.err.find("an import file may have at most 536870912"), std::string::npos) << result.err;

  EXPECT_EQ(run_gmtune("show --csv --db " + a_).out, before);
  const auto verify = run_gmtune("verify --db " + a_);
  EXPECT_EQ(verify.status, 0) << verify.out;
}

// verify applies the import rules to every record of a cache file, e.g. one a tool wrote directly.
TEST_F(CliCache, VerifyReportsRecordsThatBreakTheImportRules) {
  {
    cache_test::RawDb raw(a_);
    raw.exec("UPDATE trials SET config_json = '{\"block\":99999}' WHERE id = (SELECT min(trial_id) FROM winners)");
    raw.exec("UPDATE trials SET median_ms = -1 WHERE id = (SELECT max(trial_id) FROM winners)");
  }
  const auto result = run_gmtune("verify --db " + a_);
  EXPECT_EQ(result.status, 1) << result.out << result.err;
  EXPECT_NE(result.out.find("problem: record trials["), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("has no parameter \"block\""), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("median_ms -1 of a passing trial"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("NOT ok"), std::string::npos) << result.out;
}

TEST_F(CliCache, VerifyKeepsReportingAQuarantinedCopyUntilItIsRemoved) {
  const fs::path bad = dir_ / "bad" / "gmjit.db";
  fs::create_directories(bad.parent_path());
  fs::permissions(bad.parent_path(), fs::perms::owner_all, fs::perm_options::replace);
  std::ofstream(bad, std::ios::binary) << std::string(8192, '\x5a');
  ::chmod(bad.c_str(), 0600);
  const auto first = run_gmtune("verify --db " + bad.string());
  EXPECT_EQ(first.status, 1) << first.out;
  std::vector<fs::path> copies;
  for (const auto& entry : fs::directory_iterator(bad.parent_path())) {
    if (entry.path().filename().string().find(".corrupt-") != std::string::npos) copies.push_back(entry.path());
  }
  ASSERT_EQ(copies.size(), 1u);

  const auto again = run_gmtune("verify --db " + bad.string());
  EXPECT_EQ(again.status, 1) << "the fresh cache is sound, but what the old one held is lost: " << again.out;
  EXPECT_NE(again.out.find("still at " + copies[0].string()), std::string::npos) << again.out;
  EXPECT_EQ(line_count(again.err), 1) << "no new quarantine, only gmtune's line: " << again.err;

  fs::remove(copies[0]);
  const auto clean = run_gmtune("verify --db " + bad.string());
  EXPECT_EQ(clean.status, 0) << clean.out;
}

// A dry run only reads: on a sound cache nothing changes; on a corrupt one the file stays where it
// is, as it is, and no file appears.
TEST_F(CliCache, SweepDryRunOpensNothingForWriting) {
  // Each file's name, size and a hash of its bytes.
  auto listing = [](const fs::path& dir) {
    std::map<std::string, std::string> files;
    for (const auto& entry : fs::directory_iterator(dir)) {
      const std::string bytes = testing::read_text(entry.path());
      files[entry.path().filename().string()] =
          std::to_string(bytes.size()) + " bytes, hash " + std::to_string(std::hash<std::string>{}(bytes));
    }
    return files;
  };
  const fs::path sound_dir = fs::path(a_).parent_path();
  const auto sound_before = listing(sound_dir);
  const auto sound = run_gmtune("sweep --dry-run --kernels vector_add --db " + a_);
  EXPECT_EQ(sound.status, 0) << sound.err;
  EXPECT_NE(sound.err.find("already have a winner"), std::string::npos) << sound.err;
  EXPECT_EQ(listing(sound_dir), sound_before);

  const fs::path bad = dir_ / "bad" / "gmjit.db";
  fs::create_directories(bad.parent_path());
  fs::permissions(bad.parent_path(), fs::perms::owner_all, fs::perm_options::replace);
  std::ofstream(bad, std::ios::binary) << std::string(8192, '\x5a');
  ::chmod(bad.c_str(), 0600);
  const auto bad_before = listing(bad.parent_path());
  ASSERT_EQ(bad_before.size(), 1u);
  const auto result = run_gmtune("sweep --dry-run --kernels vector_add --db " + bad.string());
  EXPECT_EQ(result.status, 1) << result.out << result.err;
  EXPECT_EQ(line_count(result.err), 1) << result.err;
  EXPECT_NE(result.err.find(bad.string()), std::string::npos) << result.err;
  EXPECT_EQ(listing(bad.parent_path()), bad_before);
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
