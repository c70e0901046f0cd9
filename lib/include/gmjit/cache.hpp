#pragma once
/// @file cache.hpp
/// The tuning cache as users and operators see it: winners, fleet exchange, checks and size.
/// Every function takes the cache file's path; empty means default_cache_path().

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gmjit/types.hpp"

namespace gmjit {

/// One tuned (device, problem) and its winning configuration.
struct CachedWinner {
  std::string device_name;
  std::string device_key;  ///< the device fingerprint
  std::string kernel;
  std::string dtype;
  Shape shape;
  Config config;
  double median_ms = 0;
  int trial_count = 0;         ///< trials of the run that chose it
  double runner_up_ms = 0;     ///< best other verified configuration; 0 when there is none
  std::int64_t tuned_at = 0;   ///< seconds since the Unix epoch
};

/// Winners, optionally only of one kernel and of devices whose name or fingerprint contains
/// `device_filter`.
std::vector<CachedWinner> cached_winners(const std::string& db_path, const std::string& kernel_filter = {},
                                         const std::string& device_filter = {});

/// What verify_cache found.
struct CacheCheck {
  bool ok = true;  ///< no problems
  std::string path;
  std::optional<std::string> quarantined;  ///< where a corrupt file was moved at this open
  /// Corrupt files moved aside from this path, now or earlier, that are still there
  /// (`<path>.corrupt-<UTC time>`); each is a problem until it is removed.
  std::vector<std::string> corrupt_copies;
  std::vector<std::string> problems;  ///< one line each
};
/// Checks a cache file: SQLite's integrity check and foreign keys, winners whose trial is missing
/// or did not pass, binaries failing their checksum, corrupt copies moved aside (see
/// CacheCheck::corrupt_copies), and every record against the rules an import enforces (see
/// import_cache), the first 20 records that break them named one by one. Opening a corrupt file
/// moves it aside, as every open does.
CacheCheck verify_cache(const std::string& db_path);

/// Writes devices, problems, trials and winners (and, when asked, the cached binaries) as JSON.
void export_cache(const std::string& db_path, const std::string& out_path, bool with_binaries = false);

/// What an import or merge changed.
struct ExchangeSummary {
  std::size_t trials_added = 0;
  std::size_t winners_changed = 0;
  std::size_t binaries_added = 0;
  std::size_t binaries_ignored = 0;  ///< untrusted, already present, or refused
  /// One line per refused binary: its compile key, kernel and arch, and why it was refused.
  std::vector<std::string> binaries_refused;
};
/// Imports an export of export_cache: every new trial, and per (device, problem) the faster
/// verified winner. Importing the same file twice changes nothing.
///
/// The whole file is checked before anything is written, and refused, with the cache untouched,
/// by an Error(usage) of one line naming the file, the table and row of the first bad record,
/// and why. Refused are: a file over 512 MiB (checked before it is read), malformed JSON, another
/// format or version, a missing or mistyped field, and any record that breaks these rules: its
/// kernel is known (built in, or registered in this process, e.g. with gmtune --kernel-manifest);
/// a problem's dtype is one of the kernel's, its shape has exactly the kernel's problem keys with
/// positive sizes, and its key is the problem key of its fields; a trial's configuration has
/// exactly the kernel's parameters, each within its domain, and a passing trial's is valid for
/// the problem's shape (the kernel's constraints) with a finite, positive median; strings,
/// counts, times and resources are bounded; a winner's trial passed and belongs to its device
/// and problem.
///
/// Binaries are ignored unless trust_binaries. Then each is compiled again: the instantiation
/// its resources claim (kernel, dtype, shape, configuration) is compiled with NVRTC for its arch,
/// and the binary is kept only when its compile key is that compile's and its cubin equals the
/// fresh one byte for byte (what is stored is then this library's own compile). Any other binary,
/// or one failing its checksum, is refused, counted in binaries_ignored and explained in
/// binaries_refused; the rest of the file is still imported. This costs one NVRTC compile per
/// binary, as the deployment step it is.
ExchangeSummary import_cache(const std::string& db_path, const std::string& in_path, bool trust_binaries = false);
/// Combines cache files into `into` with the rules of import_cache: every source is read
/// read-only and checked before anything is written, and all are applied in one transaction.
ExchangeSummary merge_caches(const std::vector<std::string>& sources, const std::string& into,
                             bool trust_binaries = false);

struct GcSummary {
  std::size_t evicted = 0;
  std::int64_t bytes_before = 0;
  std::int64_t bytes_after = 0;
};
/// Evicts least recently used binaries until they take at most max_bytes.
GcSummary gc_cache(const std::string& db_path, std::int64_t max_bytes);

}  // namespace gmjit
