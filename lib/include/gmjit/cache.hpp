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

struct CacheCheck {
  bool ok = true;
  std::string path;
  std::optional<std::string> quarantined;  ///< where a corrupt file was moved at open
  std::vector<std::string> problems;
};
/// Integrity check, winners without trials, binaries failing their checksum.
CacheCheck verify_cache(const std::string& db_path);

/// Writes devices, problems, trials and winners (and, when asked, the cached binaries) as JSON.
void export_cache(const std::string& db_path, const std::string& out_path, bool with_binaries = false);

struct ExchangeSummary {
  std::size_t trials_added = 0;
  std::size_t winners_changed = 0;
  std::size_t binaries_added = 0;
  std::size_t binaries_ignored = 0;
};
/// Imports an export: every new trial, and per (device, problem) the faster verified winner.
/// Binaries are ignored unless trust_binaries, and then kept only when their checksum holds and
/// their compile key, recomputed with this library and toolkit, matches. Importing the same file
/// twice changes nothing. Throws Error(usage) naming what is wrong with a bad file; the cache is
/// then untouched.
ExchangeSummary import_cache(const std::string& db_path, const std::string& in_path, bool trust_binaries = false);
/// Combines cache files into `into` with the rules of import_cache.
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
