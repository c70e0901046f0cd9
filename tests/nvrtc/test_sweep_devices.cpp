// Sweeps over several devices and over job-array shards, through the real gmtune, workers and
// cache, on simulated devices (GMJIT_SIMULATED_DEVICES names them; equal names are one
// fingerprint), so they need no GPU: the shared queue, fingerprint groups, --per-device, Ctrl-C
// and resume, concurrent writers to one cache, and the merge of shard caches.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "cache/store.hpp"
#include "cli_runner.hpp"
#include "temp_dir.hpp"
#include "gmjit/tune.hpp"
#include "templates/registry.hpp"
#include "cache/keys.hpp"
#include "tuner/worker.hpp"

extern char** environ;

namespace {

namespace fs = std::filesystem;
using gmjit::testing::read_text;
using gmjit::testing::run_gmtune;

constexpr const char* kSameTwice = "gmjit simulated H200,gmjit simulated H200";
constexpr const char* kTwoKinds = "gmjit simulated H200,gmjit simulated H100";
constexpr std::size_t kProblems = 6;

std::string fingerprint(const std::string& name) {
  gmjit::DeviceInfo device = gmjit::tuner::simulated_device(0);
  device.name = name;
  return device.fingerprint();
}

std::string vector_add_key(std::int64_t n) {
  return gmjit::cache::problem_key("vector_add", gmjit::templates::template_hash("gmjit/vector_add.cuh"), "fp32",
                                   gmjit::cache::kRowMajor, {{"n", n}});
}

std::int64_t size_of(std::size_t i) { return 4096 * static_cast<std::int64_t>(i + 1); }

// problem key -> winning configuration, of one device fingerprint.
std::map<std::string, std::string> winners(const std::string& db, const std::string& device_key) {
  std::map<std::string, std::string> out;
  gmjit::cache::Store store(db);
  for (const auto& w : store.winners("vector_add")) {
    if (w.device_key == device_key) out[w.problem_key] = w.config_json;
  }
  return out;
}

class SweepDevices : public gmjit::testing::TempDirTest {
 protected:
  SweepDevices() : TempDirTest("gmjit-sweep-devices") {}
  void SetUp() override {
    nlohmann::json shapes = nlohmann::json::array();
    for (std::size_t i = 0; i < kProblems; ++i) shapes.push_back({{"n", size_of(i)}});
    std::ofstream(shapes_) << nlohmann::json{{"sweeps", {{{"kernel", "vector_add"}, {"dtype", "fp32"}, {"shapes", shapes}}}}}
                                  .dump();
  }

  static std::string env(const std::string& names) {
    return "GMJIT_SIMULATED_DEVICE=1 GMJIT_SIMULATED_DEVICES='" + names + "'";
  }
  std::string db(const std::string& name) const { return (dir_ / name).string(); }
  std::string sweep_args(const std::string& db_path, const std::string& extra = {}) const {
    return "sweep --json --budget 8 --shapes " + shapes_ + " --db " + db_path + " " + extra;
  }
  static nlohmann::json summary(const gmjit::testing::CliResult& result) {
    return nlohmann::json::parse(result.out);
  }

  // Every problem's trials: each configuration once, then the winner's final record.
  void expect_each_config_once(const std::string& db_path, const std::string& device_key) {
    gmjit::cache::Store store(db_path);
    for (std::size_t i = 0; i < kProblems; ++i) {
      const auto trials = store.trials(device_key, vector_add_key(size_of(i)));
      std::set<std::string> configs;
      for (const auto& t : trials) configs.insert(t.config_json);
      EXPECT_EQ(trials.size(), configs.size() + 1) << "problem " << i << ": a configuration measured twice";
      for (const auto& t : trials) EXPECT_NE(t.status, "crashed") << t.config_json << " " << t.detail;
    }
  }

  // A sweep in which both devices tune every problem, each for its own winners.
  void expect_every_problem_tuned_on_both(const std::string& db_path, const std::string& extra,
                                          const std::string& environment) {
    const auto result = run_gmtune(sweep_args(db_path, extra), environment);
    ASSERT_EQ(result.status, 0) << result.err;
    const auto s = summary(result);
    EXPECT_EQ(s["tuned"], 2 * kProblems) << result.out;
    EXPECT_EQ(s["devices"][0]["tuned"], kProblems);
    EXPECT_EQ(s["devices"][1]["tuned"], kProblems);
  }

  const std::string shapes_ = (dir_ / "shapes.json").string();
};

TEST_F(SweepDevices, InterchangeableDevicesShareTheQueueAndAgreeWithOneDevice) {
  const auto one = run_gmtune(sweep_args(db("one.db")), env(kSameTwice));
  ASSERT_EQ(one.status, 0) << one.err;
  const auto all = run_gmtune(sweep_args(db("all.db"), "--devices all"), env(kSameTwice));
  ASSERT_EQ(all.status, 0) << all.err;

  const auto s = summary(all);
  EXPECT_EQ(s["tuned"], kProblems) << all.out;
  ASSERT_EQ(s["devices"].size(), 2u) << all.out;
  const std::size_t first = s["devices"][0]["tuned"], second = s["devices"][1]["tuned"];
  EXPECT_EQ(first + second, kProblems) << "a problem tuned on one device is not tuned again on the other";
  EXPECT_GE(first, 1u) << all.out;
  EXPECT_GE(second, 1u) << all.out;
  EXPECT_EQ(s["devices"][0]["device_key"], s["devices"][1]["device_key"]);

  const std::string key = fingerprint("gmjit simulated H200");
  const auto expected = winners(db("one.db"), key);
  EXPECT_EQ(expected.size(), kProblems);
  EXPECT_EQ(winners(db("all.db"), key), expected) << "the same winners as the one-device sweep";
  expect_each_config_once(db("all.db"), key);
  // Progress names each device's problem.
  EXPECT_NE(all.err.find("gpu0 ["), std::string::npos) << all.err;
  EXPECT_NE(all.err.find("gpu1 ["), std::string::npos) << all.err;

  const auto again = run_gmtune(sweep_args(db("all.db"), "--devices 0,1"), env(kSameTwice));
  ASSERT_EQ(again.status, 0) << again.err;
  EXPECT_EQ(summary(again)["skipped"], kProblems) << again.out;
}

TEST_F(SweepDevices, EachFingerprintGetsItsOwnWinners) {
  expect_every_problem_tuned_on_both(db("c.db"), "--devices all", env(kTwoKinds));
  if (HasFatalFailure()) return;
  for (const char* name : {"gmjit simulated H200", "gmjit simulated H100"}) {
    EXPECT_EQ(winners(db("c.db"), fingerprint(name)).size(), kProblems) << name;
    expect_each_config_once(db("c.db"), fingerprint(name));
  }
}

TEST_F(SweepDevices, PerDeviceTunesEveryProblemOnEveryDevice) {
  expect_every_problem_tuned_on_both(db("p.db"), "--devices 0,1 --per-device", env(kSameTwice));
  if (HasFatalFailure()) return;
  EXPECT_EQ(winners(db("p.db"), fingerprint("gmjit simulated H200")).size(), kProblems);
}

TEST_F(SweepDevices, AMissingDeviceFailsBeforeTheCacheIsTouched) {
  const auto result = run_gmtune(sweep_args(db("m.db"), "--devices 0,2"), env(kSameTwice));
  EXPECT_EQ(result.status, 1) << result.err;
  EXPECT_NE(result.err.find("simulated device 2 does not exist"), std::string::npos) << result.err;
  EXPECT_FALSE(fs::exists(db("m.db")));
}

// The processes whose parent is `parent`: a sweep's workers.
std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> children;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const auto close = text.rfind(')');  // the command name may hold spaces
    if (close == std::string::npos) continue;
    std::istringstream rest(text.substr(close + 2));
    std::string state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent) children.push_back(static_cast<pid_t>(std::stoi(name)));
  }
  return children;
}

enum class Stop { ctrl_c_to_the_group, sigterm_to_the_workers };

// Stops a two-device exhaustive sweep in the middle, then resumes it: gmtune must exit 1 on its
// own with the resume hint, no candidate may be recorded as crashed for a worker that a signal
// ended, and the resumed sweep measures every configuration of every problem once.
void stop_and_resume(const fs::path& dir, const std::string& shapes, const std::string& environment, Stop how) {
  const std::string cache = (dir / "i.db").string();
  const std::string command = environment + " exec " + gmjit::testing::gmtune_path() +
                              " sweep --strategy exhaustive --devices all --shapes " + shapes + " --db " + cache +
                              " >" + (dir / "out").string() + " 2>" + (dir / "err").string();
  const char* argv[] = {"sh", "-c", command.c_str(), nullptr};
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attributes, 0);
  pid_t pid = -1;
  ASSERT_EQ(::posix_spawn(&pid, "/bin/sh", nullptr, &attributes, const_cast<char**>(argv), environ), 0);
  posix_spawnattr_destroy(&attributes);

  const std::string key = fingerprint("gmjit simulated H200");
  auto recorded = [&] {
    std::size_t count = 0;
    try {
      if (!fs::exists(cache)) return count;
      gmjit::cache::Store store(cache);
      for (std::size_t i = 0; i < kProblems; ++i) count += store.trials(key, vector_add_key(size_of(i))).size();
    } catch (const std::exception&) {
      // The file may be mid-creation; look again.
    }
    return count;
  };
  for (int i = 0; i < 6000 && recorded() < 10; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (how == Stop::ctrl_c_to_the_group) {
    // What a terminal does: the foreground process group, gmtune and its workers, gets SIGINT.
    ASSERT_EQ(::kill(-pid, SIGINT), 0);
  } else {
    // What a scheduler signalling every process of a job step does to the workers first: the two
    // that measure and the compile processes beside them.
    const auto workers = children_of(pid);
    std::size_t measuring = 0;
    for (pid_t worker : workers) measuring += read_text(fs::path("/proc") / std::to_string(worker) / "cmdline").find("--compile") == std::string::npos;
    ASSERT_EQ(measuring, 2u);
    for (pid_t worker : workers) ::kill(worker, SIGTERM);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  const std::string err = read_text(dir / "err");
  ASSERT_TRUE(WIFEXITED(status)) << "gmtune must stop on its own, not die of the signal\n" << err;
  EXPECT_EQ(WEXITSTATUS(status), 1) << err;
  EXPECT_NE(err.find("run the same command again to resume"), std::string::npos) << err;
  const std::size_t before = recorded();
  const std::size_t all = gmjit::templates::all_configs(gmjit::templates::find_kernel("vector_add")).size();
  ASSERT_LT(before, kProblems * all) << "the sweep finished before the signal; the test proves nothing";
  {
    gmjit::cache::Store store(cache);
    for (std::size_t i = 0; i < kProblems; ++i) {
      for (const auto& t : store.trials(key, vector_add_key(size_of(i)))) {
        EXPECT_NE(t.status, "crashed") << "a worker ended by a signal is not the candidate's fault: " << t.detail;
        EXPECT_NE(t.status, "compile_failed") << "nor is a compile process ended by one: " << t.detail;
      }
    }
  }
  // No worker survives its sweep.
  EXPECT_EQ(::kill(-pid, 0), -1) << "a process of the sweep's group is still running";

  const auto resumed = run_gmtune("sweep --json --strategy exhaustive --devices all --shapes " + shapes + " --db " + cache,
                                  environment);
  ASSERT_EQ(resumed.status, 0) << resumed.err;
  const auto s = nlohmann::json::parse(resumed.out);
  EXPECT_EQ(s["tuned"].get<std::size_t>() + s["skipped"].get<std::size_t>(), kProblems) << resumed.out;
  EXPECT_EQ(winners(cache, key).size(), kProblems);
}

TEST_F(SweepDevices, CtrlCStopsEveryWorkerAndTheSweepResumes) {
  stop_and_resume(dir_, shapes_, env(kSameTwice), Stop::ctrl_c_to_the_group);
  expect_each_config_once(db("i.db"), fingerprint("gmjit simulated H200"));
}

TEST_F(SweepDevices, WorkersEndedBySigtermStopTheSweepWithoutRecordingACrash) {
  stop_and_resume(dir_, shapes_, env(kSameTwice), Stop::sigterm_to_the_workers);
  expect_each_config_once(db("i.db"), fingerprint("gmjit simulated H200"));
}

// Two shards of a job array: one pair of tasks writes one cache file at once (two processes on
// one host), a third task its own file; the merge holds the whole sweep.
TEST_F(SweepDevices, ShardCachesMergeIntoTheWholeSweep) {
  const auto whole = run_gmtune(sweep_args(db("whole.db")), env(kSameTwice));
  ASSERT_EQ(whole.status, 0) << whole.err;

  std::vector<std::thread> tasks;
  std::vector<gmjit::testing::CliResult> results(3);
  const std::vector<std::string> targets{db("shared.db"), db("shared.db"), db("own.db")};
  for (std::size_t index = 0; index < 3; ++index) {
    tasks.emplace_back([&, index] {
      results[index] = run_gmtune(sweep_args(targets[index], "--shard " + std::to_string(index) + "/3"), env(kSameTwice));
    });
  }
  for (auto& task : tasks) task.join();
  std::size_t tuned = 0;
  for (const auto& r : results) {
    ASSERT_EQ(r.status, 0) << r.err;
    tuned += summary(r)["tuned"].get<std::size_t>();
  }
  EXPECT_EQ(tuned, kProblems) << "the shards cover the list once";

  const auto merged = run_gmtune("merge " + db("shared.db") + " " + db("own.db") + " --into " + db("merged.db"));
  ASSERT_EQ(merged.status, 0) << merged.err;
  const std::string key = fingerprint("gmjit simulated H200");
  EXPECT_EQ(winners(db("merged.db"), key), winners(db("whole.db"), key));
  expect_each_config_once(db("merged.db"), key);
  // Nothing the two concurrent writers committed went missing.
  gmjit::cache::Store shared(db("shared.db"));
  std::size_t problems_in_shared = 0;
  for (const auto& w : shared.winners("vector_add")) problems_in_shared += w.device_key == key;
  EXPECT_EQ(problems_in_shared, summary(results[0])["tuned"].get<std::size_t>() +
                                    summary(results[1])["tuned"].get<std::size_t>());
}

}  // namespace
