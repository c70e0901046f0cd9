#pragma once
// The parent's handle on one worker process: spawn, a request with a deadline, kill and reap.

#include <mutex>
#include <string>
#include <vector>

#include "tuner/protocol.hpp"

namespace gmjit::tuner {

// $GMJIT_WORKER, else gmjit-worker beside libgmjit (or the program) or in ../libexec/gmjit
// from there, else the build tree's. Throws Error(driver) naming every place looked at.
std::string find_worker();

class WorkerProcess {
 public:
  WorkerProcess() = default;
  ~WorkerProcess();
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  void start(const std::string& path, const std::vector<std::string>& args);
  bool running() const { return pid_ > 0; }

  enum class Outcome { answered, died, timed_out };
  // Sends `request` (skipped when it is null: the hello) and waits up to `timeout_seconds` for
  // the answer. On died or timed_out the process is gone (killed if needed and reaped) and
  // `why` says how it ended.
  Outcome call(const Frame* request, Frame& answer, double timeout_seconds, std::string& why);
  // Closes the pipes, gives the worker a moment to exit, then kills it; returns how it ended.
  std::string stop();
  // Kills the worker now; safe from any thread (a sweep stopping on Ctrl-C). The owner's call in
  // flight, or its next one, then ends as died.
  void kill_now();
  // The signal that ended the last worker, 0 when it exited or still runs.
  int ended_by_signal() const { return ended_by_signal_; }

 private:
  std::string reap(bool kill_first);
  // pid_ changes only under it, so kill_now never signals a pid that was reaped (and reused).
  std::mutex pid_mutex_;
  int pid_ = -1;
  int ended_by_signal_ = 0;
  int to_worker_ = -1;
  int from_worker_ = -1;
};

}  // namespace gmjit::tuner
