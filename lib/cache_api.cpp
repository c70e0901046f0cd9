// The facade over the SQLite cache: what gmtune show/export/import/merge/verify/gc call.
#include <nlohmann/json.hpp>

#include <algorithm>

#include "cache/exchange.hpp"
#include "cache/store.hpp"
#include "codegen/compiler.hpp"
#include "gmjit/cache.hpp"
#include "gmjit/error.hpp"
#include "templates/registry.hpp"

namespace gmjit {

std::string default_cache_path() { return cache::default_path().string(); }

namespace {

cache::Store open_store(const std::string& db_path) {
  return cache::Store(db_path.empty() ? cache::default_path() : std::filesystem::path(db_path));
}

std::map<std::string, std::int64_t> parse_values(const std::string& json) {
  return nlohmann::json::parse(json).get<std::map<std::string, std::int64_t>>();
}

// A trusted binary is kept only if this library, compiling the kernel, dtype, shape and config
// it claims to be, would produce the same compile key: a cubin can then only be one this
// toolkit would have built itself.
bool compile_key_matches(const cache::BinaryRecord& binary) {
  try {
    const auto claimed = nlohmann::json::parse(binary.resources_json);
    const auto& kernel = templates::find_kernel(claimed.at("kernel").get<std::string>());
    const Shape shape = claimed.at("shape").get<Shape>();
    const Config config = claimed.at("config").get<Config>();
    const std::string dtype = claimed.at("dtype").get<std::string>();
    if (!kernel.violation(config, shape).empty()) return false;
    const auto source = codegen::specialize(kernel, shape, dtype, config);
    return codegen::compile_key(source, binary.arch) == binary.compile_key;
  } catch (const std::exception&) {
    return false;
  }
}

cache::ImportOptions import_options(bool trust_binaries) {
  cache::ImportOptions options;
  options.trust_binaries = trust_binaries;
  options.known_kernel = [](const std::string& name) {
    const auto& kernels = templates::catalog();
    return std::any_of(kernels.begin(), kernels.end(), [&](const auto& k) { return k.name == name; });
  };
  options.accept_binary = compile_key_matches;
  return options;
}

ExchangeSummary summarize(const cache::ImportResult& r) {
  return {r.trials_added, r.winners_changed, r.binaries_added, r.binaries_ignored};
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
  if (const auto moved = store.quarantined()) {
    check.quarantined = moved->string();
    check.problems.push_back("the file was corrupt and was moved to " + moved->string() + "; a fresh cache replaced it");
  }
  const auto report = store.verify();
  check.problems.insert(check.problems.end(), report.problems.begin(), report.problems.end());
  check.ok = report.ok && !check.quarantined;
  return check;
}

void export_cache(const std::string& db_path, const std::string& out_path, bool with_binaries) {
  cache::Store store = open_store(db_path);
  cache::export_json(store, out_path, with_binaries);
}

ExchangeSummary import_cache(const std::string& db_path, const std::string& in_path, bool trust_binaries) {
  cache::Store store = open_store(db_path);
  return summarize(cache::import_json(store, in_path, import_options(trust_binaries)));
}

ExchangeSummary merge_caches(const std::vector<std::string>& sources, const std::string& into, bool trust_binaries) {
  cache::Store store = open_store(into);
  std::vector<std::filesystem::path> paths(sources.begin(), sources.end());
  return summarize(cache::merge_into(store, paths, import_options(trust_binaries)));
}

GcSummary gc_cache(const std::string& db_path, std::int64_t max_bytes) {
  if (max_bytes < 0) throw Error(ErrorKind::usage, 0, "--max-size must not be negative");
  cache::Store store = open_store(db_path);
  const auto r = store.gc(max_bytes);
  return {r.evicted, r.bytes_before, r.bytes_after};
}

}  // namespace gmjit
