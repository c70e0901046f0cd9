// `gmtune tune` records what it measured as a sweep does, and user kernels from --kernel-file or
// GMJIT_KERNEL_PATH are listed, compiled, tuned and swept: through the real gmtune, worker and
// cache, on the simulated device (real NVRTC compiles, no GPU).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>

#include "cache/keys.hpp"
#include "cache/store.hpp"
#include "cli_runner.hpp"
#include "gmjit/error.hpp"
#include "gmjit/runtime.hpp"
#include "kernel_files.hpp"
#include "temp_dir.hpp"
#include "templates/registry.hpp"
#include "tuner/worker.hpp"

namespace gmjit {
namespace {

namespace fs = std::filesystem;
using testing::run_gmtune;
using testing::write_user_manifest;

class CliTune : public testing::TempDirTest {
 protected:
  CliTune() : TempDirTest("gmjit-cli-tune") {}

  // The default cache, and every other place a cache could be made, lie in the test's directory.
  std::string env(const std::string& more = {}) const {
    return "GMJIT_SIMULATED_DEVICE=1 GMJIT_CACHE=" + default_db_.string() + " XDG_CACHE_HOME=" +
           (dir_ / "xdg").string() + " HOME=" + (dir_ / "home").string() + " " + more;
  }

  nlohmann::json winners(const fs::path& db) {
    const auto shown = run_gmtune("show --json --db " + db.string(), env());
    EXPECT_EQ(shown.status, 0) << shown.err;
    return shown.status == 0 ? nlohmann::json::parse(shown.out)["winners"] : nlohmann::json::array();
  }

  std::string shapes_file(const std::string& kernel, std::int64_t n) {
    const auto path = dir_ / (kernel + "-shapes.json");
    std::ofstream(path) << nlohmann::json{
        {"sweeps", {{{"kernel", kernel}, {"dtype", "fp32"}, {"shapes", {{{"n", n}, {"from", "test"}}}}}}}}
                               .dump();
    return path.string();
  }

  const fs::path default_db_ = dir_ / "default" / "gmjit.db";
  const fs::path db_ = dir_ / "cache" / "gmjit.db";
};

TEST_F(CliTune, TuneRecordsTrialsAndWinnerThatShowAndSweepFind) {
  const auto tuned = run_gmtune("tune vector_add --shape n=65536 --budget 4 --json --db " + db_.string(), env());
  ASSERT_EQ(tuned.status, 0) << tuned.err;
  EXPECT_NE(tuned.err.find("trials and winner recorded in " + db_.string()), std::string::npos) << tuned.err;
  const auto report = nlohmann::json::parse(tuned.out);
  ASSERT_TRUE(report["winner"].is_number());
  const auto& best = report["trials"][report["winner"].get<std::size_t>()];

  const auto shown = winners(db_);
  ASSERT_EQ(shown.size(), 1u) << shown.dump();
  EXPECT_EQ(shown[0]["kernel"], "vector_add");
  EXPECT_EQ(shown[0]["dtype"], "fp32");
  EXPECT_EQ(shown[0]["shape"], (nlohmann::json{{"n", 65536}}));
  EXPECT_EQ(shown[0]["config"], best["config"]);
  EXPECT_EQ(shown[0]["device_key"], tuner::simulated_device(0).fingerprint());
  EXPECT_EQ(shown[0]["trials"].get<std::size_t>(), report["trials"].size());

  // Every trial was committed, and the winner once more with its final timing, as a sweep leaves them.
  const std::string problem_key = cache::problem_key(
      "vector_add", templates::template_hash("gmjit/vector_add.cuh"), "fp32", cache::kRowMajor, {{"n", 65536}});
  {
    cache::Store store(db_);
    EXPECT_EQ(store.trials(tuner::simulated_device(0).fingerprint(), problem_key).size(), report["trials"].size() + 1);
  }

  const auto swept = run_gmtune("sweep --shapes " + shapes_file("vector_add", 65536) + " --db " + db_.string(), env());
  ASSERT_EQ(swept.status, 0) << swept.err;
  EXPECT_NE(swept.out.find("0 tuned, 1 already cached"), std::string::npos) << swept.out;

  // Tuned again, the recorded winner is the incumbent and the run's trials are added.
  const auto again = run_gmtune("tune vector_add --shape n=65536 --budget 2 --db " + db_.string(), env());
  ASSERT_EQ(again.status, 0) << again.err;
  cache::Store store(db_);
  EXPECT_GT(store.trials(tuner::simulated_device(0).fingerprint(), problem_key).size(), report["trials"].size() + 1);
  EXPECT_EQ(store.winners().size(), 1u);
}

TEST_F(CliTune, WithoutDbTuneRecordsInTheDefaultCacheAndNoRecordWritesNothing) {
  const auto looked = run_gmtune("tune vector_add --shape n=4096 --budget 2 --no-record", env());
  ASSERT_EQ(looked.status, 0) << looked.err;
  EXPECT_NE(looked.out.find("winner: "), std::string::npos) << looked.out;
  EXPECT_EQ(looked.err.find("recorded"), std::string::npos) << looked.err;
  EXPECT_TRUE(fs::is_empty(dir_)) << "--no-record created " << fs::directory_iterator(dir_)->path();

  const auto recorded = run_gmtune("tune vector_add --shape n=4096 --budget 2", env());
  ASSERT_EQ(recorded.status, 0) << recorded.err;
  EXPECT_NE(recorded.err.find("recorded in " + default_db_.string()), std::string::npos) << recorded.err;
  EXPECT_EQ(winners(default_db_).size(), 1u);
}

// The Runtime names the command that fills its cache; run as printed, it records the winner the
// Runtime looks up (the gpu tier launches it; here the device is the simulated one).
TEST_F(CliTune, TheRuntimesMissMessageNamesACommandThatRecordsTheWinner) {
  RuntimeOptions options;
  options.db_path = db_.string();
  options.miss_policy = MissPolicy::fail;
  Runtime runtime(options);
  std::string message;
  try {
    runtime.resolve("vector_add", {{"n", 8192}});
    FAIL() << "resolved without a cache file";
  } catch (const Error& e) {
    message = e.message();
  }
  const std::string command = testing::quoted_gmtune_arguments(message);
  ASSERT_EQ(command, "tune vector_add --shape n=8192 --dtype fp32 --db " + db_.string());

  const auto tuned = run_gmtune(command + " --budget 2", env());
  ASSERT_EQ(tuned.status, 0) << tuned.err;
  cache::Store store(db_);
  const std::string problem_key = cache::problem_key(
      "vector_add", templates::template_hash("gmjit/vector_add.cuh"), "fp32", cache::kRowMajor, {{"n", 8192}});
  EXPECT_TRUE(store.find_winner(tuner::simulated_device(0).fingerprint(), problem_key).has_value());
}

// A user kernel reaches the worker process (its manifest and header travel with the problem), so
// it is tuned and swept like a built-in, whichever way its manifest was given.
TEST_F(CliTune, AKernelFileIsListedCompiledTunedAndSwept) {
  const std::string manifest = write_user_manifest(dir_, "mine");
  const std::string shapes = shapes_file("mine", 50000);
  for (const auto& [option, environment] : {std::pair<std::string, std::string>{" --kernel-file " + manifest, ""},
                                            {"", "GMJIT_KERNEL_PATH=" + manifest}}) {
    SCOPED_TRACE(environment.empty() ? "--kernel-file" : "GMJIT_KERNEL_PATH");
    const std::string tag = environment.empty() ? "option" : "path";

    const auto listed = run_gmtune("list" + option, env(environment));
    ASSERT_EQ(listed.status, 0) << listed.err;
    EXPECT_NE(listed.out.find("mine  (user/mine.cuh)"), std::string::npos) << listed.out;

    const fs::path out = dir_ / ("compiled-" + tag);
    const auto compiled = run_gmtune(
        "compile mine --shape n=1000 --config block=64 --arch sm_90a --out " + out.string() + option, env(environment));
    ASSERT_EQ(compiled.status, 0) << compiled.err;
    bool source = false;
    for (const auto& entry : fs::directory_iterator(out)) {
      if (entry.path().extension() == ".cu") {
        source = testing::read_text(entry.path()).find("user/mine.cuh") != std::string::npos;
      }
    }
    EXPECT_TRUE(source) << "no .cu including user/mine.cuh in " << out;

    const fs::path tuned_db = dir_ / ("tuned-" + tag + ".db");
    const auto tuned = run_gmtune(
        "tune mine --shape n=100000 --strategy exhaustive --db " + tuned_db.string() + option, env(environment));
    ASSERT_EQ(tuned.status, 0) << tuned.err;
    const auto tuned_winners = winners(tuned_db);
    ASSERT_EQ(tuned_winners.size(), 1u);
    EXPECT_EQ(tuned_winners[0]["kernel"], "mine");
    EXPECT_EQ(tuned_winners[0]["trials"], 3) << "one trial per block size";

    const fs::path swept_db = dir_ / ("swept-" + tag + ".db");
    const auto swept =
        run_gmtune("sweep --shapes " + shapes + " --db " + swept_db.string() + option, env(environment));
    ASSERT_EQ(swept.status, 0) << swept.err;
    EXPECT_NE(swept.out.find("1 tuned"), std::string::npos) << swept.out;
    const auto swept_winners = winners(swept_db);
    ASSERT_EQ(swept_winners.size(), 1u);
    EXPECT_EQ(swept_winners[0]["kernel"], "mine");
    EXPECT_EQ(swept_winners[0]["shape"], (nlohmann::json{{"n", 50000}}));
  }
}

}  // namespace
}  // namespace gmjit
