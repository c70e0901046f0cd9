// gmtune: the command line over libgmjit's public API. Tables and JSON go to stdout; progress
// and one-line errors go to stderr. Exit status: 0 success, 1 failure, 2 bad usage.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>

#include "gmjit/gmjit.hpp"
#include "gmtune_format.hpp"

namespace fs = std::filesystem;

namespace {

constexpr int kFailure = 1;
constexpr int kUsage = 2;

std::string join(const std::vector<std::int64_t>& values) {
  std::string out;
  for (auto v : values) out += (out.empty() ? "" : ",") + std::to_string(v);
  return out;
}

std::string arch_or_device(const std::string& arch) {
  if (!arch.empty()) return arch;
  const auto status = gmjit::driver_status();
  if (!status.available) {
    throw gmjit::Error(gmjit::ErrorKind::driver, 0, status.reason + "; give --arch (e.g. --arch sm_90a) to compile without a GPU");
  }
  return {};
}

void require_device() {
  const auto status = gmjit::driver_status();
  if (!status.available) throw gmjit::Error(gmjit::ErrorKind::driver, 0, status.reason);
}

int run_devices(bool json) {
  const auto status = gmjit::driver_status();
  if (!status.available) {
    if (json) std::cout << nlohmann::json{{"devices", nlohmann::json::array()}, {"reason", status.reason}}.dump(2) << "\n";
    std::cerr << "gmtune: " << status.reason << "\n";
    return kFailure;
  }
  const auto devices = gmjit::list_devices();
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& d : devices) out.push_back(nlohmann::json::parse(d.to_json()));
    std::cout << nlohmann::json{{"devices", out}}.dump(2) << "\n";
    return 0;
  }
  std::printf("%-3s %-24s %-6s %-7s %4s %8s %10s %8s %8s %s\n", "id", "name", "cc", "arch", "SMs", "L2 MiB",
              "smem optin", "driver", "nvrtc", "fingerprint");
  for (const auto& d : devices) {
    std::printf("%-3d %-24s %d.%-4d %-7s %4d %8.1f %10d %8d %5d.%-2d %s\n", d.ordinal, d.name.c_str(), d.cc_major,
                d.cc_minor, d.arch.c_str(), d.sm_count, d.l2_bytes / 1048576.0, d.shared_optin_bytes,
                d.driver_version, d.nvrtc_major, d.nvrtc_minor, d.fingerprint().c_str());
  }
  return 0;
}

// An element-count expression of the catalog as a reader writes it: n, m*k, 3*h*w.
std::string expression_text(const nlohmann::json& e, bool nested = false) {
  if (e.is_string()) return e.get<std::string>();
  if (!e.is_array() || e.empty() || !e[0].is_string()) return e.dump();
  const std::string op = e[0].get<std::string>();
  std::vector<std::string> args;
  for (std::size_t i = 1; i < e.size(); ++i) args.push_back(expression_text(e[i], true));
  static const std::set<std::string> infix = {"+", "-", "*", "/", "%"};
  if (infix.count(op) && args.size() >= 2) {
    const std::string joined = fmt::format("{}", fmt::join(args, op));
    return nested ? "(" + joined + ")" : joined;
  }
  return fmt::format("{}({})", op, fmt::join(args, ", "));
}

int run_list(bool json) {
  const auto kernels = gmjit::list_kernels();
  if (json) {
    std::cout << gmjit::list_kernels_json() << "\n";
    return 0;
  }
  for (const auto& k : kernels) {
    std::string keys, dtypes;
    for (const auto& key : k.problem_keys) keys += (keys.empty() ? "" : ",") + key;
    for (const auto& d : k.dtypes) dtypes += (dtypes.empty() ? "" : ",") + d;
    for (const auto& d : k.data_keys) keys += fmt::format(",[{}={}]", d.name, d.default_value);
    std::string tensors;
    for (const auto& t : k.tensors) {
      tensors += fmt::format("{}{} {}[{}]{}{}", tensors.empty() ? "" : ", ", t.output ? "out" : "in", t.name,
                             expression_text(nlohmann::json::parse(t.elements_expression)),
                             t.dtype.empty() ? "" : " " + t.dtype,
                             t.dtype_flag.empty() ? "" : fmt::format(" ({}=1: {})", t.dtype_flag, t.flag_dtype));
    }
    std::printf("%s  (%s)\n  %s\n  problem keys: %s   dtypes: %s   template %s\n  tensors: %s\n", k.name.c_str(),
                k.header.c_str(), k.summary.c_str(), keys.c_str(), dtypes.c_str(), k.template_hash.c_str(),
                tensors.c_str());
    for (const auto& p : k.params) {
      std::printf("    %-10s {%s}  default %lld  %s\n", p.name.c_str(), join(p.values).c_str(),
                  static_cast<long long>(k.default_config.at(p.name)), p.doc.c_str());
    }
    std::printf("  constraints: %s\n\n", k.constraints.c_str());
  }
  return 0;
}

int run_compile(const std::string& kernel, const std::string& shape, const std::string& config,
                const std::string& dtype, const std::string& arch, const std::string& out_dir) {
  gmjit::CompileRequest request;
  request.kernel = kernel;
  request.dtype = dtype;
  request.shape = gmjit::parse_assignments(shape);
  request.config = gmjit::parse_assignments(config);
  request.arch = arch_or_device(arch);
  const auto result = gmjit::compile(request);
  const std::string resources = gmjit::resources_json(result);
  if (out_dir.empty()) {
    std::cout << resources << "\n";
    return 0;
  }
  const auto written = gmjit::write_compile_outputs(result, out_dir);
  if (!written.sass) std::cerr << "gmtune: note: " << written.sass_note << "\n";
  std::printf("%s -> %s (%s, %d registers, %d B spilled, %d B smem, %.1f ms)\n", result.name_expression.c_str(),
              written.stem.c_str(), result.arch.c_str(), result.resources.registers,
              result.resources.spill_store_bytes, result.resources.shared_bytes, result.compile_ms);
  return 0;
}

int run_compile_expression(const std::string& expression, const std::string& shape, const std::string& config,
                           const std::string& dtype, const std::string& arch, const std::string& out_dir) {
  gmjit::ExpressionRequest request;
  request.expression = expression;
  if (!dtype.empty()) request.dtype = dtype;
  request.shape = gmjit::parse_assignments(shape);
  request.config = gmjit::parse_assignments(config);
  request.arch = arch_or_device(arch);
  const auto result = gmjit::compile_expression(request);
  if (out_dir.empty()) {
    std::cout << gmjit::expression_json(result) << "\n";
    return 0;
  }
  const auto written = gmjit::write_expression_outputs(result, out_dir);
  if (!written.sass) std::cerr << "gmtune: note: " << written.sass_note << "\n";
  std::printf("%s -> %s (%s, %d registers, %d B smem, %.1f ms)\n", result.canonical.c_str(), written.stem.c_str(),
              result.arch.c_str(), result.resources.registers, result.resources.shared_bytes, result.compile_ms);
  return 0;
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  std::stringstream list(text);
  for (std::string item; std::getline(list, item, ',');) {
    if (!item.empty()) items.push_back(item);
  }
  return items;
}

// Usage errors are reported before anything asks the driver, so a typo on a machine without a
// GPU says what is wrong with the command rather than that no device is present.
void check_problem(gmjit::Problem& problem) {
  const gmjit::Problem normalized = gmjit::validate(problem.kernel, problem.shape, problem.dtype);
  problem.dtype = normalized.dtype;
  problem.shape = normalized.shape;
}

// GMJIT_SIMULATED_DEVICE=1 runs candidates on the worker's simulated device, so no GPU is needed.
bool simulated_device() {
  const char* value = std::getenv("GMJIT_SIMULATED_DEVICE");
  return value != nullptr && std::string(value) == "1";
}

struct SearchOptions {
  std::string strategy;
  std::string budget;
  std::uint64_t seed = 1;
  std::string db;
  int device = 0;
};

// Parsed before any device or cache is touched: bad values are usage errors.
gmjit::TuneOptions tune_options(const SearchOptions& search) {
  gmjit::TuneOptions options;
  options.device = search.device;
  options.seed = search.seed;
  if (!search.strategy.empty()) {
    gmjit::strategy_summary(search.strategy);  // throws for a name that is not registered
    options.strategy = search.strategy;
  }
  if (!search.budget.empty()) {
    const auto budget = gmtune::parse_budget(search.budget);
    options.max_evaluations = budget.evaluations;
    options.max_seconds = budget.seconds;
  }
  return options;
}

// Records trials and winner in the cache as a sweep does; with no_record opens no cache at all.
int run_tune(const std::string& kernel, const std::string& shape, const std::string& dtype,
             const SearchOptions& search, bool no_record, bool json) {
  gmjit::Problem problem{kernel, dtype, gmjit::parse_assignments(shape), "command line"};
  check_problem(problem);
  gmjit::TuneOptions options = tune_options(search);
  options.record = !no_record;
  if (!no_record) options.db_path = search.db.empty() ? gmjit::default_cache_path() : search.db;
  if (!simulated_device()) require_device();
  const auto report = gmjit::tune(problem, options);
  if (json) {
    std::cout << gmtune::report_json(report).dump(2) << "\n";
  } else {
    std::cout << gmtune::format_report(report);
  }
  if (options.record) {
    std::cerr << "gmtune: trials " << (report.winner ? "and winner " : "") << "recorded in " << options.db_path
              << "\n";
  }
  return report.winner ? 0 : kFailure;
}

// GMJIT_KERNEL_PATH's manifests, then --kernel-file's: a later registration of a name replaces
// the earlier one, so the command line wins.
void register_kernel_files(const std::vector<std::string>& files) {
  if (const char* path = std::getenv("GMJIT_KERNEL_PATH")) {
    std::stringstream list(path);
    for (std::string file; std::getline(list, file, ':');) {
      if (file.empty()) continue;
      try {
        gmjit::register_kernel_file(file);
      } catch (const gmjit::Error& e) {
        if (e.kind() != gmjit::ErrorKind::usage) throw;
        throw gmjit::Error(gmjit::ErrorKind::usage, 0, "GMJIT_KERNEL_PATH: " + e.message());
      }
    }
  }
  for (const auto& file : files) gmjit::register_kernel_file(file);
}

// Ctrl-C (SIGINT) and a scheduler's SIGTERM (scancel, a preempted job, a deleted pod) ask the sweep
// to stop: the first one lets it commit what is done and say how to resume; a second one, of
// either, ends the process at once.
volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void on_stop_signal(int signal) {
  g_stop_signal = signal;
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
}

// On a terminal, redraws one line (one device) or a line per device plus a total line in place;
// when stderr is a file or a pipe (a job's log), writes a line per problem started or finished.
// Trials arrive from the tuner while a problem runs.
class SweepProgress {
 public:
  explicit SweepProgress(const std::vector<int>& devices)
      : terminal_(::isatty(::fileno(stderr)) != 0), started_(Clock::now()), devices_(devices.size()) {
    for (std::size_t i = 0; i < devices.size(); ++i) devices_[i].device = devices[i];
  }
  ~SweepProgress() { finish(); }

  // Ends the redrawn block, so that what is printed next starts on a line of its own.
  void finish() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (drawn_) std::fputc('\n', stderr);
    drawn_ = false;
  }

  void on_event(const gmjit::SweepEvent& e) {
    std::lock_guard<std::mutex> lock(mutex_);
    const double now = seconds();
    auto& d = devices_.at(e.worker);
    d.name = e.device_name;
    d.problem = e.problem;
    d.state = e.state;
    d.trials = e.trials;
    d.candidates = e.candidates;
    finished_ = e.finished;
    total_ = e.total;
    if (e.kind == gmjit::SweepEvent::Kind::started) started_at_[e.worker] = now;
    if (e.kind == gmjit::SweepEvent::Kind::finished && e.state != "cached") {
      ++tuned_;
      tuning_seconds_ += now - started_at_[e.worker];
    }
    const bool change = e.kind != gmjit::SweepEvent::Kind::trial;
    if (!terminal_) {
      if (change) write_line(e, now);
      return;
    }
    // Trials can end hundreds of times a second; the terminal needs a few redraws.
    if (!change && now - drawn_at_ < 0.1) return;
    drawn_at_ = now;
    draw(e, now);
  }

 private:
  using Clock = std::chrono::steady_clock;

  double seconds() const { return std::chrono::duration<double>(Clock::now() - started_).count(); }

  std::optional<double> eta() const {
    return gmtune::estimate_eta(tuned_, tuning_seconds_, finished_, total_, devices_.size());
  }

  gmtune::Progress single(const gmjit::SweepEvent& e, double now) const {
    gmtune::Progress p;
    p.index = e.index;
    p.total = total_;
    p.problem = e.problem;
    p.state = e.kind == gmjit::SweepEvent::Kind::trial ? "tuning" : e.state;
    p.trials = e.trials;
    p.elapsed_seconds = now;
    p.eta_seconds = eta();
    return p;
  }

  void write_line(const gmjit::SweepEvent& e, double now) {
    if (devices_.size() == 1) {
      std::fprintf(stderr, "%s\n", gmtune::format_progress(single(e, now), false).c_str());
      return;
    }
    const auto eta_seconds = eta();
    std::fprintf(stderr, "gpu%d [%zu/%zu] %s%s: %s%s  (%s elapsed%s)\n", e.device, e.finished, e.total,
                 gmtune::describe(e.problem).c_str(), e.problem.label.empty() ? "" : (" (" + gmtune::printable(e.problem.label) + ")").c_str(),
                 e.state.c_str(), e.trials > 0 ? fmt::format(", {} trials", e.trials).c_str() : "",
                 gmtune::format_duration(now).c_str(),
                 eta_seconds ? (", eta " + gmtune::format_duration(*eta_seconds)).c_str() : "");
  }

  void draw(const gmjit::SweepEvent& e, double now) {
    winsize size{};
    const std::size_t width = ::ioctl(::fileno(stderr), TIOCGWINSZ, &size) == 0 && size.ws_col > 0 ? size.ws_col : 100;
    if (devices_.size() == 1) {
      std::fprintf(stderr, "\r%s\x1b[K", gmtune::format_progress(single(e, now), true, width - 1).c_str());
    } else {
      std::string block = drawn_ ? fmt::format("\r\x1b[{}A", devices_.size()) : "";
      for (const auto& d : devices_) block += gmtune::format_device_line(d, width - 1) + "\x1b[K\n";
      block += gmtune::format_sweep_line(finished_, total_, devices_.size(), now, eta(), width - 1) + "\x1b[K";
      std::fputs(block.c_str(), stderr);
    }
    std::fflush(stderr);
    drawn_ = true;
  }

  const bool terminal_;
  const Clock::time_point started_;
  std::mutex mutex_;
  std::vector<gmtune::DeviceProgress> devices_;  // one per worker, in --devices order
  std::map<std::size_t, double> started_at_;
  std::size_t finished_ = 0;
  std::size_t total_ = 0;
  std::size_t tuned_ = 0;
  double tuning_seconds_ = 0;
  double drawn_at_ = -1;
  bool drawn_ = false;
};

struct SweepRequest {
  std::string preset;
  std::string shapes_file;
  std::string kernels;
  std::string shard;
  std::string devices;
  bool per_device = false;
  bool dry_run = false;
  bool retune = false;
  bool json = false;
  std::string deadline;
};

int run_sweep(const SweepRequest& request, const SearchOptions& search) {
  const std::vector<std::string> wanted = split_list(request.kernels);
  const auto kernels = gmjit::list_kernels();
  for (const auto& name : wanted) {
    if (std::none_of(kernels.begin(), kernels.end(), [&](const auto& k) { return k.name == name; })) {
      throw gmjit::Error(gmjit::ErrorKind::usage, 0, "--kernels: unknown kernel '" + name + "'");
    }
  }
  const std::optional<gmjit::ShardSpec> shard =
      request.shard.empty() ? std::nullopt : std::optional<gmjit::ShardSpec>(gmjit::parse_shard(request.shard));
  gmjit::TuneOptions tune = tune_options(search);
  const std::optional<double> deadline =
      request.deadline.empty() ? std::nullopt : std::optional<double>(gmtune::parse_duration(request.deadline));
  std::vector<int> devices{search.device};
  if (!request.devices.empty() && request.devices != "all") devices = gmjit::parse_devices(request.devices);

  std::vector<gmjit::Problem> problems = request.shapes_file.empty()
                                             ? gmjit::preset_problems(request.preset)
                                             : gmjit::read_shapes_file(request.shapes_file, wanted);
  if (!wanted.empty()) {
    std::vector<gmjit::Problem> kept;
    for (auto& p : problems) {
      if (std::find(wanted.begin(), wanted.end(), p.kernel) != wanted.end()) kept.push_back(std::move(p));
    }
    problems = std::move(kept);
  }
  const std::size_t listed = problems.size();
  if (shard) problems = gmjit::shard_problems(problems, shard->index, shard->count);
  const std::string scope =
      shard ? fmt::format("shard {}/{}: {} of {} problems", shard->index, shard->count, problems.size(), listed)
            : fmt::format("{} problems", listed);

  if (request.dry_run) {
    // No device is asked for its fingerprint, so a winner on any device counts as finished.
    const auto pending = request.retune ? problems : gmjit::pending_problems(problems, search.db, "");
    if (request.json) {
      nlohmann::json out = nlohmann::json::array();
      for (const auto& p : pending) out.push_back(gmtune::problem_json(p));
      std::cout << out.dump(2) << "\n";
    } else {
      for (const auto& p : pending) std::printf("%s\n", gmtune::problem_line(p).c_str());
    }
    std::fprintf(stderr, "gmtune: %s; %zu to tune, %zu already have a winner\n", scope.c_str(), pending.size(),
                 problems.size() - pending.size());
    return 0;
  }

  if (!simulated_device()) require_device();
  gmjit::SweepOptions options;
  options.db_path = search.db;
  options.retune = request.retune;
  options.per_device = request.per_device;
  options.devices = request.devices == "all" ? gmjit::parse_devices("all") : devices;
  options.tune = tune;
  options.deadline_seconds = deadline;
  options.tune.db_path = search.db.empty() ? gmjit::default_cache_path() : search.db;
  SweepProgress progress(options.devices);
  options.on_event = [&](const gmjit::SweepEvent& e) { progress.on_event(e); };
  options.stop_requested = [] { return g_stop_signal != 0; };
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
  const auto summary = gmjit::sweep(problems, options);
  progress.finish();
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  const double minutes = summary.wall_seconds / 60;
  const std::size_t left = summary.not_started.size();
  if (request.json) {
    nlohmann::json not_started = nlohmann::json::array();
    for (const auto& p : summary.not_started) not_started.push_back(gmtune::problem_json(p));
    nlohmann::json devices = nlohmann::json::array();
    for (const auto& d : summary.devices) {
      devices.push_back({{"device", d.device}, {"name", d.name}, {"device_key", d.device_key}, {"tuned", d.tuned},
                         {"skipped", d.skipped}, {"failed", d.failed}, {"tuning_seconds", d.tuning_seconds}});
    }
    nlohmann::json failures = nlohmann::json::array();
    for (const auto& f : summary.failures) {
      failures.push_back({{"problem", gmtune::problem_json(f.problem)}, {"device", f.device}, {"reason", f.reason}});
    }
    std::cout << nlohmann::json{{"problems", problems.size()}, {"tuned", summary.tuned}, {"skipped", summary.skipped},
                                {"failed", summary.failed}, {"failures", failures}, {"db_path", summary.db_path}, {"devices", devices},
                                {"interrupted", summary.interrupted}, {"deadline_reached", left > 0},
                                {"not_started", not_started}, {"wall_seconds", summary.wall_seconds},
                                {"problems_per_minute", minutes > 0 ? summary.tuned / minutes : 0.0}}
                     .dump(2)
              << "\n";
  } else {
    std::string on;
    if (summary.devices.size() > 1) {
      for (const auto& d : summary.devices) on += fmt::format("{}{} on gpu{}", on.empty() ? "" : ", ", d.tuned, d.device);
      on = fmt::format(" on {} devices ({})", summary.devices.size(), on);
    }
    std::printf("sweep (%s)%s: %zu tuned, %zu already cached, %zu failed%s -> %s\n",
                scope.c_str(), on.c_str(), summary.tuned, summary.skipped, summary.failed,
                left > 0 ? fmt::format(", {} not started (deadline)", left).c_str() : "", summary.db_path.c_str());
    for (const auto& p : summary.not_started) std::printf("not started: %s\n", gmtune::problem_line(p).c_str());
  }
  for (const auto& f : summary.failures) {
    std::fprintf(stderr, "gmtune: failed on gpu%d: %s: %s\n", f.device, gmtune::problem_line(f.problem).c_str(),
                 f.reason.c_str());
  }
  if (summary.interrupted) {
    std::fprintf(stderr,
                 "gmtune: sweep interrupted; every finished trial is in %s: run the same command again to resume\n",
                 summary.db_path.c_str());
    return kFailure;
  }
  if (left > 0) {
    std::fprintf(stderr,
                 "gmtune: sweep deadline %s passed with %zu problem%s not started; every finished trial is in %s: "
                 "run the same command again to tune the rest\n",
                 gmtune::format_duration(*deadline).c_str(), left, left == 1 ? "" : "s", summary.db_path.c_str());
    return kFailure;
  }
  return summary.failed == 0 ? 0 : kFailure;
}

std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

int run_show(const std::string& db, const std::string& kernel, const std::string& device, bool json, bool csv) {
  const auto winners = gmjit::cached_winners(db, kernel, device);
  auto margin = [](const gmjit::CachedWinner& w) {
    return w.runner_up_ms > 0 ? 100 * (w.runner_up_ms / w.median_ms - 1) : 0.0;
  };
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& w : winners) {
      out.push_back({{"device", w.device_name}, {"device_key", w.device_key}, {"kernel", w.kernel},
                     {"dtype", w.dtype}, {"shape", w.shape}, {"config", w.config}, {"median_ms", w.median_ms},
                     {"trials", w.trial_count},
                     {"runner_up_ms", w.runner_up_ms > 0 ? nlohmann::json(w.runner_up_ms) : nlohmann::json()},
                     {"margin_percent", w.runner_up_ms > 0 ? nlohmann::json(margin(w)) : nlohmann::json()},
                     {"tuned_at", w.tuned_at}});
    }
    std::cout << nlohmann::json{{"winners", out}}.dump(2) << "\n";
    return 0;
  }
  if (csv) {
    std::printf("device,device_key,kernel,dtype,shape,config,median_ms,trials,runner_up_ms,margin_percent,tuned_at\n");
    for (const auto& w : winners) {
      std::printf("%s,%s,%s,%s,%s,%s,%.6f,%d,%.6f,%.2f,%lld\n", csv_field(w.device_name).c_str(), w.device_key.c_str(),
                  w.kernel.c_str(), w.dtype.c_str(), csv_field(gmjit::format_assignments(w.shape)).c_str(),
                  csv_field(gmjit::format_assignments(w.config)).c_str(), w.median_ms, w.trial_count,
                  w.runner_up_ms, margin(w), static_cast<long long>(w.tuned_at));
    }
    return 0;
  }
  std::printf("%-14s %-11s %-5s %-24s %-44s %10s %6s %8s\n", "device", "kernel", "dtype", "shape", "winner",
              "median ms", "trials", "margin");
  for (const auto& w : winners) {
    const std::string margin_text = w.runner_up_ms > 0 ? std::to_string(margin(w)).substr(0, 5) + "%" : "-";
    std::printf("%-14s %-11s %-5s %-24s %-44s %10.4f %6d %8s\n", w.device_name.substr(0, 14).c_str(),
                w.kernel.c_str(), w.dtype.c_str(), gmjit::format_assignments(w.shape).c_str(),
                gmjit::format_assignments(w.config).c_str(), w.median_ms, w.trial_count, margin_text.c_str());
  }
  std::printf("%zu winners\n", winners.size());
  return 0;
}

void print_exchange(const char* verb, const gmjit::ExchangeSummary& s) {
  std::printf("%s: %zu trials added, %zu winners changed, %zu binaries added, %zu binaries ignored\n", verb,
              s.trials_added, s.winners_changed, s.binaries_added, s.binaries_ignored);
  for (const auto& line : s.binaries_refused) std::printf("refused %s\n", line.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gmtune: compile, autotune and cache CUDA kernels with libgmjit " + std::string(gmjit::version())};
  app.require_subcommand(1);
  std::string log_level;
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, critical, off");
  const std::string kernel_file_help =
      "register a kernel of your own from its manifest (JSON beside its .cuh; README: Bringing your own kernels) "
      "before the command runs; repeatable; also GMJIT_KERNEL_PATH (manifests separated by ':')";
  std::vector<std::string> manifests, subcommand_manifests;
  app.add_option("--kernel-file,--kernel-manifest", manifests, kernel_file_help);

  bool json = false;
  auto* devices = app.add_subcommand("devices", "list GPUs and their fingerprints");
  devices->add_flag("--json", json, "JSON output");

  auto* list = app.add_subcommand("list", "list kernels, parameters and domains");
  list->add_flag("--json", json, "JSON output");

  std::string kernel, shape, config, dtype, arch, out_dir, db, expression;
  auto* compile = app.add_subcommand("compile", "specialize and compile one configuration");
  auto* compile_kernel = compile->add_option("kernel", kernel, "kernel name (gmtune list)");
  auto* compile_expr = compile->add_option(
      "--expr", expression,
      "instead of a kernel, generate one from an expression through LLVM, e.g. \"y = silu(a) * b\" "
      "(--shape rows=..,cols=..; --config block,items,vector,threads_per_row; --dtype of undeclared inputs)");
  compile_kernel->excludes(compile_expr);
  compile_expr->excludes(compile_kernel);
  compile->add_option("--shape", shape, "problem, e.g. m=4096,n=4096,k=4096")->required();
  compile->add_option("--config", config, "parameters, e.g. bm=128,bn=128 (defaults for the rest)");
  compile->add_option("--dtype", dtype, "data type (default: the kernel's first; fp32 for --expr)");
  compile->add_option("--arch", arch, "target, e.g. sm_90a (default: device 0's; with it no GPU is needed)");
  compile->add_option("--out", out_dir, "write .cu .ptx .cubin .sass .log (NVRTC + ptxas) and resources.json here");

  SearchOptions search;
  std::string strategy_help = "search strategy (default: " + gmjit::TuneOptions{}.strategy + "):";
  for (const auto& name : gmjit::strategy_names()) strategy_help += "\n  " + name + ": " + gmjit::strategy_summary(name);
  const std::string budget_help = "stop after N evaluated candidates (e.g. 40) or after a time (e.g. 30s)";
  const std::string db_help = "cache file (default: $GMJIT_CACHE, $XDG_CACHE_HOME/gmjit/gmjit.db, ~/.cache/gmjit/gmjit.db)";
  auto* tune = app.add_subcommand("tune", "tune one problem on the GPU and print every candidate");
  auto* tune_kernel = tune->add_option("kernel", kernel, "kernel name (gmtune list)");
  std::string tune_expression, expression_name;
  auto* tune_expr = tune->add_option(
      "--expr", tune_expression,
      "instead of a kernel, tune one generated from an expression through LLVM, e.g. \"y = silu(a) * b\" "
      "(README: Expressions); --dtype is then its undeclared inputs' dtype, --shape gives rows and cols, and it "
      "is recorded under --name");
  tune->add_option("--name", expression_name,
                   "with --expr: the kernel's name in the cache (default: expr_ and a hash of the expression)");
  tune_kernel->excludes(tune_expr);
  tune_expr->excludes(tune_kernel);
  tune->add_option("--shape", shape, "problem, e.g. n=1048576")->required();
  tune->add_option("--dtype", dtype, "data type (default: the kernel's first)");
  tune->add_option("--strategy", search.strategy, strategy_help);
  tune->add_option("--budget", search.budget, budget_help);
  tune->add_option("--seed", search.seed, "seed of the random strategy and of the test inputs");
  tune->add_option("--db", search.db, db_help + "; cubins are reused from it, and strategy transfer starts from its nearest tuned shapes");
  tune->add_option("--device", search.device, "GPU ordinal")->check(CLI::NonNegativeNumber);
  tune->add_flag("--json", json, "the whole report as JSON: every trial, the best-so-far curve, winner and runner-up indices");
  bool no_record = false;
  tune->add_flag("--no-record", no_record,
                 "only look: record no trial and no winner (by default they go to the cache, as a sweep's do); "
                 "opens no cache, so every candidate compiles and transfer starts from the model")
      ->excludes("--db");

  SweepRequest sweep_request;
  sweep_request.preset = "default";
  std::string presets_help = "built-in shape set (default: default):";
  for (const auto& name : gmjit::preset_names()) presets_help += "\n  " + name + ": " + gmjit::preset_summary(name);
  auto* sweep = app.add_subcommand("sweep", "tune a preset or a shapes file into the cache (resumable)");
  auto* preset_option = sweep->add_option("--preset", sweep_request.preset, presets_help);
  sweep->add_option("--shapes", sweep_request.shapes_file, "shapes file (format in README.md, Shapes files); an unknown kernel is an error")
      ->excludes(preset_option);
  sweep->add_option("--kernels", sweep_request.kernels, "only these kernels, e.g. sgemm,vector_add");
  sweep->add_option("--shard", sweep_request.shard,
                    "tune only shard I of N (I from 0 to N-1, as job arrays number tasks); the split depends only "
                    "on the problem list, so the N shards together cover it once");
  sweep->add_flag("--dry-run", sweep_request.dry_run,
                  "print the problems this run would tune (kernel dtype shape label, one a line) and stop; needs no "
                  "GPU: a problem with a winner on any device counts as done");
  sweep->add_flag("--json", sweep_request.json, "JSON output (with --dry-run: an array of problems)");
  sweep->add_option("--strategy", search.strategy, strategy_help);
  sweep->add_option("--budget", search.budget, budget_help + ", per problem");
  sweep->add_option("--seed", search.seed, "seed of the random strategy and of the test inputs");
  sweep->add_option("--db", search.db, db_help);
  auto* device_option = sweep->add_option("--device", search.device, "GPU ordinal")->check(CLI::NonNegativeNumber);
  sweep->add_option("--devices", sweep_request.devices,
                    "sweep on several GPUs of this host: all, or ordinals such as 0,1,3; one worker per GPU takes "
                    "the next problem from a shared queue")
      ->excludes(device_option);
  sweep->add_flag("--per-device", sweep_request.per_device,
                  "tune every problem on every listed GPU (by default GPUs with the same fingerprint are "
                  "interchangeable and each problem is tuned on one of them)");
  sweep->add_flag("--retune", sweep_request.retune, "tune problems that already have a winner");
  sweep->add_option("--deadline", sweep_request.deadline,
                    "a time for the whole sweep (e.g. 2h, 1h30m, 45s): once it has passed no problem starts; "
                    "those left are listed, and the exit status is 1, as for an interrupted sweep");

  std::string device_filter, file, into;
  std::uint64_t max_size = 0;
  bool csv = false, with_binaries = false, trust_binaries = false;
  std::vector<std::string> sources;
  auto* show = app.add_subcommand("show", "winners with trial counts and the margin over the runner-up");
  show->add_option("--kernel", kernel, "only this kernel");
  show->add_option("--device", device_filter, "only devices whose name or fingerprint contains this");
  auto* show_json = show->add_flag("--json", json, "JSON output");
  show->add_flag("--csv", csv, "CSV output")->excludes(show_json);
  show->add_option("--db", db, db_help);
  auto* export_cmd = app.add_subcommand("export", "write the cache's devices, problems, trials and winners as JSON");
  export_cmd->add_option("file", file, "output file")->required();
  export_cmd->add_flag("--with-binaries", with_binaries, "include the cached cubins");
  export_cmd->add_option("--db", db, db_help);
  auto* import_cmd = app.add_subcommand("import", "add an export's trials and faster winners to the cache");
  import_cmd->add_option("file", file, "an export of gmtune export")->required();
  import_cmd->add_flag("--trust-binaries", trust_binaries,
                       "keep a cubin only when it is byte-identical to this library's compile of the "
                       "instantiation it claims (compiled now, with NVRTC); others are refused and listed");
  import_cmd->add_option("--db", db, db_help);
  auto* merge = app.add_subcommand("merge", "combine cache files into one");
  merge->add_option("sources", sources, "cache files to read")->required();
  merge->add_option("--into", into, "cache file to write")->required();
  merge->add_flag("--trust-binaries", trust_binaries, "as for import");
  auto* verify = app.add_subcommand("verify", "check the cache; exit 1 on any problem");
  verify->add_option("--db", db, db_help);
  auto* gc = app.add_subcommand("gc", "evict least recently used binaries above a size");
  gc->add_option("--max-size", max_size, "e.g. 512M, 2G (units of 1024)")
      ->required()
      ->transform(CLI::AsSizeValue(false));
  gc->add_option("--db", db, db_help);

  for (auto* command : app.get_subcommands([](CLI::App*) { return true; })) {
    command->add_option("--kernel-file", subcommand_manifests, kernel_file_help);
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "gmtune: " << e.what() << " (gmtune --help)\n";
    return kUsage;
  }

  try {
    if (!log_level.empty()) gmjit::set_log_level(log_level);
    manifests.insert(manifests.end(), subcommand_manifests.begin(), subcommand_manifests.end());
    register_kernel_files(manifests);
    if (devices->parsed()) return run_devices(json);
    if (list->parsed()) return run_list(json);
    if (compile->parsed() && !expression.empty()) return run_compile_expression(expression, shape, config, dtype, arch, out_dir);
    if (compile->parsed() && kernel.empty()) {
      std::cerr << "gmtune compile: give a kernel (gmtune list) or --expr\n";
      return kUsage;
    }
    if (compile->parsed()) return run_compile(kernel, shape, config, dtype, arch, out_dir);
    if (tune->parsed()) {
      if (!tune_expression.empty()) {
        kernel = gmjit::register_expression(expression_name, tune_expression, dtype.empty() ? "fp32" : dtype);
        std::cerr << "gmtune: tuning the expression as kernel " << kernel << "\n";
        dtype.clear();  // the problem's dtype is the expression's output's
      } else if (kernel.empty()) {
        std::cerr << "gmtune tune: give a kernel (gmtune list) or --expr\n";
        return kUsage;
      }
      return run_tune(kernel, shape, dtype, search, no_record, json);
    }
    if (sweep->parsed()) return run_sweep(sweep_request, search);
    if (show->parsed()) return run_show(db, kernel, device_filter, json, csv);
    if (export_cmd->parsed()) {
      gmjit::export_cache(db, file, with_binaries);
      std::printf("exported to %s\n", file.c_str());
      return 0;
    }
    if (import_cmd->parsed()) {
      print_exchange("import", gmjit::import_cache(db, file, trust_binaries));
      return 0;
    }
    if (merge->parsed()) {
      print_exchange("merge", gmjit::merge_caches(sources, into, trust_binaries));
      return 0;
    }
    if (verify->parsed()) {
      const auto check = gmjit::verify_cache(db);
      for (const auto& problem : check.problems) std::printf("problem: %s\n", problem.c_str());
      std::printf("%s: %s\n", check.path.c_str(), check.ok ? "ok" : "NOT ok");
      if (!check.ok) std::cerr << "gmtune: cache check failed: " << check.problems.size() << " problem(s)\n";
      return check.ok ? 0 : kFailure;
    }
    if (gc->parsed()) {
      if (max_size > static_cast<std::uint64_t>(INT64_MAX)) {
        throw gmjit::Error(gmjit::ErrorKind::usage, 0, fmt::format("--max-size {} is above 2^63 - 1 bytes", max_size));
      }
      const auto r = gmjit::gc_cache(db, static_cast<std::int64_t>(max_size));
      std::printf("gc: evicted %zu binaries, %lld -> %lld bytes\n", r.evicted, static_cast<long long>(r.bytes_before),
                  static_cast<long long>(r.bytes_after));
      return 0;
    }
  } catch (const gmjit::Error& e) {
    // Users get the reason; the failing call and source location matter only for library faults.
    const bool user_facing = e.kind() == gmjit::ErrorKind::usage || e.kind() == gmjit::ErrorKind::driver ||
                             e.kind() == gmjit::ErrorKind::cache;
    std::cerr << "gmtune: " << (user_facing ? e.message() : std::string(e.what())) << "\n";
    if (e.kind() == gmjit::ErrorKind::compile && !e.log().empty()) std::cerr << e.log() << "\n";
    return e.kind() == gmjit::ErrorKind::usage ? kUsage : kFailure;
  } catch (const std::exception& e) {
    std::cerr << "gmtune: " << e.what() << "\n";
    return kFailure;
  }
  return kUsage;
}
