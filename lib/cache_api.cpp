// The facade over the SQLite cache: what gmtune show/export/import/merge/verify/gc call.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "cache/exchange.hpp"
#include "cache/rules.hpp"
#include "cache/launch_index.hpp"
#include "cache/store.hpp"
#include "gmjit/cache.hpp"
#include "gmjit/error.hpp"

namespace gmjit {

std::string default_cache_path() { return cache::default_path().string(); }

namespace {

// Records verify names one by one; a cache damaged throughout says enough in these.
constexpr std::size_t kMaxRecordProblems = 20;

cache::Store open_store(const std::string& db_path) {
  return cache::Store(db_path.empty() ? cache::default_path() : std::filesystem::path(db_path));
}

std::map<std::string, std::int64_t> parse_values(const std::string& json) {
  return nlohmann::json::parse(json).get<std::map<std::string, std::int64_t>>();
}

cache::ImportOptions import_options(bool trust_binaries) {
  cache::ImportOptions options;
  options.trust_binaries = trust_binaries;
  return options;
}

ExchangeSummary summarize(const cache::ImportResult& r) {
  return {r.trials_added, r.winners_changed, r.binaries_added, r.binaries_ignored, r.binaries_refused};
}

}  // namespace

std::vector<CachedWinner> cached_winners(const std::string& db_path, const std::string& kernel_filter,
                                         const std::string& device_filter) {
  cache::Store store = open_store(db_path);
  std::vector<CachedWinner> out;
  for (const auto& w : store.winners(kernel_filter)) {
    if (!device_filter.empty() && w.device_name.find(device_filter) == std::string::npos &&
        w.device_key.find(device_filter) == std::string::npos) {
      continue;
    }
    CachedWinner winner{w.device_name, w.device_key, w.kernel,      w.dtype,      parse_values(w.shape_json),
                        parse_values(w.config_json), w.median_ms, w.trial_count, 0,           w.tuned_at};
    for (const auto& t : store.trials(w.device_key, w.problem_key)) {
      if (t.status != "ok" || t.config_json == w.config_json) continue;
      if (winner.runner_up_ms == 0 || t.median_ms < winner.runner_up_ms) winner.runner_up_ms = t.median_ms;
    }
    out.push_back(std::move(winner));
  }
  return out;
}

CacheCheck verify_cache(const std::string& db_path) {
  cache::Store store = open_store(db_path);
  CacheCheck check;
  check.path = store.path().string();
  const auto moved = store.quarantined();
  if (moved) {
    check.quarantined = moved->string();
    check.problems.push_back("the file was corrupt and was moved to " + moved->string() + "; a fresh cache replaced it");
  }
  // Reported until removed: a fresh cache in place of a corrupt one still lost what the old one held.
  for (const auto& copy : cache::Store::quarantined_copies(store.path())) {
    check.corrupt_copies.push_back(copy.string());
    if (moved && copy == *moved) continue;
    check.problems.push_back("a corrupt cache moved aside earlier is still at " + copy.string() +
                             "; examine it, then remove it");
  }
  const auto report = store.verify();
  check.problems.insert(check.problems.end(), report.problems.begin(), report.problems.end());
  std::size_t bad_records = 0;
  cache::check_rows(store.read_rows(/*with_binaries=*/false), [&](const std::string& line) {
    if (++bad_records <= kMaxRecordProblems) check.problems.push_back("record " + line);
    return true;
  });
  if (bad_records > kMaxRecordProblems) {
    check.problems.push_back(fmt::format("and {} more records that break the import rules", bad_records - kMaxRecordProblems));
  }
  check.ok = check.problems.empty();
  return check;
}

void export_cache(const std::string& db_path, const std::string& out_path, bool with_binaries) {
  cache::Store store = open_store(db_path);
  cache::export_json(store, out_path, with_binaries);
}

ExchangeSummary import_cache(const std::string& db_path, const std::string& in_path, bool trust_binaries) {
  cache::Store store = open_store(db_path);
  const auto summary = summarize(cache::import_json(store, in_path, import_options(trust_binaries)));
  cache::try_publish_launch_index(store);
  return summary;
}

ExchangeSummary merge_caches(const std::vector<std::string>& sources, const std::string& into, bool trust_binaries) {
  cache::Store store = open_store(into);
  std::vector<std::filesystem::path> paths(sources.begin(), sources.end());
  const auto summary = summarize(cache::merge_into(store, paths, import_options(trust_binaries)));
  cache::try_publish_launch_index(store);
  return summary;
}

GcSummary gc_cache(const std::string& db_path, std::int64_t max_bytes) {
  if (max_bytes < 0) throw Error(ErrorKind::usage, 0, "--max-size must not be negative");
  cache::Store store = open_store(db_path);
  const auto r = store.gc(max_bytes);
  cache::try_publish_launch_index(store);
  return {r.evicted, r.bytes_before, r.bytes_after};
}

}  // namespace gmjit
