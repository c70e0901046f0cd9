// The tuner itself, measured (issues 4 and 18). The public API, but for search's replay (tuner/).
// Not a test: prints tables, the options it ran with, and a JSON summary (--json-out); exit
// status 1 only when a tuning failed.
//   wall        wall time per configuration of an exhaustive tuning, cold and warm, each in a fresh
//               process (the compile cache in memory is per process; warm reuses the cold run's
//               binary cache)
//   efficiency  model-guided search with 30% of the evaluations against exhaustive, over shapes
//   stability   the same tuning repeated: how often it picks the same winner (or one as fast)
//   search      one long search per shape of a shapes file (exhaustive, or with --long-strategy
//               random an even sample under --max-evaluations), measured once; then every
//               strategy (model, random, climb, evolve, surrogate; the seeded ones over several seeds)
//               replayed against its trials (tuner/replay.hpp): evaluations to within 2% of the
//               long search's best, and their best-so-far curves. --json-out keeps every shape's
//               trials, and --replay FILE replays the strategies on them again with no GPU
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <thread>

#include "gmjit/gmjit.hpp"
#include "templates/registry.hpp"
#include "tuner/replay.hpp"
#include "tuner/search.hpp"
#include "tuner/worker.hpp"

extern char** environ;

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;
using namespace gmjit;

constexpr double kNever = std::numeric_limits<double>::infinity();

double seconds_since(Clock::time_point from) { return std::chrono::duration<double>(Clock::now() - from).count(); }

struct Common {
  std::string kernel = "sgemm";
  std::string dtype;  // empty: the kernel's first dtype
  int device = 0;
  std::uint64_t seed = 1;
  double max_seconds_per_candidate = 0.5;
  bool simulated = false;
  std::string json_out;

  void add_to(CLI::App& app) {
    app.add_option("--kernel", kernel, "kernel to tune")->capture_default_str();
    app.add_option("--dtype", dtype, "dtype (default: the kernel's first)");
    app.add_option("--device", device, "device ordinal")->capture_default_str();
    app.add_option("--seed", seed, "tuning seed (inputs, random order)")->capture_default_str();
    app.add_option("--max-seconds-per-candidate", max_seconds_per_candidate, "cap on one candidate's timing")
        ->capture_default_str();
    app.add_flag("--simulated", simulated, "simulated device in the worker (no GPU; exercises the bench only)");
    app.add_option("--json-out", json_out, "write the summary as JSON to this file");
  }

  TuneOptions options(const std::string& strategy, std::size_t max_evaluations) const {
    TuneOptions o;
    o.device = device;
    o.seed = seed;
    o.strategy = strategy;
    o.max_evaluations = max_evaluations;
    o.max_seconds_per_candidate = max_seconds_per_candidate;
    o.simulated_device = simulated;
    return o;
  }

  json to_json() const {
    return {{"kernel", kernel},
            {"dtype", dtype},
            {"device", device},
            {"seed", seed},
            {"max_seconds_per_candidate", max_seconds_per_candidate},
            {"simulated", simulated}};
  }
};

// "m=4096,n=1024,k=4096", or "4096x1024x4096" in the order of the kernel's problem keys.
Shape parse_shape(const std::string& kernel, const std::string& text) {
  if (text.find('=') != std::string::npos) return parse_assignments(text);
  std::vector<std::string> keys;
  for (const auto& info : list_kernels()) {
    if (info.name == kernel) keys = info.problem_keys;
  }
  std::vector<std::string> sizes;
  std::size_t start = 0;
  for (std::size_t x; (x = text.find('x', start)) != std::string::npos; start = x + 1) sizes.push_back(text.substr(start, x - start));
  sizes.push_back(text.substr(start));
  if (keys.empty() || sizes.size() != keys.size()) {
    throw Error(ErrorKind::usage, 0, fmt::format("shape '{}': give k=v,.. or {} sizes joined by 'x'", text, keys.size()));
  }
  std::string assignments;
  for (std::size_t i = 0; i < keys.size(); ++i) assignments += fmt::format("{}{}={}", i ? "," : "", keys[i], sizes[i]);
  return parse_assignments(assignments);
}

std::string shape_label(const std::string& kernel, const Shape& shape) {
  std::string out;
  for (const auto& info : list_kernels()) {
    if (info.name != kernel) continue;
    for (const auto& key : info.problem_keys) out += (out.empty() ? "" : "x") + std::to_string(shape.at(key));
  }
  return out.empty() ? format_assignments(shape) : out;
}

std::string device_name(const Common& common) {
  if (common.simulated) return "simulated device";
  const auto devices = list_devices();
  if (common.device < 0 || static_cast<std::size_t>(common.device) >= devices.size()) {
    throw Error(ErrorKind::usage, 0, fmt::format("no device {}: {} present", common.device, devices.size()));
  }
  return devices[common.device].name;
}

void write_json(const std::string& path, const json& summary) {
  if (path.empty()) return;
  std::ofstream out(path);
  out << summary.dump(2) << "\n";
  if (!out) throw Error(ErrorKind::usage, 0, "cannot write " + path);
}

// One benchmark's run: what it printed as it began, and the head of the JSON summary it ends with.
struct Benchmark {
  std::string name;
  std::string device;
  json options;  // the common ones and the benchmark's own

  // `results` under that head, to `path` (empty: nowhere).
  void write_summary(const std::string& path, json results) const {
    results.update({{"benchmark", name}, {"device", device}, {"options", options}});
    write_json(path, results);
  }
};

// Prints what a benchmark runs with before any run, and checks the strategy, so a typo fails at
// once rather than after the first shapes.
// `device` names the device when the results were measured elsewhere (empty: the live one's).
Benchmark begin_benchmark(const char* name, const Common& common, const std::string& strategy, const json& own,
                          const std::string& device = {}) {
  strategy_summary(strategy);
  Benchmark run{name, device.empty() ? device_name(common) : device, common.to_json()};
  run.options["strategy"] = strategy;
  run.options.update(own);
  std::printf("bench_tuner %s on %s\noptions: %s\n\n", name, run.device.c_str(), run.options.dump().c_str());
  std::fflush(stdout);
  return run;
}

const TrialReport* winner_of(const TuneReport& report) {
  return report.winner ? &report.trials[*report.winner] : nullptr;
}

// The last verified measurement of `config` in the report (a re-timed candidate appears again).
const TrialReport* measured(const TuneReport& report, const Config& config) {
  const TrialReport* found = nullptr;
  for (const auto& trial : report.trials) {
    if (trial.status == TrialStatus::ok && trial.config == config) found = &trial;
  }
  return found;
}

double median(std::vector<double> values) {
  if (values.empty()) return std::nan("");
  std::sort(values.begin(), values.end());
  const std::size_t mid = values.size() / 2;
  return values.size() % 2 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
}

std::string number(double value, const char* spec = "{:.4f}") {
  if (std::isinf(value)) return "never";
  if (std::isnan(value)) return "-";
  return fmt::format(fmt::runtime(spec), value);
}

// JSON has no infinity: "never reached" is null.
json finite_or_null(double value) { return std::isfinite(value) ? json(value) : json(nullptr); }

json curve_json(const TuneReport& report) {
  json points = json::array();
  for (const auto& p : report.curve) points.push_back({p.evaluations, p.seconds, p.best_ms});
  return points;
}

// Evaluations after which the best-so-far first came within `percent` of `reference_ms`.
double evaluations_to_within(const TuneReport& report, double reference_ms, double percent) {
  for (const auto& p : report.curve) {
    if (p.best_ms > 0 && p.best_ms <= reference_ms * (1 + percent / 100)) return static_cast<double>(p.evaluations);
  }
  return kNever;
}

// Only the points where the best improved, and the last: enough to redraw the curve.
void print_curve(const std::string& shape, const TuneReport& report) {
  double last = kNever;
  for (std::size_t i = 0; i < report.curve.size(); ++i) {
    const auto& p = report.curve[i];
    if (p.best_ms < last || i + 1 == report.curve.size()) {
      std::printf("curve,%s,%s,%zu,%.3f,%.5f\n", shape.c_str(), report.strategy.c_str(), p.evaluations, p.seconds,
                  p.best_ms);
    }
    last = std::min(last, p.best_ms);
  }
}

// Runs this executable again with `args`; its exit status.
int run_self(const std::vector<std::string>& args) {
  const std::string exe = fs::read_symlink("/proc/self/exe");
  std::vector<char*> argv{const_cast<char*>(exe.c_str())};
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::fflush(stdout);
  pid_t pid = 0;
  if (posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv.data(), environ) != 0) return 127;
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return 127;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// --- wall -------------------------------------------------------------------------------------

struct WallArgs {
  std::vector<std::string> shapes{"4096x4096x4096"};
  std::size_t max_evaluations = 0;
  std::string strategy = "exhaustive";
  bool keep_db = false;
  // Set only in the child processes.
  std::string phase;
  std::string db;
};

// One tuning in this (fresh) process.
int wall_phase(const Common& common, const WallArgs& args) {
  const Shape shape = parse_shape(common.kernel, args.shapes.at(0));
  TuneOptions options = common.options(args.strategy, args.max_evaluations);
  options.db_path = args.db;
  const auto began = Clock::now();
  const TuneReport report = tune(Problem{common.kernel, common.dtype, shape, "bench_tuner wall"}, options);
  const double wall = seconds_since(began);
  std::size_t verified = 0, cached = 0;
  double compile_ms = 0;
  for (const auto& trial : report.trials) {
    verified += trial.status == TrialStatus::ok;
    cached += trial.binary_cached;
    compile_ms += trial.compile_ms;
  }
  const TrialReport* best = winner_of(report);
  json out{{"phase", args.phase},
           {"shape", shape_label(common.kernel, shape)},
           {"evaluations", report.evaluations},
           {"valid_candidates", report.valid_candidates},
           {"verified", verified},
           {"binary_cached", cached},
           {"compile_ms_total", compile_ms},
           {"worker_restarts", report.worker_restarts},
           {"wall_s", wall},
           {"report_wall_s", report.wall_seconds},
           {"winner", best ? format_assignments(best->config) : ""},
           {"winner_ms", best ? best->median_ms : 0.0}};
  std::printf("%s %s: %zu evaluations (%zu verified, %zu binaries from the cache) in %.2f s\n", args.phase.c_str(),
              out["shape"].get<std::string>().c_str(), report.evaluations, verified, cached, wall);
  write_json(common.json_out, out);
  return best ? 0 : 1;
}

int wall(const Common& common, const WallArgs& args) {
  const Benchmark run = begin_benchmark("wall", common, args.strategy,
                                        {{"max_evaluations", args.max_evaluations}, {"shapes", args.shapes}});
  for (const auto& text : args.shapes) parse_shape(common.kernel, text);  // a usage error before any run
  char dir_template[] = "/tmp/gmjit-bench-tuner-XXXXXX";
  if (!mkdtemp(dir_template)) throw Error(ErrorKind::usage, errno, "cannot create a directory in /tmp");
  const fs::path dir = dir_template;
  int status = 0;
  json rows = json::array();
  for (std::size_t s = 0; s < args.shapes.size(); ++s) {
    const fs::path db = dir / fmt::format("shape{}", s) / "gmjit.db";
    for (const std::string phase : {"cold", "warm"}) {
      const fs::path result = dir / fmt::format("shape{}-{}.json", s, phase);
      std::vector<std::string> child{"wall-phase", "--phase", phase, "--db", db.string(), "--shape", args.shapes[s],
                                     "--max-evaluations", std::to_string(args.max_evaluations), "--strategy", args.strategy,
                                     "--kernel", common.kernel,
                                     "--device", std::to_string(common.device), "--seed", std::to_string(common.seed),
                                     "--max-seconds-per-candidate", fmt::format("{}", common.max_seconds_per_candidate),
                                     "--json-out", result.string()};
      if (!common.dtype.empty()) child.insert(child.end(), {"--dtype", common.dtype});
      if (common.simulated) child.push_back("--simulated");
      const int rc = run_self(child);
      if (rc != 0) {
        std::printf("%s %s: failed (exit %d)\n", phase.c_str(), args.shapes[s].c_str(), rc);
        status = 1;
      }
      // A run that verified nothing still explored its configurations: its row stays.
      if (fs::exists(result)) rows.push_back(json::parse(std::ifstream(result)));
    }
  }
  if (!args.keep_db) fs::remove_all(dir);

  std::printf("\n| shape | phase | configs explored | verified | binaries from cache | wall s | s per config |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (auto& row : rows) {
    const auto evaluations = row["evaluations"].get<std::size_t>();
    const double per = evaluations ? row["wall_s"].get<double>() / evaluations : 0;
    row["s_per_config"] = per;
    std::printf("| %s | %s | %zu | %zu | %zu | %.2f | %.4f |\n", row["shape"].get<std::string>().c_str(),
                row["phase"].get<std::string>().c_str(), evaluations, row["verified"].get<std::size_t>(),
                row["binary_cached"].get<std::size_t>(), row["wall_s"].get<double>(), per);
  }
  std::printf("\nwall s: from the call to tune() to its return, in a fresh process (worker start, device setup, "
              "compiles, verification and timing included).\n");
  run.write_summary(common.json_out, {{"rows", rows}});
  return status;
}

// --- efficiency -------------------------------------------------------------------------------

struct EfficiencyArgs {
  std::vector<std::string> shapes{"512x512x512",    "1024x1024x1024", "2048x2048x2048",
                                  "1000x1000x1000", "2048x2048x512",  "1024x4096x1024",
                                  "4096x1024x4096", "128x4096x4096",  "4096x128x4096"};
  std::string strategy = "model";
  double fraction = 0.30;
  double within_percent = 3.0;
  double time_limit = 0;
};

int efficiency(const Common& common, const EfficiencyArgs& args) {
  const Benchmark run = begin_benchmark("efficiency", common, args.strategy,
                                        {{"shapes", args.shapes},
                                         {"fraction", args.fraction},
                                         {"within_percent", args.within_percent},
                                         {"time_limit_s", args.time_limit}});
  const auto began = Clock::now();
  double last_shape_s = 0;
  int status = 0;
  json rows = json::array();
  std::vector<std::string> skipped;
  for (const auto& text : args.shapes) {
    const double elapsed = seconds_since(began);
    // Assume the next shape costs what the last did, so the limit is kept, not overrun by one shape.
    if (args.time_limit > 0 && elapsed + last_shape_s > args.time_limit) {
      skipped.push_back(text);
      continue;
    }
    const Shape shape = parse_shape(common.kernel, text);
    const std::string label = shape_label(common.kernel, shape);
    const Problem problem{common.kernel, common.dtype, shape, "bench_tuner efficiency"};
    const auto shape_began = Clock::now();
    TuneReport full, guided_report;
    std::size_t budget = 0;
    try {
      full = tune(problem, common.options("exhaustive", 0));
      budget = std::max<std::size_t>(1, static_cast<std::size_t>(std::floor(args.fraction * full.valid_candidates)));
      if (full.winner) guided_report = tune(problem, common.options(args.strategy, budget));
    } catch (const Error& e) {
      std::printf("%s: %s\n", label.c_str(), e.what());
      status = 1;
      continue;
    }
    last_shape_s = seconds_since(shape_began);
    const TrialReport* full_best = winner_of(full);
    if (!full_best) {
      std::printf("%s: exhaustive found no verified configuration\n", label.c_str());
      status = 1;
      continue;
    }
    const TrialReport* guided_best = winner_of(guided_report);
    if (!guided_best) {
      std::printf("%s: %s found no verified configuration\n", label.c_str(), args.strategy.c_str());
      status = 1;
      continue;
    }
    const double best_ms = full_best->median_ms;
    const double gap = (guided_best->median_ms / best_ms - 1) * 100;
    // The guided pick as the exhaustive run timed it: the quality of the choice without the
    // noise between two runs.
    const TrialReport* pick_in_full = measured(full, guided_best->config);
    const double pick_gap = pick_in_full ? (pick_in_full->median_ms / best_ms - 1) * 100 : std::nan("");
    const double guided_reach = evaluations_to_within(guided_report, best_ms, args.within_percent);
    const double full_reach = evaluations_to_within(full, best_ms, args.within_percent);
    const double valid = static_cast<double>(full.valid_candidates);
    json row{{"shape", label},
             {"valid_candidates", full.valid_candidates},
             {"exhaustive_best_ms", best_ms},
             {"exhaustive_winner", format_assignments(full_best->config)},
             {"exhaustive_evaluations", full.evaluations},
             {"exhaustive_wall_s", full.wall_seconds},
             {"exhaustive_evaluations_to_within", finite_or_null(full_reach)},
             {"guided_best_ms", guided_best->median_ms},
             {"guided_winner", format_assignments(guided_best->config)},
             {"guided_budget", budget},
             {"guided_evaluations", guided_report.evaluations},
             {"guided_wall_s", guided_report.wall_seconds},
             {"gap_percent", gap},
             {"pick_gap_percent", finite_or_null(pick_gap)},
             {"guided_evaluations_to_within", finite_or_null(guided_reach)},
             {"guided_fraction_to_within", finite_or_null(guided_reach / valid)},
             {"exhaustive_curve", curve_json(full)},
             {"guided_curve", curve_json(guided_report)}};
    std::printf("%s: exhaustive %.4f ms (%zu evaluations, %.1f s), %s %.4f ms (%zu evaluations, %.1f s), gap %.2f%%\n",
                label.c_str(), best_ms, full.evaluations, full.wall_seconds, args.strategy.c_str(),
                guided_best->median_ms, guided_report.evaluations, guided_report.wall_seconds, gap);
    print_curve(label, full);
    print_curve(label, guided_report);
    std::fflush(stdout);
    rows.push_back(std::move(row));
  }

  std::vector<double> gaps, pick_gaps, reach_fractions, used_fractions;
  std::printf("\n| shape | valid | exhaustive best ms | %s best ms | gap %% | pick gap %% | exhaustive evals | %s evals "
              "| %s evals to within %.0f%% | exhaustive evals to within %.0f%% |\n",
              args.strategy.c_str(), args.strategy.c_str(), args.strategy.c_str(), args.within_percent,
              args.within_percent);
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  for (const auto& row : rows) {
    const double valid = row["valid_candidates"].get<double>();
    const double reach = row["guided_evaluations_to_within"].is_null() ? kNever : row["guided_evaluations_to_within"].get<double>();
    const double full_reach =
        row["exhaustive_evaluations_to_within"].is_null() ? kNever : row["exhaustive_evaluations_to_within"].get<double>();
    const double pick_gap = row["pick_gap_percent"].is_null() ? std::nan("") : row["pick_gap_percent"].get<double>();
    gaps.push_back(row["gap_percent"].get<double>());
    if (!std::isnan(pick_gap)) pick_gaps.push_back(pick_gap);
    reach_fractions.push_back(reach / valid);
    used_fractions.push_back(row["guided_evaluations"].get<double>() / valid);
    std::printf("| %s | %.0f | %.4f | %.4f | %.2f | %s | %zu | %zu | %s | %s |\n", row["shape"].get<std::string>().c_str(),
                valid, row["exhaustive_best_ms"].get<double>(), row["guided_best_ms"].get<double>(),
                row["gap_percent"].get<double>(), number(pick_gap, "{:.2f}").c_str(),
                row["exhaustive_evaluations"].get<std::size_t>(), row["guided_evaluations"].get<std::size_t>(),
                std::isinf(reach) ? "never" : fmt::format("{:.0f} ({:.0f}%)", reach, 100 * reach / valid).c_str(),
                std::isinf(full_reach) ? "never" : fmt::format("{:.0f} ({:.0f}%)", full_reach, 100 * full_reach / valid).c_str());
  }
  const double median_reach = median(reach_fractions);
  const double median_gap = median(gaps);
  const bool met = rows.size() >= 8 && median_reach <= args.fraction;
  std::printf("\nmedian over %zu shapes: gap %.2f%%, pick gap %s%%, %s used %.1f%% of the valid candidates, "
              "within %.0f%% after %s of them\n",
              rows.size(), median_gap, number(median(pick_gaps), "{:.2f}").c_str(), args.strategy.c_str(),
              100 * median(used_fractions), args.within_percent,
              std::isinf(median_reach) ? "never" : fmt::format("{:.1f}%", 100 * median_reach).c_str());
  std::printf("target: %s within %.0f%% of exhaustive after <= %.0f%% of the evaluations, median over >= 8 shapes: %s\n",
              args.strategy.c_str(), args.within_percent, 100 * args.fraction, met ? "met" : "not met");
  std::printf("gap: the %s run's best median over the exhaustive run's; pick gap: the %s winner as the exhaustive run "
              "timed it. Curves: grep '^curve,' (shape,strategy,evaluations,seconds,best_ms).\n",
              args.strategy.c_str(), args.strategy.c_str());
  if (!skipped.empty()) {
    std::string names;
    for (const auto& name : skipped) names += " " + name;
    std::printf("skipped (time limit):%s\n", names.c_str());
  }
  run.write_summary(common.json_out, {{"rows", rows},
                                      {"skipped", skipped},
                                      {"median_gap_percent", finite_or_null(median_gap)},
                                      {"median_pick_gap_percent", finite_or_null(median(pick_gaps))},
                                      {"median_fraction_to_within", finite_or_null(median_reach)},
                                      {"median_fraction_used", finite_or_null(median(used_fractions))},
                                      {"target_met", met}});
  return status;
}

// --- stability --------------------------------------------------------------------------------

struct StabilityArgs {
  std::string shape = "2048x2048x2048";
  std::string strategy = "model";
  std::size_t max_evaluations = 0;
  int repeats = 20;
  double within_percent = 1.0;
  double time_limit = 0;
};

int stability(const Common& common, const StabilityArgs& args) {
  const Shape shape = parse_shape(common.kernel, args.shape);
  const Benchmark run = begin_benchmark("stability", common, args.strategy,
                                        {{"shape", shape_label(common.kernel, shape)},
                                         {"max_evaluations", args.max_evaluations},
                                         {"repeats", args.repeats},
                                         {"within_percent", args.within_percent},
                                         {"time_limit_s", args.time_limit}});
  const Problem problem{common.kernel, common.dtype, shape, "bench_tuner stability"};
  std::vector<TuneReport> reports;
  int failed = 0;
  const auto began = Clock::now();
  double last_s = 0;
  for (int r = 0; r < args.repeats; ++r) {
    if (args.time_limit > 0 && seconds_since(began) + last_s > args.time_limit) break;
    const auto run_began = Clock::now();
    try {
      reports.push_back(tune(problem, common.options(args.strategy, args.max_evaluations)));
    } catch (const Error& e) {
      // A failed run counts against stability: it picked nothing.
      std::printf("run %d: %s\n", r + 1, e.what());
      reports.emplace_back();
      ++failed;
    }
    last_s = seconds_since(run_began);
    const TrialReport* best = winner_of(reports.back());
    std::printf("run %d: %s %s ms, %zu evaluations, %.1f s\n", r + 1, best ? format_assignments(best->config).c_str() : "none",
                best ? fmt::format("{:.4f}", best->median_ms).c_str() : "-", reports.back().evaluations, last_s);
    std::fflush(stdout);
  }

  std::map<Config, int> picks;
  for (const auto& report : reports) {
    if (const TrialReport* best = winner_of(report)) ++picks[best->config];
  }
  Config modal;
  int modal_count = 0;
  for (const auto& [config, count] : picks) {
    if (count > modal_count) {
      modal = config;
      modal_count = count;
    }
  }
  int stable = 0;
  json runs = json::array();
  std::printf("\n| run | winner | winner ms | modal config ms (same run) | difference %% | evaluations | wall s | stable |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (std::size_t r = 0; r < reports.size(); ++r) {
    const TuneReport& report = reports[r];
    const TrialReport* best = winner_of(report);
    const TrialReport* modal_trial = measured(report, modal);
    double difference = std::nan("");
    bool ok = false;
    if (best && best->config == modal) {
      difference = 0;
      ok = true;
    } else if (best && modal_trial) {
      // Judged by the run's own medians: the question is whether this run could tell them apart.
      difference = std::abs(best->median_ms / modal_trial->median_ms - 1) * 100;
      ok = difference <= args.within_percent;
    }
    stable += ok;
    runs.push_back({{"winner", best ? format_assignments(best->config) : ""},
                    {"winner_ms", best ? best->median_ms : 0.0},
                    {"modal_ms", modal_trial ? json(modal_trial->median_ms) : json(nullptr)},
                    {"difference_percent", finite_or_null(difference)},
                    {"evaluations", report.evaluations},
                    {"wall_s", report.wall_seconds},
                    {"stable", ok}});
    std::printf("| %zu | %s | %s | %s | %s | %zu | %.1f | %s |\n", r + 1,
                best ? format_assignments(best->config).c_str() : "none",
                best ? fmt::format("{:.4f}", best->median_ms).c_str() : "-",
                modal_trial ? fmt::format("{:.4f}", modal_trial->median_ms).c_str() : "not measured",
                number(difference, "{:.2f}").c_str(), report.evaluations, report.wall_seconds, ok ? "yes" : "no");
  }
  const int target = static_cast<int>(std::ceil(0.95 * args.repeats));
  std::printf("\ndistinct winners: %zu; modal winner %s picked %d of %zu times\n", picks.size(),
              format_assignments(modal).c_str(), modal_count, reports.size());
  std::printf("stable picks (the modal winner, or within %.0f%% of its median in the same run): %d of %zu\n",
              args.within_percent, stable, reports.size());
  std::printf("target: >= %d of %d: %s\n", target, args.repeats,
              stable >= target ? "met" : (static_cast<int>(reports.size()) < args.repeats ? "not met (runs cut by the time limit)" : "not met"));
  json winners = json::array();
  for (const auto& [config, count] : picks) winners.push_back({{"config", format_assignments(config)}, {"count", count}});
  run.write_summary(common.json_out, {{"runs", runs},
                                      {"winners", winners},
                                      {"modal_winner", format_assignments(modal)},
                                      {"modal_count", modal_count},
                                      {"stable", stable},
                                      {"completed", reports.size()},
                                      {"target", target},
                                      {"target_met", stable >= target}});
  return failed > 0 || picks.empty() ? 1 : 0;
}

// --- search -----------------------------------------------------------------------------------

struct SearchArgs {
  std::string shapes_file;
  std::vector<std::string> shapes;  // instead of the file's
  std::string keys = "trans_b=1";
  std::size_t max_shapes = 0;
  std::size_t max_evaluations = 0;
  // Under a cap, exhaustive measures the first candidates of the domain order (one corner of the
  // space); random samples the whole space evenly, so the replays do not inherit a corner.
  std::string long_strategy = "exhaustive";
  std::vector<std::string> strategies{"model", "random", "climb", "evolve", "surrogate"};
  std::string judged = "surrogate";
  std::uint64_t seeds = 5;
  std::size_t ahead = 0;
  double within_percent = 2.0;
  double fraction = 0.10;
  double time_limit = 0;
  std::string replay_file;  // an earlier run's --json-out: its trials instead of new long searches
};

// The device the worker reports, whose limits the session's cost model reads.
DeviceInfo search_device(const Common& common) {
  if (common.simulated) return tuner::simulated_device(common.device);
  const auto devices = list_devices();
  return devices.at(static_cast<std::size_t>(common.device));
}

// The analytic model's estimate for `problem` (normalized) on `device`, as the session ranks by.
std::function<double(const Config&)> model_of(const templates::NormalizedProblem& problem, const DeviceInfo& device) {
  const auto* kernel = problem.kernel;
  const auto* dtype = &templates::dtype_info(problem.dtype);
  return [kernel, shape = problem.shape, dtype, device](const Config& config) {
    return tuner::estimate_ms(*kernel, config, shape, *dtype, device);
  };
}

// What the long search measured, as the space a session would have searched and its table.
struct Recording {
  tuner::SearchSpace space;
  std::vector<TrialReport> table;  // table[i]: the trial of space.candidates[i]
};

// The session records every configuration its filter rejects before the first evaluation, then
// one trial per evaluation (re-timing a finalist updates its trial in place), so the evaluated
// candidates are the report's last `evaluations` trials. They are put back in domain order, the
// order the session's candidates are in.
Recording recording_of(const TuneReport& report, const DeviceInfo& device) {
  const auto& kernel = templates::find_kernel(report.problem.kernel);
  const auto normalized = templates::normalize_problem(kernel, report.problem.shape, report.problem.dtype);
  const std::vector<TrialReport> evaluated(report.trials.end() - static_cast<std::ptrdiff_t>(report.evaluations),
                                           report.trials.end());
  std::set<Config> configs;
  for (const auto& trial : evaluated) configs.insert(trial.config);
  if (configs.size() != evaluated.size()) {
    throw Error(ErrorKind::usage, 0, fmt::format("the long search's last {} trials are {} configurations",
                                                 evaluated.size(), configs.size()));
  }
  Recording out;
  for (const auto& config : templates::all_configs(kernel)) {
    if (configs.count(config)) out.space.candidates.push_back(config);
  }
  out.table = tuner::recorded_for(out.space, evaluated);
  out.space.estimate_ms = model_of(normalized, device);
  return out;
}

// What --replay reads back: the table as the library writes a TuneReport (tune_report_json: the
// problem and one trial per candidate, in domain order) and the device the model priced it for.
json recording_json(const Recording& recording, const Problem& problem, const DeviceInfo& device) {
  TuneReport table;
  table.problem = problem;
  table.device_name = device.name;
  table.device_key = device.fingerprint();
  table.trials = recording.table;
  table.evaluations = recording.table.size();
  json out = json::parse(tune_report_json(table));
  out["device_info"] = tuner::device_to_json(device);
  return out;
}

Recording recording_from_json(const json& recorded) {
  const Problem problem{recorded.at("kernel").get<std::string>(), recorded.at("dtype").get<std::string>(),
                        recorded.at("shape").get<Shape>(), "bench_tuner search --replay"};
  const auto& kernel = templates::find_kernel(problem.kernel);
  Recording out;
  for (const auto& trial : recorded.at("trials")) {
    TrialReport t;
    t.config = templates::with_defaults(kernel, trial.at("config").get<Config>());
    t.status = parse_trial_status(trial.at("status").get<std::string>());
    t.median_ms = trial.at("median_ms").get<double>();
    t.spread = trial.at("spread").get<double>();
    t.ci_percent = trial.at("ci_percent").get<double>();
    t.repetitions = trial.at("repetitions").get<int>();
    t.batch = trial.at("batch").get<int>();
    t.verify_error = trial.at("verify_error").get<double>();
    out.space.candidates.push_back(t.config);
    out.table.push_back(std::move(t));
  }
  // The configurations of this version's domain, in its order: a recording of another domain
  // would replay a space no session searches.
  std::map<Config, std::size_t> rank;
  for (const auto& config : templates::all_configs(kernel)) rank.emplace(config, rank.size());
  for (std::size_t i = 0; i < out.table.size(); ++i) {
    const auto found = rank.find(out.table[i].config);
    if (found == rank.end() || (i > 0 && found->second <= rank.at(out.table[i - 1].config))) {
      throw Error(ErrorKind::usage, 0,
                  fmt::format("recorded trial {} ({}) is not in {}'s domain order: recorded by another version", i,
                              format_assignments(out.table[i].config), problem.kernel));
    }
  }
  out.space.estimate_ms =
      model_of(templates::normalize_problem(kernel, problem.shape, problem.dtype),
               tuner::device_from_json(recorded.at("device_info")));
  return out;
}

json read_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(ErrorKind::usage, errno, "cannot read " + path);
  json parsed = json::parse(in, nullptr, false);
  if (parsed.is_discarded()) throw Error(ErrorKind::usage, 0, path + " is not JSON");
  return parsed;
}

// The long search as an earlier run's row tells it: enough for its curve and the tables.
TuneReport long_search_from_json(const json& row, const std::string& strategy) {
  TuneReport report;
  report.strategy = strategy;
  report.valid_candidates = row.at("valid_candidates").get<std::size_t>();
  report.wall_seconds = row.at("long_wall_s").get<double>();
  for (const auto& point : row.at("long_curve")) {
    report.curve.push_back({point.at(0).get<std::size_t>(), point.at(1).get<double>(), point.at(2).get<double>()});
  }
  return report;
}

// One strategy's replays of one shape: per seed (one for a strategy without randomness).
struct Replayed {
  std::string strategy;
  std::vector<std::uint64_t> seeds;
  std::vector<tuner::ReplayResult> runs;
  std::vector<double> reach;  // evaluations to within, per run; kNever when never
  double median_reach() const { return median(reach); }
};

// The strategies whose order depends on TuneOptions::seed: each is replayed over several.
bool seeded(const std::string& strategy) { return strategy == "random" || strategy == "evolve"; }

void print_replay_curve(const std::string& shape, const std::string& label, const tuner::ReplayResult& run) {
  double last = kNever;
  for (std::size_t e = 0; e < run.best_ms.size(); ++e) {
    const double best = run.best_ms[e];
    // No seconds in a replay: the field stays empty.
    if ((best > 0 && best < last) || e + 1 == run.best_ms.size()) {
      std::printf("curve,%s,%s,%zu,,%.5g\n", shape.c_str(), label.c_str(), e + 1, best);
    }
    if (best > 0) last = std::min(last, best);
  }
}

json replay_curve_json(const tuner::ReplayResult& run) {
  json points = json::array();
  double last = kNever;
  for (std::size_t e = 0; e < run.best_ms.size(); ++e) {
    if ((run.best_ms[e] > 0 && run.best_ms[e] < last) || e + 1 == run.best_ms.size()) {
      points.push_back({e + 1, run.best_ms[e]});
    }
    if (run.best_ms[e] > 0) last = std::min(last, run.best_ms[e]);
  }
  return points;
}

// The keys of `text` ("k=v,..") that are problem keys of `kernel`.
Shape kernel_keys(const std::string& kernel, const std::string& text) {
  Shape keys;
  if (text.empty()) return keys;
  for (const auto& info : list_kernels()) {
    if (info.name != kernel) continue;
    for (const auto& [key, value] : parse_assignments(text)) {
      const auto& known = info.problem_keys;
      if (std::find(known.begin(), known.end(), key) != known.end()) keys[key] = value;
    }
  }
  return keys;
}

// The problems of `kernel` in a shapes file, each sweep of it given `keys` where neither it nor a
// shape names them (the file's own "keys" mechanism, so the library's reader checks the rest):
// ../shared/shapes/gemm.json names no trans_b, which the llm preset, reading the same shapes, sets.
std::vector<Problem> read_shapes_with_keys(const std::string& path, const std::string& kernel, const Shape& keys) {
  std::ifstream in(path);
  if (!in) throw Error(ErrorKind::usage, errno, "cannot read " + path);
  json file;
  try {
    file = json::parse(in);
  } catch (const json::exception& e) {
    throw Error(ErrorKind::usage, 0, fmt::format("{}: {}", path, e.what()));
  }
  if (file.contains("sweeps") && file["sweeps"].is_array()) {
    for (auto& sweep : file["sweeps"]) {
      if (!sweep.is_object() || sweep.value("kernel", "") != kernel) continue;
      json& own = sweep["keys"];
      if (own.is_null()) own = json::object();
      for (const auto& [key, value] : keys) {
        if (own.is_object() && !own.contains(key)) own[key] = value;
      }
    }
  }
  char name[] = "/tmp/gmjit-bench-shapes-XXXXXX";
  const int fd = mkstemp(name);
  if (fd < 0) throw Error(ErrorKind::usage, errno, "cannot create a file in /tmp");
  close(fd);
  std::ofstream(name) << file.dump();
  try {
    auto problems = read_shapes_file(name, {kernel});
    fs::remove(name);
    return problems;
  } catch (...) {
    fs::remove(name);
    throw;
  }
}

int search(const Common& common, const SearchArgs& args) {
  for (const auto& name : args.strategies) strategy_summary(name);
  strategy_summary(args.long_strategy);
  if (tuner::find_strategy(args.long_strategy).successive_halving) {
    throw Error(ErrorKind::usage, 0,
                fmt::format("--long-strategy {}: a long search must time every candidate in full", args.long_strategy));
  }
  const Shape keys = kernel_keys(common.kernel, args.keys);
  std::vector<Problem> problems;
  // --replay: the shapes, the long search and the device come from the earlier run's summary.
  json replayed_rows = json::array();
  std::string long_strategy = args.long_strategy, measured_on;
  std::size_t recorded_ahead = 0;
  if (!args.replay_file.empty()) {
    const json earlier = read_json_file(args.replay_file);
    if (earlier.value("benchmark", "") != "search") {
      throw Error(ErrorKind::usage, 0, fmt::format("{} is not a bench_tuner search --json-out", args.replay_file));
    }
    for (const auto& row : earlier.at("rows")) {
      if (!row.contains("recording")) {
        throw Error(ErrorKind::usage, 0,
                    fmt::format("{}: shape {} has no recorded trials (written by a bench_tuner that kept none)",
                                args.replay_file, row.value("shape", "?")));
      }
      const auto& recorded = row.at("recording");
      if (recorded.at("kernel") != common.kernel || recorded.at("dtype") != common.dtype) continue;
      problems.push_back({common.kernel, common.dtype, recorded.at("shape").get<Shape>(), args.replay_file});
      replayed_rows.push_back(row);
    }
    if (problems.empty()) {
      throw Error(ErrorKind::usage, 0,
                  fmt::format("{} has no recorded {} {} shapes", args.replay_file, common.kernel, common.dtype));
    }
    long_strategy = earlier.at("options").at("strategy").get<std::string>();
    recorded_ahead = earlier.at("options").at("ahead").get<std::size_t>();
    measured_on = earlier.at("device").get<std::string>() + " (replayed from " + args.replay_file + ")";
  } else if (!args.shapes.empty()) {
    for (const auto& text : args.shapes) {
      Shape shape = parse_shape(common.kernel, text);
      shape.insert(keys.begin(), keys.end());  // the shape's own keys stay
      problems.push_back({common.kernel, common.dtype, shape, "--shape"});
    }
  } else {
    if (args.shapes_file.empty()) throw Error(ErrorKind::usage, 0, "search: give --shapes FILE or --shape");
    for (auto& problem : read_shapes_with_keys(args.shapes_file, common.kernel, keys)) {
      if (problem.dtype == common.dtype) problems.push_back(std::move(problem));
    }
    if (problems.empty()) {
      throw Error(ErrorKind::usage, 0,
                  fmt::format("{} has no {} {} shapes", args.shapes_file, common.kernel, common.dtype));
    }
  }
  if (args.max_shapes > 0 && problems.size() > args.max_shapes) problems.resize(args.max_shapes);
  // The session asks twice its compile threads ahead (every core by default); a replay asks as the
  // run it replays did, on that machine's cores.
  const std::size_t ahead = args.ahead > 0      ? args.ahead
                            : recorded_ahead > 0 ? recorded_ahead
                                                 : 2 * std::max(1u, std::thread::hardware_concurrency());
  json shape_labels = json::array();
  for (const auto& p : problems) shape_labels.push_back(shape_label(common.kernel, p.shape));
  const Benchmark run = begin_benchmark("search", common, long_strategy,
                                        {{"shapes_file", args.shapes_file},
                                         {"replay_file", args.replay_file},
                                         {"keys", format_assignments(keys)},
                                         {"shapes", shape_labels},
                                         {"max_evaluations", args.max_evaluations},
                                         {"strategies", args.strategies},
                                         {"seeds", args.seeds},
                                         {"ahead", ahead},
                                         {"within_percent", args.within_percent},
                                         {"fraction", args.fraction},
                                         {"time_limit_s", args.time_limit}},
                                        measured_on);
  const DeviceInfo device = args.replay_file.empty() ? search_device(common) : DeviceInfo{};
  const auto began = Clock::now();
  double last_shape_s = 0;
  int status = 0;
  json rows = json::array();
  std::vector<std::string> skipped;
  std::map<std::string, std::size_t> met;  // shapes where a strategy's median met the target
  for (std::size_t index = 0; index < problems.size(); ++index) {
    const Problem& problem = problems[index];
    const std::string label = shape_label(common.kernel, problem.shape);
    if (args.time_limit > 0 && seconds_since(began) + last_shape_s > args.time_limit) {
      skipped.push_back(label);
      continue;
    }
    const auto shape_began = Clock::now();
    TuneReport full;
    Recording recording;
    json recorded;
    if (!replayed_rows.empty()) {
      const json& row = replayed_rows[index];
      full = long_search_from_json(row, long_strategy);
      recorded = row.at("recording");
      recording = recording_from_json(recorded);
    } else {
      try {
        full = tune(Problem{problem.kernel, problem.dtype, problem.shape, "bench_tuner search"},
                    common.options(args.long_strategy, args.max_evaluations));
      } catch (const Error& e) {
        std::printf("%s: %s\n", label.c_str(), e.what());
        status = 1;
        continue;
      }
      recording = recording_of(full, device);
      recorded = recording_json(recording, full.problem, device);
    }
    last_shape_s = seconds_since(shape_began);
    const double best_ms = tuner::best_recorded_ms(recording.table);
    const std::size_t long_evaluations = recording.table.size();
    if (best_ms <= 0) {
      std::printf("%s: the long search verified no configuration\n", label.c_str());
      status = 1;
      continue;
    }
    const double evaluations = static_cast<double>(long_evaluations);
    const auto budget = std::max<std::size_t>(1, static_cast<std::size_t>(std::floor(args.fraction * evaluations)));
    std::printf("%s: long search %.5g ms best, %zu evaluations of %zu valid candidates, %.1f s\n", label.c_str(),
                best_ms, long_evaluations, full.valid_candidates, full.wall_seconds);
    print_curve(label, full);

    std::vector<Replayed> replays;
    for (const auto& name : args.strategies) {
      Replayed r{name, {}, {}, {}};
      const std::uint64_t count = seeded(name) ? std::max<std::uint64_t>(1, args.seeds) : 1;
      for (std::uint64_t seed = common.seed; seed < common.seed + count; ++seed) {
        tuner::SearchSpace space = recording.space;
        space.seed = seed;
        r.seeds.push_back(seed);
        r.runs.push_back(tuner::replay(tuner::find_strategy(name), space, recording.table, {ahead, 0}));
        const auto reach = tuner::evaluations_to_within(r.runs.back(), best_ms, args.within_percent);
        r.reach.push_back(reach ? static_cast<double>(*reach) : kNever);
        print_replay_curve(label, seeded(name) ? fmt::format("{}:seed={}", name, seed) : name, r.runs.back());
      }
      replays.push_back(std::move(r));
    }

    std::printf("\n%s: long search best %.5g ms, %zu evaluations\n", label.c_str(), best_ms, long_evaluations);
    std::printf("| strategy | evals to within %.0f%% (median) | %% of the long search | gap after %zu evals %% "
                "(median) | per seed |\n",
                args.within_percent, budget);
    std::printf("|---|---|---|---|---|\n");
    json strategies = json::object();
    for (const auto& r : replays) {
      const double reach = r.median_reach();
      std::vector<double> gaps;
      std::string per_seed;
      json runs = json::array();
      for (std::size_t i = 0; i < r.runs.size(); ++i) {
        const auto& best = r.runs[i].best_ms;
        const double at_budget = best.empty() ? 0 : best[std::min(budget, best.size()) - 1];
        gaps.push_back(at_budget > 0 ? (at_budget / best_ms - 1) * 100 : kNever);
        if (r.runs.size() > 1) {
          per_seed += fmt::format("{}{}", per_seed.empty() ? "" : " ", number(r.reach[i], "{:.0f}"));
        }
        runs.push_back({{"seed", r.seeds[i]},
                        {"evaluations_to_within", finite_or_null(r.reach[i])},
                        {"gap_at_budget_percent", finite_or_null(gaps.back())},
                        {"curve", replay_curve_json(r.runs[i])}});
      }
      const bool meets = reach <= args.fraction * evaluations;
      met[r.strategy] += meets;
      std::printf("| %s | %s | %s | %s | %s |\n", r.strategy.c_str(), number(reach, "{:.0f}").c_str(),
                  std::isinf(reach) ? "never" : fmt::format("{:.1f}", 100 * reach / evaluations).c_str(),
                  number(median(gaps), "{:.2f}").c_str(), per_seed.empty() ? "-" : per_seed.c_str());
      strategies[r.strategy] = {{"median_evaluations_to_within", finite_or_null(reach)},
                                {"median_fraction_to_within", finite_or_null(reach / evaluations)},
                                {"median_gap_at_budget_percent", finite_or_null(median(gaps))},
                                {"meets_target", meets},
                                {"runs", runs}};
    }
    std::printf("\n");
    std::fflush(stdout);
    rows.push_back({{"shape", label},
                    {"valid_candidates", full.valid_candidates},
                    {"long_evaluations", long_evaluations},
                    {"long_best_ms", best_ms},
                    {"long_wall_s", full.wall_seconds},
                    {"long_curve", curve_json(full)},
                    {"budget", budget},
                    {"strategies", strategies},
                    {"recording", recorded}});
  }

  std::printf("summary over %zu shapes: shapes where the median run came within %.0f%% of the long search's best "
              "in <= %.0f%% of its evaluations\n",
              rows.size(), args.within_percent, 100 * args.fraction);
  for (const auto& name : args.strategies) std::printf("  %s: %zu of %zu\n", name.c_str(), met[name], rows.size());
  const std::size_t judged_met = met.count(args.judged) ? met[args.judged] : 0;
  const bool target = judged_met >= 8;
  std::printf("target: %s within %.0f%% in <= %.0f%% of the evaluations on >= 8 shapes: %s (%zu)\n",
              args.judged.c_str(), args.within_percent, 100 * args.fraction, target ? "met" : "not met", judged_met);
  std::printf("Replays ask %zu ahead, as the session does here; each evaluation counts one (a replay does not "
              "price successive halving). Curves: grep '^curve,' (shape,strategy,evaluations,seconds,best_ms; "
              "no seconds in a replay).\n",
              ahead);
  if (!skipped.empty()) {
    std::string names;
    for (const auto& name : skipped) names += " " + name;
    std::printf("skipped (time limit):%s\n", names.c_str());
  }
  json summary = json::object();
  for (const auto& name : args.strategies) summary[name] = met[name];
  run.write_summary(common.json_out, {{"rows", rows},
                                      {"skipped", skipped},
                                      {"shapes_meeting_target", summary},
                                      {"judged", args.judged},
                                      {"target_met", target}});
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_tuner: the tuner's wall time, search efficiency and stability, and strategies replayed"};
  app.require_subcommand(1);
  Common common;
  WallArgs wall_args;
  EfficiencyArgs efficiency_args;
  StabilityArgs stability_args;

  auto* wall_cmd = app.add_subcommand("wall", "a tuning, cold then warm, wall time per configuration");
  common.add_to(*wall_cmd);
  wall_cmd->add_option("--shape", wall_args.shapes, "shape(s), MxNxK or k=v,..; repeat for more")->capture_default_str();
  wall_cmd->add_option("--max-evaluations", wall_args.max_evaluations, "configurations to explore; 0: all")
      ->capture_default_str();
  wall_cmd->add_option("--strategy", wall_args.strategy,
                       "exhaustive explores in domain order; random spreads a partial budget over the space")
      ->capture_default_str();
  wall_cmd->add_flag("--keep-db", wall_args.keep_db, "keep the temporary cache files");

  // One phase of `wall` in a fresh process; run by `wall`, not by hand.
  auto* phase_cmd = app.add_subcommand("wall-phase")->group("");
  common.add_to(*phase_cmd);
  phase_cmd->add_option("--shape", wall_args.shapes)->required()->expected(1);
  phase_cmd->add_option("--max-evaluations", wall_args.max_evaluations);
  phase_cmd->add_option("--strategy", wall_args.strategy);
  phase_cmd->add_option("--phase", wall_args.phase)->required();
  phase_cmd->add_option("--db", wall_args.db)->required();

  auto* efficiency_cmd = app.add_subcommand("efficiency", "guided search with a 30% budget against exhaustive");
  common.add_to(*efficiency_cmd);
  efficiency_cmd->add_option("--shape", efficiency_args.shapes, "shape(s), MxNxK or k=v,..; repeat for more")
      ->capture_default_str();
  efficiency_cmd->add_option("--strategy", efficiency_args.strategy, "the guided strategy")->capture_default_str();
  efficiency_cmd->add_option("--fraction", efficiency_args.fraction, "its budget, a fraction of the valid candidates")
      ->capture_default_str();
  efficiency_cmd->add_option("--within", efficiency_args.within_percent, "percent of exhaustive's best that counts")
      ->capture_default_str();
  efficiency_cmd->add_option("--time-limit", efficiency_args.time_limit, "seconds; start no shape past it (0: none)")
      ->capture_default_str();

  auto* stability_cmd = app.add_subcommand("stability", "the same tuning repeated: how often the winner holds");
  common.add_to(*stability_cmd);
  stability_cmd->add_option("--shape", stability_args.shape, "MxNxK or k=v,..")->capture_default_str();
  stability_cmd->add_option("--strategy", stability_args.strategy)->capture_default_str();
  stability_cmd->add_option("--max-evaluations", stability_args.max_evaluations, "0: the strategy's default")
      ->capture_default_str();
  stability_cmd->add_option("--repeats", stability_args.repeats)->capture_default_str()->check(CLI::PositiveNumber);
  stability_cmd->add_option("--within", stability_args.within_percent, "percent that still counts as the same")
      ->capture_default_str();
  stability_cmd->add_option("--time-limit", stability_args.time_limit, "seconds; start no run past it (0: none)")
      ->capture_default_str();

  // Its own options: the kernel and dtype default to the GEMM of the shapes file.
  Common search_common;
  search_common.kernel = "gemm";
  search_common.dtype = "bf16";
  SearchArgs search_args;
  auto* search_cmd = app.add_subcommand(
      "search", "one long exhaustive search per shape, then every strategy replayed against its trials");
  search_common.add_to(*search_cmd);
  search_cmd->add_option("--shapes", search_args.shapes_file, "shapes file (gmtune sweep --shapes); its sweeps of "
                                                               "--kernel and --dtype");
  search_cmd->add_option("--shape", search_args.shapes, "shape(s) instead, MxNxK.. or k=v,..; repeat for more");
  search_cmd->add_option("--keys", search_args.keys, "problem keys every shape gets unless it names them (those of "
                                                     "--kernel; the llm preset's trans_b=1 for gemm)")
      ->capture_default_str();
  search_cmd->add_option("--max-shapes", search_args.max_shapes, "the first N shapes only; 0: all")
      ->capture_default_str();
  search_cmd->add_option("--max-evaluations", search_args.max_evaluations,
                         "cap on the long search (the replays then search what it measured); 0: every candidate")
      ->capture_default_str();
  search_cmd->add_option("--long-strategy", search_args.long_strategy,
                         "the long search's order (exhaustive, or random to sample a capped search evenly)")
      ->capture_default_str();
  search_cmd->add_option("--strategies", search_args.strategies, "strategies replayed")
      ->delimiter(',')
      ->capture_default_str();
  search_cmd->add_option("--judge", search_args.judged, "the strategy the target line is about")->capture_default_str();
  search_cmd->add_option("--seeds", search_args.seeds, "runs of random and evolve, seeds --seed onward; median")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  search_cmd->add_option("--ahead", search_args.ahead, "candidates asked ahead in replays; 0: as the session (twice "
                                                        "the cores; with --replay, as the replayed run)")
      ->capture_default_str();
  search_cmd->add_option("--within", search_args.within_percent, "percent of the long search's best that counts")
      ->capture_default_str();
  search_cmd->add_option("--fraction", search_args.fraction, "of the long search's evaluations, for the target")
      ->capture_default_str();
  search_cmd->add_option("--time-limit", search_args.time_limit, "seconds; start no shape past it (0: none)")
      ->capture_default_str();
  search_cmd
      ->add_option("--replay", search_args.replay_file,
                   "an earlier search's --json-out: replay the strategies on its recorded trials (no GPU needed; "
                   "its shapes, device and long search stand)")
      ->excludes("--shapes")
      ->excludes("--shape")
      ->excludes("--max-evaluations")
      ->excludes("--long-strategy");

  CLI11_PARSE(app, argc, argv);
  try {
    if (*search_cmd) common = search_common;
    // As tune() reads it: the bench then names the simulated device and takes its limits.
    if (const char* env = std::getenv("GMJIT_SIMULATED_DEVICE"); env && std::string(env) == "1") {
      common.simulated = true;
    }
    const bool replaying = *search_cmd && !search_args.replay_file.empty();
    if (!common.simulated && !replaying && !driver_status().available) {
      std::fprintf(stderr, "bench_tuner: %s\n", driver_status().reason.c_str());
      return 1;
    }
    if (*wall_cmd) return wall(common, wall_args);
    if (*phase_cmd) return wall_phase(common, wall_args);
    if (*efficiency_cmd) return efficiency(common, efficiency_args);
    if (*stability_cmd) return stability(common, stability_args);
    if (*search_cmd) return search(common, search_args);
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_tuner: %s\n", e.what());
    return e.kind() == ErrorKind::usage ? 2 : 1;
  }
  return 2;
}
