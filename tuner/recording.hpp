#pragma once
// How a tuning run lands in the cache: every trial committed as it ends, then the winner with its
// final timing and the winner's cubin. A sweep records each of its problems this way, and so does
// tune() with TuneOptions::record (`gmtune tune`), so a Runtime finds what either left.

#include <optional>

#include "cache/store.hpp"
#include "gmjit/device.hpp"
#include "gmjit/tune.hpp"
#include "tuner/session.hpp"

namespace gmjit::tuner {

// The rows of one problem tuned on one device. `problem` needs its dtype.
class Recording {
 public:
  Recording(cache::Store& store, const DeviceInfo& device, const Problem& problem);

  const cache::DeviceRecord& device() const { return device_; }
  const cache::ProblemRecord& problem() const { return problem_; }
  std::optional<cache::WinnerRecord> winner();

  // Starts from what the cache holds: a recorded winner keeps its place unless beaten by more than
  // the noise; without one, when `resume`, the configurations an interrupted run recorded are not
  // run again.
  void start_from(TuneOptions& options, const std::optional<cache::WinnerRecord>& winner, bool resume);

  // Tunes on `session`, committing each new trial before options.on_trial hears of it (so a kill
  // loses at most the candidates being timed), then the winner and its cubin.
  TuneReport tune(Session& session, TuneOptions options);
  // Records that the problem could not be set up at all (a worker refused or died preparing it),
  // so the sweep's summary and a later `gmtune show` name it until a winner replaces the row.
  void record_failure(const std::string& reason);

 private:
  cache::Store& store_;
  Problem tuned_;
  std::string arch_;
  cache::DeviceRecord device_;
  cache::ProblemRecord problem_;
};

}  // namespace gmjit::tuner
