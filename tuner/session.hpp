#pragma once
// A tuning session: one worker process on one device (or a simulated one), spawned once and
// reused by every problem of a sweep; replaced when a candidate crashes or hangs it.

#include <memory>
#include <string>
#include <vector>

#include "gmjit/device.hpp"
#include "gmjit/error.hpp"
#include "gmjit/tune.hpp"

namespace gmjit::tuner {

// A session was stopped from outside (interrupt(), or its worker ended by SIGINT or SIGTERM, as a
// Ctrl-C to the process group or a job scheduler's cancel does): the candidate in flight has no
// result, which is not the candidate's fault, so nothing is recorded for it.
class Interrupted : public Error {
 public:
  explicit Interrupted(const std::string& why) : Error(ErrorKind::launch, 0, "interrupted: " + why) {}
};

// The problem could not be set up for tuning: the worker refused it (its tensors exceed the
// device's memory, a user kernel failed to register there) or died preparing it, twice, or a
// user kernel's host reference failed. The session stays usable for other problems; a sweep
// records this one as failed and goes on.
class ProblemFailed : public Error {
 public:
  ProblemFailed(ErrorKind kind, const std::string& why) : Error(kind, 0, why) {}
};

// The names of the simulated devices, one per ordinal, from GMJIT_SIMULATED_DEVICES (comma-separated,
// e.g. "gmjit simulated H200,gmjit simulated H200"); empty when it is unset, which means one
// device of the default name at any ordinal. Devices of equal names share a fingerprint.
std::vector<std::string> simulated_device_names();

class Session {
 public:
  // Spawns the worker and reads the device it opened; throws Error(driver) with the worker's
  // reason when it cannot open the device.
  explicit Session(const TuneOptions& options);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // The device as the worker sees it; its fingerprint keys the results.
  const DeviceInfo& device() const;
  // Throws Interrupted once interrupt() was called or the worker was stopped by a signal.
  TuneReport tune(const Problem& problem, const TuneOptions& options);
  // Stops the session from any thread: kills the worker and makes tune() throw Interrupted,
  // without recording the candidate it was timing.
  void interrupt();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace gmjit::tuner
