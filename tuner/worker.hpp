#pragma once
// The worker process: opens one device (or simulates one), receives a problem and then
// candidates over stdin, verifies and times each, answers over stdout. A sticky CUDA error ends
// the process after its answer; a hang is ended by the parent's watchdog.

#include <nlohmann/json.hpp>

#include "gmjit/device.hpp"
#include "tuner/harness.hpp"

namespace gmjit::tuner {

// Exit status of a worker whose context died on a candidate (after it reported "crashed").
inline constexpr int kWorkerContextLost = 3;

// Exit status of a worker that found the process which started it gone (or could not arrange to
// die with it): it never serves a parent other than the one that spawned it.
inline constexpr int kWorkerParentGone = 4;

// The worker's main: `gmjit-worker [--parent PID] [--device N] [--simulated]`, or with --compile a
// compile process (tuner/remote_compile.hpp). It dies with its
// parent (PR_SET_PDEATHSIG, SIGKILL) and exits at once when PID is no longer its parent.
int worker_main(int argc, char** argv);

// How a candidate is timed (a trial request's "measure") and what its timing found (the answer),
// each field under its own name; a missing one keeps its default.
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(MeasureOptions, min_repetitions, max_repetitions, max_seconds,
                                                target_ci_percent, batch_below_ms, batch_sample_ms, max_batch,
                                                give_up_above_ms)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(Timing, median_ms, spread, ci_percent, repetitions, batch, gave_up)

nlohmann::json device_to_json(const DeviceInfo& device);
DeviceInfo device_from_json(const nlohmann::json& json);

// What the simulated device reports: an H200's limits under a name of its own, so its results
// never mix with a real device's in a cache.
DeviceInfo simulated_device(int ordinal);

}  // namespace gmjit::tuner
