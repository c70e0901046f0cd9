#pragma once
/// @file tune.hpp
/// Tune a kernel for a problem on a live GPU, and sweep many problems into the cache.

#include <cstddef>
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
/// Throws Error(usage) for a name that is not a status.
TrialStatus parse_trial_status(const std::string& name);

/// The registered search strategies (TuneOptions::strategy), by name, in registration order.
std::vector<std::string> strategy_names();
/// One line on what a strategy does, for help texts. Throws Error(usage) naming every registered
/// strategy when `name` is not one of them, so it also checks a strategy given by a user.
std::string strategy_summary(const std::string& name);

struct TrialReport {
  Config config;
  TrialStatus status = TrialStatus::ok;
  double median_ms = 0;
  double spread = 0;       ///< interquartile range over the median
  double ci_percent = 0;   ///< half-width of the median's 95% confidence interval, % of the median
  int repetitions = 0;     ///< timed samples
  int batch = 1;           ///< launches per sample (short kernels are timed as a batch)
  double verify_error = 0; ///< relative L2 error against the reference
  double compile_ms = 0;
  bool binary_cached = false;  ///< the cubin came from the binary cache
  bool resumed = false;        ///< measured by an earlier, interrupted run and not re-run
  ResourceUsage resources;
  std::string detail;  ///< why it failed, for any status but ok
};

/// One point of the best-so-far curve: after `evaluations` timed candidates and `seconds` of
/// tuning, the fastest verified median was `best_ms`.
struct BestSoFar {
  std::size_t evaluations = 0;
  double seconds = 0;
  double best_ms = 0;
};

struct TuneReport {
  Problem problem;
  std::string device_name;
  std::string device_key;  ///< the device fingerprint the results are valid for
  std::string strategy;  ///< the strategy's name
  std::vector<TrialReport> trials;
  std::optional<std::size_t> winner;     ///< index into trials
  std::optional<std::size_t> runner_up;  ///< index into trials
  std::size_t valid_candidates = 0;      ///< configurations that passed the constraints
  std::size_t evaluations = 0;           ///< candidates compiled, verified and timed (the budget's unit)
  std::size_t worker_restarts = 0;       ///< workers replaced after a crash or a hang
  /// Candidates whose compile started on idle threads before the strategy asked for them (it
  /// named them as likely next while it waited for results; some may still be compiling when the
  /// search ends), and how many of those it then asked for.
  std::size_t compiled_early = 0;
  std::size_t compiled_early_asked = 0;
  std::vector<BestSoFar> curve;
  double wall_seconds = 0;
};

struct TuneOptions {
  int device = 0;
  std::uint64_t seed = 1;
  std::string strategy = "model";  ///< one of strategy_names(); tune() throws Error(usage) for another
  std::size_t max_evaluations = 0;  ///< budget in evaluated candidates; 0: no limit
  double max_seconds = 0;           ///< budget in wall seconds; 0: no limit
  double max_seconds_per_candidate = 0.5;  ///< cap on the timing repetitions of one candidate
  double target_ci_percent = 1.0;   ///< stop timing once the median's 95% CI is within this
  std::size_t retime_top = 3;       ///< the fastest few are re-timed interleaved before choosing
  unsigned compile_threads = 0;     ///< 0: every core
  double watchdog_seconds = 20;     ///< a worker silent this long on one request is killed
  /// Cache file for compiled binaries and (strategy transfer) the nearest tuned shapes; empty:
  /// no cache is read or written by tune(), unless `record` is set.
  std::string db_path;
  /// tune() records the run in the cache at db_path (empty: default_cache_path()) as sweep() does
  /// (`gmtune tune` sets it; `--no-record` clears it): each trial is committed as it ends, then the
  /// winner, with its final timing, and its cubin, so a Runtime launches the winner without tuning.
  /// A winner already recorded is the incumbent (it keeps its place unless beaten by more than the
  /// noise); without one, the trials an interrupted run recorded are reported as resumed and not
  /// run again (they replace prior_trials). sweep() always records and ignores this field.
  bool record = false;
  /// Trials an interrupted run already measured: their configurations are not run again.
  std::vector<TrialReport> prior_trials;
  /// The configuration currently cached as the winner: it keeps its place unless beaten by
  /// more than the measurement noise.
  std::optional<Config> incumbent;
  /// Run candidates on a simulated device in the worker (no GPU needed): for tests of the
  /// search, the worker protocol and the watchdog. Also set by GMJIT_SIMULATED_DEVICE=1.
  bool simulated_device = false;
  std::function<void(const TrialReport&)> on_trial;  ///< progress, called as each trial ends
};

/// Searches the valid configurations with the chosen strategy: it asks for the next candidates,
/// they are compiled and measured, and it is told each result. Compiles run on a thread pool and
/// overlap the benchmarking; every candidate runs in a separate worker process (one per GPU)
/// that verifies it against the reference before timing it, and a candidate that crashes,
/// hangs or computes a wrong result is recorded and never wins. The budget (max_evaluations,
/// max_seconds) stops the search before the next candidate; the best ones are then re-timed and
/// the winner chosen. With options.record the run lands in the cache (see TuneOptions::record).
/// Throws Error(usage) for a bad problem or an unknown strategy, and Error(driver) when no device
/// is present (before any cache is opened).
TuneReport tune(const Problem& problem, const TuneOptions& options = {});

/// Everything a TuneReport holds as JSON text, as `gmtune tune --json` prints it: the problem,
/// device, strategy, winner and runner-up (indexes into "trials", or null), the best-so-far
/// curve and every trial. NaN and infinities become null.
std::string tune_report_json(const TuneReport& report);

/// Problems of a shapes file, JSON of the form {"sweeps": [{"kernel": K, "dtype": T, "shapes":
/// [{KEY: N, .., "from": LABEL}, ..]}, ..]} (KEY: the kernel's problem keys), keeping only sweeps
/// of `only_kernels` when it is not empty; throws Error(usage) naming the sweep and shape index of anything malformed
/// (unknown kernel or dtype, missing or unknown keys, non-integer values). A sweep may give keys
/// its shapes share as "keys": {KEY: N, ..}; a shape naming the same key keeps its own. A kernel, dtype and
/// shape listed more than once is one problem, its labels joined with "; ".
std::vector<Problem> read_shapes_file(const std::string& path, const std::vector<std::string>& only_kernels = {});
/// Problems of a built-in preset; throws Error(usage) for an unknown name.
///  - "default": vector_add fp32 and fp16 at n = 2^24, sgemm fp32 at 1024^3 and 4096^3.
///  - "llm": every GEMM shape of the bundled LLM shapes file (llama-3 projections, square,
///    GPU MODE and KernelBench sizes), tuned as bf16 and fp16 `gemm` with trans_b=1 (B holds
///    the weights, n x k, as in x @ W^T).
///  - "gpumode": the bundled GPU MODE / KernelBench memory-bound shapes. Sweeps of kernels not
///    (yet) in the catalog are skipped with one warning naming them; today vector_add fp16 remains.
/// Presets are shapes files embedded in the library and read by the reader of read_shapes_file.
std::vector<Problem> preset_problems(const std::string& name);
std::vector<std::string> preset_names();
/// One line on what a preset holds, for help texts; throws Error(usage) for an unknown name.
std::string preset_summary(const std::string& name);

/// Shard `index` of `count`, as a job array numbers its tasks (Slurm's SLURM_ARRAY_TASK_ID,
/// a Kubernetes indexed Job's JOB_COMPLETION_INDEX: 0 to count-1).
struct ShardSpec {
  std::size_t index = 0;
  std::size_t count = 1;
};
/// Parses "I/N" (decimal digits only); throws Error(usage) when it is malformed, N is 0 or
/// I >= N.
ShardSpec parse_shard(const std::string& text);

/// The problems of shard `index` of `count`, in their original order. The rule: the problems are
/// ranked by the XXH3-64 hash of "kernel|dtype|k=v,.." (ties by position), and the problem of
/// rank r goes to shard r mod count. So every problem is in exactly one shard, shard sizes differ
/// by at most one, and the split depends only on the list (not the machine, the cache or the
/// time), which every task of a job array reads alike. Throws Error(usage) when index >= count.
std::vector<Problem> shard_problems(const std::vector<Problem>& problems, std::size_t index, std::size_t count);

/// The problems a sweep on `device_key` would still tune: those without a winner in the cache at
/// `db_path` (empty: default_cache_path()). With an empty device_key (no GPU to fingerprint,
/// e.g. on a login node) a problem is finished when it has a winner on any device. A missing
/// cache file (or an empty one) means nothing is finished. The cache is opened read-only: no
/// file is created, migrated or moved, so a corrupt cache stays where it is and is an
/// Error(cache) here (a sweep would move it aside; gmtune verify reports it). Touches no GPU.
std::vector<Problem> pending_problems(const std::vector<Problem>& problems, const std::string& db_path,
                                      const std::string& device_key);

/// What a sweep reports as it goes (SweepOptions::on_event). Calls come from the thread of the
/// device concerned, one at a time.
struct SweepEvent {
  enum class Kind {
    started,   ///< the device took the problem (state: "tuning", or "tuning (resuming after N recorded trials)")
    trial,     ///< a trial of the problem ended (trials counts it)
    finished,  ///< state: "cached", "done 0.1234 ms" or "no configuration verified"
  };
  Kind kind = Kind::started;
  int device = 0;           ///< the device's ordinal
  std::size_t worker = 0;   ///< the device's position in SweepOptions::devices
  std::string device_name;
  std::size_t index = 0;    ///< the problem's position in the sweep's list
  Problem problem;
  std::string state;
  std::size_t trials = 0;      ///< trials of this problem on this device so far, not counting
                               ///< configurations found invalid before anything ran (resumed ones count)
  std::size_t candidates = 0;  ///< configurations of the kernel, or the budget in evaluations (plus
                               ///< the resumed trials) when smaller: the most `trials` can reach
  std::size_t finished = 0;    ///< work items finished, over every device
  std::size_t total = 0;       ///< work items: each problem once per group of interchangeable devices
};

struct SweepOptions {
  std::string db_path;  ///< empty: the default cache path
  TuneOptions tune;
  bool retune = false;  ///< tune problems that already have a winner on this device
  /// GPU ordinals to sweep on, one worker process each, fed from one queue of problems (a device
  /// takes the next problem when it finishes one); empty: tune.device alone (see parse_devices).
  /// An ordinal listed twice gets two workers, which then disturb each other's timings: that
  /// exercises the multi-device machinery on one GPU, and is logged as a warning.
  std::vector<int> devices;
  /// Devices with the same fingerprint are interchangeable: each problem is tuned by one of them.
  /// With per_device every device tunes every problem that had no winner when the sweep began
  /// (devices of one fingerprint share one winner in the cache: a later device's run keeps the
  /// earlier winner unless it beats it by more than the noise).
  bool per_device = false;
  /// Polled a few times a second: once it returns true the sweep kills its workers, drops the
  /// candidates they were timing (nothing is recorded for them), and returns with
  /// SweepSummary::interrupted set. Every trial committed before stays, so a new sweep resumes.
  std::function<bool()> stop_requested;
  /// A deadline for the whole sweep, in seconds from the call: once it has passed no problem
  /// starts (those being tuned finish), and the problems left are listed in
  /// SweepSummary::not_started. 0 is a deadline already spent; unset: no deadline.
  std::optional<double> deadline_seconds;
  /// Called as problems start and finish on each device, and as trials end.
  std::function<void(const SweepEvent&)> on_event;
  /// Older, device-less form of on_event's started and finished events (index of total problems).
  std::function<void(std::size_t index, std::size_t total, const Problem&, const std::string& state)> on_progress;
};

struct SweepDeviceSummary {
  int device = 0;  ///< ordinal
  std::string name;
  std::string device_key;  ///< fingerprint
  std::size_t tuned = 0;
  std::size_t skipped = 0;
  std::size_t failed = 0;
  double tuning_seconds = 0;  ///< time spent tuning problems (not idle, not skipping cached ones)
};

/// A problem a sweep could not tune on one device.
struct SweepFailure {
  std::size_t index = 0;  ///< in the sweep's list of problems
  Problem problem;
  int device = 0;  ///< ordinal
  /// "no configuration verified" (every trial is in the cache with its status), or why the
  /// problem could not be set up at all: the worker refused it (e.g. its tensors exceed the
  /// device's memory) or died preparing it; such a failure is in the cache too
  /// (`problem_failures`), until a later sweep finds a winner.
  std::string reason;
};

struct SweepSummary {
  std::size_t tuned = 0;
  std::size_t skipped = 0;  ///< already had a winner
  std::size_t failed = 0;   ///< no winner: no configuration verified, or the problem's setup failed
  std::vector<SweepFailure> failures;  ///< one per failed problem and device, in the sweep's order
  std::string db_path;
  std::vector<SweepDeviceSummary> devices;  ///< in the order of SweepOptions::devices
  bool interrupted = false;  ///< stopped by stop_requested or a signal to the workers; resumable
  /// Problems the deadline kept from starting, in the order of the sweep's list (problems with a
  /// winner are skipped as usual, not listed). Running the sweep again tunes them.
  std::vector<Problem> not_started;
  double wall_seconds = 0;
};

/// Tunes every problem and records trials and winners in the SQLite cache, each trial committed
/// as it ends, so an interrupted sweep resumes where it stopped. With several devices every
/// device's thread writes through its own connection to the one cache file (WAL: concurrent
/// writers, in this process or others, lose nothing). Compiles go through one process-wide
/// compiler and the cache's binary table, so a configuration compiled for one device serves
/// every device of the same architecture. Throws Error(driver) when a device cannot be opened,
/// before the cache is touched. A problem that fails (no configuration verifies, or the worker
/// refuses it or dies setting it up) is recorded and counted in SweepSummary::failures, and the
/// sweep goes on; any other failure of a device mid-sweep stops the others and is rethrown.
SweepSummary sweep(const std::vector<Problem>& problems, const SweepOptions& options);

/// The ordinals of a device list: "all" (every device the driver reports; on the simulated
/// device, set by `simulated` or GMJIT_SIMULATED_DEVICE=1, every device GMJIT_SIMULATED_DEVICES
/// names, else one) or ordinals "0,1,3" (a repeated one is kept: see SweepOptions::devices).
/// Throws Error(usage) for a malformed list (checked before the driver is asked), Error(driver)
/// when "all" finds no device.
std::vector<int> parse_devices(const std::string& text, bool simulated = false);

/// The cache file used when none is given: $GMJIT_CACHE, else $XDG_CACHE_HOME/gmjit/gmjit.db,
/// else ~/.cache/gmjit/gmjit.db.
std::string default_cache_path();

}  // namespace gmjit
