#pragma once
// A tuning session: one worker process on one device (or a simulated one), spawned once and
// reused by every problem of a sweep; replaced when a candidate crashes or hangs it.

#include <memory>

#include "gmjit/device.hpp"
#include "gmjit/tune.hpp"

namespace gmjit::tuner {

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
  TuneReport tune(const Problem& problem, const TuneOptions& options);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace gmjit::tuner
