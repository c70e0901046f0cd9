#pragma once
/// @file tune.hpp
/// Tune a kernel for a problem on a live GPU, and sweep many problems into the cache.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "gmjit/types.hpp"

namespace gmjit {

/// The outcome of one candidate configuration (names match the cache's status column).
enum class TrialStatus { ok, compile_failed, invalid, launch_failed, crashed, timeout, wrong_result };
const char* to_string(TrialStatus status);

struct TrialReport {
  Config config;
  TrialStatus status = TrialStatus::ok;
  double median_ms = 0;
  double spread = 0;  ///< interquartile range over the median
  int repetitions = 0;
  double verify_error = 0;  ///< relative L2 error against the reference
  double compile_ms = 0;
  ResourceUsage resources;
  std::string detail;  ///< why it failed, for any status but ok
};

/// One problem: a kernel, its dtype and its shape.
struct Problem {
  std::string kernel;
  std::string dtype;
  Shape shape;
  std::string label;  ///< where the shape came from ("from" in a shapes file)
};

struct TuneReport {
  Problem problem;
  std::string device_name;
  std::vector<TrialReport> trials;
  std::optional<std::size_t> winner;  ///< index into trials
  double wall_seconds = 0;
};

struct TuneOptions {
  int device = 0;
  std::uint64_t seed = 1;
  double max_seconds_per_candidate = 0.5;  ///< cap on timing repetitions of one candidate
  std::function<void(const TrialReport&)> on_trial;  ///< progress, called as each trial ends
};

/// Exhaustive search of the valid configurations: compiles on all cores, verifies each candidate
/// against the reference before timing it, times with L2 flushed, picks the fastest verified.
/// Throws Error(usage) for a bad problem and Error(driver) when no device is present.
TuneReport tune(const Problem& problem, const TuneOptions& options = {});

/// Problems of a shapes file (see DESIGN.md), keeping only sweeps of `only_kernels` when it is
/// not empty; throws Error(usage) naming the sweep and shape index of anything malformed
/// (unknown kernel or dtype, missing or unknown keys, non-integer values).
std::vector<Problem> read_shapes_file(const std::string& path, const std::vector<std::string>& only_kernels = {});
/// Problems of a built-in preset; throws Error(usage) for an unknown name.
std::vector<Problem> preset_problems(const std::string& name);
std::vector<std::string> preset_names();

struct SweepOptions {
  std::string db_path;  ///< empty: the default cache path
  TuneOptions tune;
  bool retune = false;  ///< tune problems that already have a winner on this device
  std::function<void(std::size_t index, std::size_t total, const Problem&, const std::string& state)> on_progress;
};

struct SweepSummary {
  std::size_t tuned = 0;
  std::size_t skipped = 0;  ///< already had a winner
  std::size_t failed = 0;   ///< no configuration verified
  std::string db_path;
};

/// Tunes every problem and records trials and winners in the SQLite cache, one transaction per
/// problem, so an interrupted sweep resumes where it stopped.
SweepSummary sweep(const std::vector<Problem>& problems, const SweepOptions& options);

/// The cache file used when none is given: $GMJIT_CACHE, else $XDG_CACHE_HOME/gmjit/gmjit.db,
/// else ~/.cache/gmjit/gmjit.db.
std::string default_cache_path();

}  // namespace gmjit
