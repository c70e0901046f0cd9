#include "cache/rules.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>
#include <unordered_map>

#include "cache/fail.hpp"
#include "cache/keys.hpp"
#include "gmjit/error.hpp"
#include "templates/registry.hpp"

namespace gmjit::cache {
namespace {

using nlohmann::json;

// Why one row breaks a rule; thrown inside that row's check and reported with its place.
struct Broken {
  std::string why;
};

template <class... Args>
[[noreturn]] void broken(fmt::format_string<Args...> format, Args&&... args) {
  throw Broken{fmt::format(format, std::forward<Args>(args)...)};
}

// A value as a message shows it: JSON-quoted, so control characters are escaped and the report
// stays one line, and cut short when long.
std::string shown(std::string_view text) {
  constexpr std::size_t kShown = 64;
  const bool cut = text.size() > kShown;
  std::string quoted =
      json(std::string(text.substr(0, kShown))).dump(-1, ' ', false, json::error_handler_t::replace);
  if (cut) quoted += "...";
  return quoted;
}

void text(const std::string& value, const char* field, std::size_t limit, bool required = true) {
  if (required && value.empty()) broken("{} is empty", field);
  if (value.size() > limit) broken("{} is {} bytes; at most {}", field, value.size(), limit);
}

void name(const std::string& value, const char* field, bool required = true) {
  text(value, field, kMaxNameBytes, required);
}

void count(std::int64_t value, const char* field, std::int64_t limit) {
  if (value < 0 || value > limit) broken("{} {} is outside 0..{}", field, value, limit);
}

// NaN stands for "not measured" in every measured field but a passing trial's median.
void measure(double value, const char* field, double lowest = 0) {
  if (std::isnan(value)) return;
  if (!std::isfinite(value) || value < lowest) {
    broken("{} {} is not a finite number of at least {}", field, value, lowest);
  }
}

// A JSON object of integers: a shape or a configuration.
std::map<std::string, std::int64_t> integers(const std::string& value, const char* field) {
  text(value, field, kMaxJsonBytes);
  const json parsed = json::parse(value, nullptr, false);
  if (!parsed.is_object()) broken("{} {} is not a JSON object", field, shown(value));
  std::map<std::string, std::int64_t> out;
  for (const auto& [key, v] : parsed.items()) {
    if (!v.is_number_integer() ||
        (v.is_number_unsigned() && v.get<std::uint64_t>() > std::uint64_t{INT64_MAX})) {
      broken("{}: {} is {}, not an integer", field, shown(key), shown(v.dump()));
    }
    out[key] = v.get<std::int64_t>();
  }
  return out;
}

const templates::KernelDescriptor& known_kernel(const std::string& kernel) {
  for (const auto& k : templates::catalog()) {
    if (k.name == kernel) return k;
  }
  broken("unknown kernel {} (neither built in nor registered in this process)", shown(kernel));
}

// Runs a templates:: check that throws Error(usage), as a rule.
template <class F>
void rule(F&& check) {
  try {
    check();
  } catch (const Error& e) {
    throw Broken{e.message()};
  }
}

// A problem as its trials are checked against it: only problems that passed their own rules.
struct CheckedProblem {
  const templates::KernelDescriptor* kernel = nullptr;
  Shape shape;
};

void check_device(const CacheRows::Device& d) {
  name(d.record.key, "key");
  name(d.record.name, "name", false);
  name(d.record.arch, "arch", false);
  text(d.record.fingerprint_json, "fingerprint_json", kMaxJsonBytes);
  if (!json::parse(d.record.fingerprint_json, nullptr, false).is_object()) {
    broken("fingerprint_json is not a JSON object");
  }
  count(d.first_seen, "first_seen", INT64_MAX);
  count(d.last_seen, "last_seen", INT64_MAX);
}

void check_kernel(const CacheRows::Kernel& k) {
  name(k.name, "name");
  name(k.template_hash, "template_hash");
  known_kernel(k.name);
}

CheckedProblem check_problem(const ProblemRecord& p) {
  name(p.key, "key");
  name(p.kernel, "kernel");
  name(p.template_hash, "template_hash");
  name(p.dtype, "dtype");
  name(p.layout, "layout");
  const auto& kernel = known_kernel(p.kernel);
  if (p.layout != kRowMajor) broken("layout {} is not {}", shown(p.layout), kRowMajor);
  CheckedProblem checked{&kernel, integers(p.shape_json, "shape_json")};
  rule([&] { templates::normalize_problem(kernel, checked.shape, p.dtype); });
  const std::string key = problem_key(p.kernel, p.template_hash, p.dtype, p.layout, checked.shape);
  if (key != p.key) broken("key {} is not the problem key of its fields ({})", shown(p.key), key);
  return checked;
}

void check_config(const templates::KernelDescriptor& kernel, const Config& config) {
  for (const auto& [key, value] : config) {
    const auto param = std::find_if(kernel.params.begin(), kernel.params.end(),
                                    [&](const templates::ParamDomain& p) { return p.name == key; });
    if (param == kernel.params.end()) broken("{} has no parameter {}", kernel.name, shown(key));
    if (std::find(param->values.begin(), param->values.end(), value) == param->values.end()) {
      broken("{}={} is outside the domain of {} ({})", key, value, key, fmt::join(param->values, ", "));
    }
  }
  for (const auto& param : kernel.params) {
    if (config.count(param.name) == 0) broken("config_json lacks parameter {}", param.name);
  }
}

void check_trial(const CacheRows::Trial& t, const std::set<std::string>& devices,
                 const std::unordered_map<std::string, CheckedProblem>& problems,
                 const std::set<std::string>& problem_keys) {
  if (devices.count(t.device_key) == 0) broken("device {} is not among devices", shown(t.device_key));
  if (problem_keys.count(t.problem_key) == 0) {
    broken("problem {} is not among problems", shown(t.problem_key));
  }
  const TrialRecord& r = t.record;
  if (std::find(kTrialStatuses.begin(), kTrialStatuses.end(), r.status) == kTrialStatuses.end()) {
    broken("unknown status {}", shown(r.status));
  }
  const bool passed = r.status == "ok";
  const Config config = integers(r.config_json, "config_json");
  // A problem that broke its own rules was reported already; its trials cannot be checked
  // against it.
  if (const auto it = problems.find(t.problem_key); it != problems.end()) {
    const CheckedProblem& problem = it->second;
    check_config(*problem.kernel, config);
    // A failed trial may hold a configuration the constraints refuse: the tuner records those
    // as 'invalid' without compiling them.
    if (passed) {
      if (const std::string why = problem.kernel->violation(config, problem.shape); !why.empty()) {
        broken("config {} is not valid for shape {}: {}", format_assignments(config),
               format_assignments(problem.shape), why);
      }
    }
  }
  if (passed && !(std::isfinite(r.median_ms) && r.median_ms > 0)) {
    broken("median_ms {} of a passing trial is not a positive finite number", r.median_ms);
  }
  measure(r.median_ms, "median_ms");
  measure(r.spread, "spread");
  // -1 is the tuner's mark for a verification error that was not finite.
  measure(r.verify_error, "verify_error", -1);
  measure(r.compile_ms, "compile_ms");
  count(r.repetitions, "repetitions", kMaxRepetitions);
  count(r.registers, "registers", kMaxRegisters);
  count(r.spill_bytes, "spill_bytes", kMaxResourceBytes);
  count(r.shared_bytes, "shared_bytes", kMaxResourceBytes);
  text(r.detail, "detail", kMaxDetailBytes, false);
  count(t.tuned_at, "tuned_at", INT64_MAX);
  name(t.library_version, "library_version", false);
  count(t.occurrence, "occurrence", static_cast<std::int64_t>(kMaxRowsPerTable));
}

void check_winner(const CacheRows::Winner& w, const CacheRows& rows) {
  if (w.trial >= rows.trials.size()) {
    broken("trial {} is not an index into trials ({} trials)", w.trial, rows.trials.size());
  }
  const CacheRows::Trial& t = rows.trials[w.trial];
  if (t.device_key != w.device_key || t.problem_key != w.problem_key) {
    broken("trial {} belongs to another device or problem", w.trial);
  }
  if (t.record.status != "ok") {
    broken("trial {} has status {}; only an 'ok' trial can win", w.trial, shown(t.record.status));
  }
  count(w.trial_count, "trial_count", kMaxTrialCount);
  count(w.tuned_at, "tuned_at", INT64_MAX);
  name(w.library_version, "library_version", false);
}

void check_binary(const CacheRows::Binary& b) {
  const BinaryRecord& r = b.record;
  name(r.compile_key, "compile_key");
  name(r.kernel, "kernel");
  name(r.arch, "arch");
  name(r.checksum, "checksum", false);
  if (r.cubin.size() > kMaxBinaryBytes) {
    broken("cubin is {} bytes; at most {}", r.cubin.size(), kMaxBinaryBytes);
  }
  text(r.ptx, "ptx", kMaxBinaryBytes, false);
  text(r.resources_json, "resources_json", kMaxJsonBytes);
  count(r.last_used, "last_used", INT64_MAX);
  count(b.created_at, "created_at", INT64_MAX);
}

// Checks each row of one table; false when `report` asked to stop.
template <class Row, class Identity, class Check>
bool check_table(const char* table, const std::vector<Row>& rows,
                 const std::function<bool(const std::string&)>& report, Identity identity,
                 Check check) {
  if (rows.size() > kMaxRowsPerTable) {
    return report(fmt::format("{}: {} rows; at most {}", table, rows.size(), kMaxRowsPerTable));
  }
  for (std::size_t i = 0; i < rows.size(); ++i) {
    try {
      check(rows[i]);
    } catch (const Broken& b) {
      if (!report(fmt::format("{}[{}] ({}): {}", table, i, identity(rows[i]), b.why))) return false;
    }
  }
  return true;
}

std::string place(const std::string& device_key, const std::string& problem_key) {
  return fmt::format("device {}, problem {}", shown(device_key), shown(problem_key));
}

}  // namespace

void check_rows(const CacheRows& rows, const std::function<bool(const std::string&)>& report) {
  std::set<std::string> devices;
  for (const auto& d : rows.devices) devices.insert(d.record.key);
  std::set<std::string> problem_keys;
  for (const auto& p : rows.problems) problem_keys.insert(p.key);
  std::unordered_map<std::string, CheckedProblem> problems;

  const bool go_on =
      check_table("devices", rows.devices, report,
                  [](const CacheRows::Device& d) { return "key " + shown(d.record.key); }, check_device) &&
      check_table("kernels", rows.kernels, report,
                  [](const CacheRows::Kernel& k) { return "name " + shown(k.name); }, check_kernel) &&
      check_table(
          "problems", rows.problems, report,
          [](const ProblemRecord& p) {
            return fmt::format("{} {} {}", shown(p.kernel), shown(p.dtype), shown(p.shape_json));
          },
          [&](const ProblemRecord& p) { problems.emplace(p.key, check_problem(p)); }) &&
      check_table(
          "trials", rows.trials, report,
          [](const CacheRows::Trial& t) {
            return fmt::format("{}, config {}", place(t.device_key, t.problem_key),
                               shown(t.record.config_json));
          },
          [&](const CacheRows::Trial& t) { check_trial(t, devices, problems, problem_keys); }) &&
      check_table(
          "winners", rows.winners, report,
          [](const CacheRows::Winner& w) { return place(w.device_key, w.problem_key); },
          [&](const CacheRows::Winner& w) { check_winner(w, rows); });
  if (!go_on) return;
  check_table(
      "binaries", rows.binaries, report,
      [](const CacheRows::Binary& b) { return "compile_key " + shown(b.record.compile_key); },
      check_binary);
}

void require_valid_rows(const CacheRows& rows) {
  std::string first;
  check_rows(rows, [&](const std::string& line) {
    first = line;
    return false;
  });
  if (!first.empty()) GMJIT_USAGE_FAIL("{}", first);
}

}  // namespace gmjit::cache
