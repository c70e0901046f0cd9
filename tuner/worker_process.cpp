#include "tuner/worker_process.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <functional>
#include <mutex>
#include <thread>

#include "gmjit/error.hpp"

extern char** environ;

namespace gmjit::tuner {
namespace fs = std::filesystem;

std::string find_worker() {
  if (const char* explicit_path = std::getenv("GMJIT_WORKER"); explicit_path && *explicit_path) {
    if (::access(explicit_path, X_OK) == 0) return explicit_path;
    throw Error(ErrorKind::driver, 0, fmt::format("GMJIT_WORKER={} is not an executable file", explicit_path));
  }
  std::vector<fs::path> dirs;
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&find_worker), &info) != 0 && info.dli_fname) {
    dirs.push_back(fs::absolute(info.dli_fname).parent_path());
  }
  std::error_code ec;
  if (auto self = fs::read_symlink("/proc/self/exe", ec); !ec) dirs.push_back(self.parent_path());
  std::vector<fs::path> tried;
  for (const auto& dir : dirs) {
    tried.push_back(dir / "gmjit-worker");
    tried.push_back(dir / ".." / "libexec" / "gmjit" / "gmjit-worker");
  }
#ifdef GMJIT_WORKER_BUILD_PATH
  tried.push_back(GMJIT_WORKER_BUILD_PATH);
#endif
  std::string looked;
  for (const auto& path : tried) {
    if (::access(path.c_str(), X_OK) == 0) return path.lexically_normal().string();
    looked += (looked.empty() ? "" : ", ") + path.lexically_normal().string();
  }
  throw Error(ErrorKind::driver, 0,
              fmt::format("gmjit-worker not found (looked in {}); set GMJIT_WORKER to its path", looked));
}

namespace {

// A worker dies with its parent through PR_SET_PDEATHSIG, which the kernel fires when the *thread*
// that created the child exits, not the process. Workers are started from threads that end long
// before the process does (a sweep opens its devices from std::async tasks and tunes on a thread
// per device; a Runtime tunes on whichever thread launched), so every spawn runs on this one
// thread, which lives as long as the process.
class SpawnThread {
 public:
  SpawnThread() {
    // The thread blocks every signal, so it never takes one meant for the application's threads;
    // the workers it starts get an empty mask of their own (start()).
    sigset_t all, previous;
    sigfillset(&all);
    ::pthread_sigmask(SIG_SETMASK, &all, &previous);
    std::thread([this] { serve(); }).detach();
    ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  }

  // Runs `job` (which must not throw) on the thread and returns once it has run.
  void run(const std::function<void()>& job) {
    Job entry{&job, false};
    std::unique_lock lock(mutex_);
    jobs_.push_back(&entry);
    wake_.notify_all();
    wake_.wait(lock, [&] { return entry.done; });
  }

 private:
  struct Job {
    const std::function<void()>* work;
    bool done;
  };

  [[noreturn]] void serve() {
    std::unique_lock lock(mutex_);
    for (;;) {
      wake_.wait(lock, [this] { return !jobs_.empty(); });
      Job* job = jobs_.front();
      jobs_.pop_front();
      lock.unlock();
      (*job->work)();
      lock.lock();
      job->done = true;
      wake_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;  // a job queued, or one done
  std::deque<Job*> jobs_;
};

SpawnThread& spawn_thread() {
  static std::mutex mutex;
  static SpawnThread* thread = nullptr;
  static pid_t owner = 0;
  std::lock_guard lock(mutex);
  // Never deleted: it must outlive every worker, which is to say the process. A child forked from
  // this process has no such thread (fork copies only the calling one) and gets its own.
  if (thread == nullptr || owner != ::getpid()) {
    thread = new SpawnThread;
    owner = ::getpid();
  }
  return *thread;
}

}  // namespace

WorkerProcess::~WorkerProcess() {
  if (running()) stop();
}

void WorkerProcess::start(const std::string& path, const std::vector<std::string>& args) {
  // Socket pairs rather than pipes: the parent writes with MSG_NOSIGNAL, so a worker that died
  // cannot take the calling application down with SIGPIPE.
  int in[2], out[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, in) != 0 ||
      ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, out) != 0) {
    throw Error(ErrorKind::launch, 0, fmt::format("cannot create worker pipes: {}", std::strerror(errno)));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  // The worker starts with no signal blocked, whatever the spawning thread blocks, so a Ctrl-C to
  // the process group or a scheduler's SIGTERM reaches it.
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attributes, &none);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK);
  // The worker checks that this process is still its parent once its death signal is armed.
  std::vector<std::string> argv_storage{path, "--parent", std::to_string(::getpid())};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  int rc = 0;
  spawn_thread().run([&] { rc = ::posix_spawn(&pid, path.c_str(), &actions, &attributes, argv.data(), environ); });
  posix_spawnattr_destroy(&attributes);
  posix_spawn_file_actions_destroy(&actions);
  ::close(in[0]);
  ::close(out[1]);
  if (rc != 0) {
    ::close(in[1]);
    ::close(out[0]);
    throw Error(ErrorKind::launch, 0, fmt::format("cannot start {}: {}", path, std::strerror(rc)));
  }
  {
    std::lock_guard lock(pid_mutex_);
    pid_ = pid;
  }
  ended_by_signal_ = 0;
  to_worker_ = in[1];
  from_worker_ = out[0];
}

WorkerProcess::Outcome WorkerProcess::call(const Frame* request, Frame& answer, double timeout_seconds,
                                           std::string& why) {
  try {
    if (request) write_frame(to_worker_, *request);
    switch (read_frame(from_worker_, answer, timeout_seconds)) {
      case ReadResult::frame:
        return Outcome::answered;
      case ReadResult::closed:
        why = reap(false);
        return Outcome::died;
      case ReadResult::timed_out:
        why = fmt::format("no answer within {:.0f} s; worker killed ({})", timeout_seconds, reap(true));
        return Outcome::timed_out;
    }
  } catch (const Error& e) {
    // A write into a dead worker's pipe or a garbled frame: either way this worker is done.
    why = fmt::format("{} ({})", e.message(), reap(true));
  }
  return Outcome::died;
}

std::string WorkerProcess::stop() {
  if (!running()) return "not running";
  ::close(to_worker_);
  to_worker_ = -1;
  // Closing stdin asks the worker to exit; a worker stuck in a kernel never reads it.
  for (int i = 0; i < 50; ++i) {
    int status = 0;
    {
      std::lock_guard lock(pid_mutex_);
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        ended_by_signal_ = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
        ::close(from_worker_);
        from_worker_ = -1;
        return "exited";
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return reap(true);
}

void WorkerProcess::kill_now() {
  std::lock_guard lock(pid_mutex_);
  if (pid_ > 0) ::kill(pid_, SIGKILL);
}

std::string WorkerProcess::reap(bool kill_first) {
  if (!running()) return "not running";
  int status = 0;
  {
    std::lock_guard lock(pid_mutex_);
    if (kill_first) ::kill(pid_, SIGKILL);
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    ended_by_signal_ = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  }
  if (to_worker_ >= 0) ::close(to_worker_);
  if (from_worker_ >= 0) ::close(from_worker_);
  to_worker_ = from_worker_ = -1;
  if (WIFSIGNALED(status)) {
    return fmt::format("worker ended by signal {} ({})", WTERMSIG(status), ::strsignal(WTERMSIG(status)));
  }
  if (WIFEXITED(status)) return fmt::format("worker exited with status {}", WEXITSTATUS(status));
  return "worker ended";
}

}  // namespace gmjit::tuner
