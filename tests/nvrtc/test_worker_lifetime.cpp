// A worker never outlives the process that started it (issue 15, item 7): killed with SIGKILL while
// its worker times a hanging candidate, gmtune must take the worker with it; a worker whose parent
// is already gone exits at once; and a worker started on a thread that has since ended keeps
// serving its process. On the simulated device, through the real gmtune and gmjit-worker.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>
#include <thread>

#include "cli_runner.hpp"
#include "gmjit/tune.hpp"
#include "temp_dir.hpp"
#include "tuner/session.hpp"
#include "tuner/worker.hpp"
#include "tuner/worker_process.hpp"

extern char** environ;

namespace {

namespace fs = std::filesystem;
using gmjit::testing::read_text;

struct ProcState {
  char state = '?';
  pid_t ppid = 0;
  std::string name;
};

// The process as /proc shows it; nullopt once it is gone.
std::optional<ProcState> proc_state(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const auto open = text.find('(');
  const auto close = text.rfind(')');  // the command name may hold spaces
  if (open == std::string::npos || close == std::string::npos) return std::nullopt;
  ProcState s;
  s.name = text.substr(open + 1, close - open - 1);
  std::istringstream rest(text.substr(close + 2));
  rest >> s.state >> s.ppid;
  return s;
}

// Alive and still the worker: a zombie waiting for a reaper has stopped running, and a reused pid
// belongs to some other program.
bool worker_alive(pid_t pid) {
  const auto s = proc_state(pid);
  return s && s->state != 'Z' && s->state != 'X' && s->name == "gmjit-worker";
}

pid_t spawn_shell(const std::string& command) {
  const char* argv[] = {"sh", "-c", command.c_str(), nullptr};
  pid_t pid = -1;
  if (::posix_spawn(&pid, "/bin/sh", nullptr, nullptr, const_cast<char**>(argv), environ) != 0) return -1;
  return pid;
}

class WorkerLifetime : public gmjit::testing::TempDirTest {
 protected:
  WorkerLifetime() : TempDirTest("gmjit-worker-lifetime") {}

  // tests/data/broken with one configuration, mode 4: its only candidate hangs the worker.
  std::string hanging_manifest() const {
    const char* source_dir = std::getenv("GMJIT_SOURCE_DIR");
    const fs::path broken = fs::path(source_dir && *source_dir ? source_dir : GMJIT_SOURCE_DIR) / "tests/data/broken";
    auto manifest = nlohmann::json::parse(read_text(broken / "broken.json"));
    for (auto& param : manifest["params"]) {
      param["values"] = param["name"] == "mode" ? nlohmann::json::array({4}) : nlohmann::json::array({64});
    }
    manifest["default_config"] = {{"mode", 4}, {"block", 64}};
    fs::copy_file(broken / "broken.cuh", dir_ / "broken.cuh");
    const fs::path path = dir_ / "hang.json";
    std::ofstream(path) << manifest.dump(2);
    return path.string();
  }
};

TEST_F(WorkerLifetime, KillingGmtuneMidHangLeavesNoWorker) {
  const fs::path err = dir_ / "err";
  // GMJIT_LOG_LEVEL reaches the worker, which then names itself when it starts to hang.
  const pid_t gmtune = spawn_shell("GMJIT_SIMULATED_DEVICE=1 GMJIT_LOG_LEVEL=debug exec " +
                                   gmjit::testing::gmtune_path() + " --kernel-manifest " + hanging_manifest() +
                                   " tune broken --shape n=1000 --strategy exhaustive --db " + (dir_ / "c.db").string() +
                                   " >" + (dir_ / "out").string() + " 2>" + err.string());
  ASSERT_GT(gmtune, 0);

  const std::regex hang_line("gmjit-worker ([0-9]+): simulated hang");
  pid_t worker = -1;
  bool exited = false;
  for (int i = 0; i < 12000 && worker < 0 && !exited; ++i) {  // up to two minutes for NVRTC and the worker
    std::smatch match;
    const std::string text = read_text(err);
    if (std::regex_search(text, match, hang_line)) {
      worker = static_cast<pid_t>(std::stol(match[1]));
      break;
    }
    int status = 0;
    exited = ::waitpid(gmtune, &status, WNOHANG) == gmtune;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (worker < 0) {
    if (!exited) {
      ::kill(gmtune, SIGKILL);
      ::waitpid(gmtune, nullptr, 0);
    }
    FAIL() << "the worker never reported its hang\n" << read_text(err);
  }
  const auto before = proc_state(worker);
  ASSERT_TRUE(before.has_value());
  EXPECT_EQ(before->ppid, gmtune) << "the hanging process is gmtune's own worker";

  ASSERT_EQ(::kill(gmtune, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(gmtune, &status, 0), gmtune);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "gmtune ended before the kill\n" << read_text(err);

  bool alive = true;
  for (int i = 0; i < 1000 && alive; ++i) {  // up to ten seconds
    alive = worker_alive(worker);
    if (alive) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (alive) ::kill(worker, SIGKILL);  // this test's orphan must not outlive it either
  EXPECT_FALSE(alive) << "worker " << worker << " outlived gmtune, killed with SIGKILL mid-hang";
}

TEST_F(WorkerLifetime, AWorkerWhoseParentIsGoneExitsAtOnce) {
  // Its parent is this test, not the pid it is told: as if the one that spawned it died before
  // it could arm its death signal and this process had adopted it.
  pid_t worker = -1;
  const std::string path = gmjit::tuner::find_worker();
  const char* argv[] = {path.c_str(), "--parent", "1", "--simulated", nullptr};
  ASSERT_EQ(::posix_spawn(&worker, path.c_str(), nullptr, nullptr, const_cast<char**>(argv), environ), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(worker, &status, 0), worker);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), gmjit::tuner::kWorkerParentGone);
}

TEST_F(WorkerLifetime, AWorkerOutlivesTheThreadThatStartedIt) {
  // A sweep opens its sessions on threads that end at once; the death signal is tied to the
  // thread that spawns, so the library spawns from one thread of its own.
  gmjit::TuneOptions options;
  options.simulated_device = true;
  options.strategy = "exhaustive";
  options.max_evaluations = 3;
  std::unique_ptr<gmjit::tuner::Session> session;
  std::thread([&] { session = std::make_unique<gmjit::tuner::Session>(options); }).join();
  const auto report = session->tune({"vector_add", "fp32", {{"n", 4096}}, ""}, options);
  EXPECT_EQ(report.worker_restarts, 0u) << "the worker died with the thread that started it";
  EXPECT_TRUE(report.winner.has_value());
}

}  // namespace
