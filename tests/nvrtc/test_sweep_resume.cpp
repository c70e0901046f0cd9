// A sweep killed in the middle of a problem resumes from the trials it committed: on the
// simulated device, so it needs no GPU, through the real gmtune, worker and cache.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "cache/store.hpp"
#include "cli_runner.hpp"
#include "templates/registry.hpp"
#include "cache/keys.hpp"
#include "tuner/worker.hpp"

extern char** environ;

namespace {

namespace fs = std::filesystem;

std::string sgemm_problem_key(const gmjit::Shape& shape) {
  return gmjit::cache::problem_key("sgemm", gmjit::templates::template_hash("gmjit/sgemm.cuh"), "fp32",
                                   gmjit::cache::kRowMajor, shape);
}

std::size_t recorded(const std::string& db, const std::string& problem_key) {
  if (!fs::exists(db)) return 0;
  gmjit::cache::Store store(db);
  return store.trials(gmjit::tuner::simulated_device(0).fingerprint(), problem_key).size();
}

TEST(SweepResume, KilledMidProblemResumesFromItsTrials) {
  const fs::path dir = fs::temp_directory_path() / ("gmjit-resume-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string db = (dir / "cache.db").string();
  const std::string shapes = (dir / "shapes.json").string();
  std::ofstream(shapes) << R"({"sweeps": [
      {"kernel": "sgemm", "dtype": "fp32", "shapes": [{"m": 512, "n": 512, "k": 512}]},
      {"kernel": "vector_add", "dtype": "fp32", "shapes": [{"n": 4096}]}]})";
  const gmjit::Shape first{{"m", 512}, {"n", 512}, {"k", 512}};
  const std::size_t all = gmjit::templates::all_configs(gmjit::templates::find_kernel("sgemm")).size();

  // Start the sweep and kill it once some, but not all, trials of the first problem are in.
  const std::string command = "GMJIT_SIMULATED_DEVICE=1 exec " + gmjit::testing::gmtune_path() +
                              " sweep --strategy exhaustive --shapes " + shapes + " --db " + db + " >" +
                              (dir / "out").string() + " 2>" + (dir / "err").string();
  const char* argv[] = {"sh", "-c", command.c_str(), nullptr};
  pid_t pid = -1;
  ASSERT_EQ(::posix_spawn(&pid, "/bin/sh", nullptr, nullptr, const_cast<char**>(argv), environ), 0);
  std::size_t before = 0;
  for (int i = 0; i < 6000 && before < 40; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    try {
      before = recorded(db, sgemm_problem_key(first));
    } catch (const std::exception&) {
      // The file may be mid-creation; look again.
    }
  }
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  before = recorded(db, sgemm_problem_key(first));
  ASSERT_GE(before, 40u) << gmjit::testing::read_text(dir / "err");
  ASSERT_LT(before, all) << "the sweep finished before it could be killed; the test proves nothing";

  const auto resumed = gmjit::testing::run_gmtune("sweep --strategy exhaustive --shapes " + shapes + " --db " + db,
                                                  "GMJIT_SIMULATED_DEVICE=1");
  ASSERT_EQ(resumed.status, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("resuming after " + std::to_string(before) + " recorded trials"), std::string::npos)
      << resumed.err;
  EXPECT_NE(resumed.out.find("2 tuned"), std::string::npos) << resumed.out;

  // Every configuration measured once across the two runs, plus the winner's final record.
  gmjit::cache::Store store(db);
  const auto device_key = gmjit::tuner::simulated_device(0).fingerprint();
  const auto trials = store.trials(device_key, sgemm_problem_key(first));
  std::set<std::string> configs;
  for (const auto& t : trials) configs.insert(t.config_json);
  EXPECT_EQ(configs.size(), all);
  EXPECT_EQ(trials.size(), all + 1);
  EXPECT_TRUE(store.find_winner(device_key, sgemm_problem_key(first)).has_value());

  const auto again = gmjit::testing::run_gmtune("sweep --shapes " + shapes + " --db " + db, "GMJIT_SIMULATED_DEVICE=1");
  EXPECT_EQ(again.status, 0) << again.err;
  EXPECT_NE(again.out.find("2 already cached"), std::string::npos) << again.out;
  fs::remove_all(dir);
}

}  // namespace
