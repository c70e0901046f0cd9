// gmtune: the command line over libgmjit's public API. Tables and JSON go to stdout; progress
// and one-line errors go to stderr. Exit status: 0 success, 1 failure, 2 bad usage.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <algorithm>
#include <sstream>

#include "gmjit/gmjit.hpp"

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

int run_list(bool json) {
  const auto kernels = gmjit::list_kernels();
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& k : kernels) {
      nlohmann::json params = nlohmann::json::array();
      for (const auto& p : k.params) params.push_back({{"name", p.name}, {"values", p.values}, {"doc", p.doc}});
      out.push_back({{"name", k.name}, {"summary", k.summary}, {"header", k.header},
                     {"template_hash", k.template_hash}, {"problem_keys", k.problem_keys}, {"dtypes", k.dtypes},
                     {"params", params}, {"default_config", k.default_config}, {"constraints", k.constraints}});
    }
    std::cout << nlohmann::json{{"kernels", out}}.dump(2) << "\n";
    return 0;
  }
  for (const auto& k : kernels) {
    std::string keys, dtypes;
    for (const auto& key : k.problem_keys) keys += (keys.empty() ? "" : ",") + key;
    for (const auto& d : k.dtypes) dtypes += (dtypes.empty() ? "" : ",") + d;
    std::printf("%s  (%s)\n  %s\n  problem keys: %s   dtypes: %s   template %s\n", k.name.c_str(), k.header.c_str(),
                k.summary.c_str(), keys.c_str(), dtypes.c_str(), k.template_hash.c_str());
    for (const auto& p : k.params) {
      std::printf("    %-10s {%s}  default %lld  %s\n", p.name.c_str(), join(p.values).c_str(),
                  static_cast<long long>(k.default_config.at(p.name)), p.doc.c_str());
    }
    std::printf("  constraints: %s\n\n", k.constraints.c_str());
  }
  return 0;
}

void write_file(const fs::path& path, const void* data, std::size_t size) {
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out) throw gmjit::Error(gmjit::ErrorKind::usage, 0, "cannot write " + path.string());
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
  fs::create_directories(out_dir);
  const fs::path dir(out_dir);
  const std::string stem = fs::path(result.file_name).stem().string();
  write_file(dir / (stem + ".cu"), result.source.data(), result.source.size());
  write_file(dir / (stem + ".ptx"), result.ptx.data(), result.ptx.size());
  write_file(dir / (stem + ".cubin"), result.cubin.data(), result.cubin.size());
  write_file(dir / "resources.json", resources.data(), resources.size());
  write_file(dir / (stem + ".log"), result.log.data(), result.log.size());
  std::string why_not;
  if (const auto sass = gmjit::disassemble(result.cubin, why_not)) {
    write_file(dir / (stem + ".sass"), sass->data(), sass->size());
  } else {
    std::cerr << "gmtune: note: " << why_not << "\n";
  }
  std::printf("%s -> %s (%s, %d registers, %d B spilled, %d B smem, %.1f ms)\n", result.name_expression.c_str(),
              (dir / stem).string().c_str(), result.arch.c_str(), result.resources.registers,
              result.resources.spill_store_bytes, result.resources.shared_bytes, result.compile_ms);
  return 0;
}

void print_trials(const gmjit::TuneReport& report) {
  std::printf("%-48s %-14s %10s %7s %5s %6s %9s  %s\n", "config", "status", "median ms", "spread", "regs",
              "smem", "error", "detail");
  for (const auto& t : report.trials) {
    if (t.status == gmjit::TrialStatus::invalid) continue;
    std::printf("%-48s %-14s %10.4f %6.1f%% %5d %6d %9.2e  %s\n", gmjit::format_assignments(t.config).c_str(),
                gmjit::to_string(t.status), t.median_ms, 100 * t.spread, t.resources.registers,
                t.resources.shared_bytes, t.verify_error, t.detail.substr(0, 80).c_str());
  }
}

int run_tune(const std::string& kernel, const std::string& shape, const std::string& dtype, int device, bool json) {
  gmjit::Problem problem{kernel, dtype, gmjit::parse_assignments(shape), "command line"};
  gmjit::list_kernels();  // usage errors before touching the device
  require_device();
  gmjit::TuneOptions options;
  options.device = device;
  const auto report = gmjit::tune(problem, options);
  std::size_t invalid = 0, ok = 0;
  for (const auto& t : report.trials) {
    invalid += t.status == gmjit::TrialStatus::invalid;
    ok += t.status == gmjit::TrialStatus::ok;
  }
  if (json) {
    nlohmann::json trials = nlohmann::json::array();
    for (const auto& t : report.trials) {
      trials.push_back({{"config", t.config}, {"status", gmjit::to_string(t.status)}, {"median_ms", t.median_ms},
                        {"spread", t.spread}, {"verify_error", t.verify_error}, {"detail", t.detail}});
    }
    std::cout << nlohmann::json{{"kernel", report.problem.kernel}, {"dtype", report.problem.dtype},
                                {"shape", report.problem.shape}, {"device", report.device_name},
                                {"winner", report.winner ? nlohmann::json(*report.winner) : nlohmann::json()},
                                {"trials", trials}}
                     .dump(2)
              << "\n";
  } else {
    print_trials(report);
    std::printf("\n%zu candidates: %zu ok, %zu invalid (not shown), %.1f s\n", report.trials.size(), ok, invalid,
                report.wall_seconds);
    if (report.winner) {
      const auto& w = report.trials[*report.winner];
      double runner_up = 0;
      for (std::size_t i = 0; i < report.trials.size(); ++i) {
        const auto& t = report.trials[i];
        if (i != *report.winner && t.status == gmjit::TrialStatus::ok && (runner_up == 0 || t.median_ms < runner_up)) {
          runner_up = t.median_ms;
        }
      }
      std::printf("winner: %s  %.4f ms", gmjit::format_assignments(w.config).c_str(), w.median_ms);
      if (runner_up > 0) std::printf("  (%.1f%% ahead of the runner-up)", 100 * (runner_up / w.median_ms - 1));
      std::printf("\n");
    }
  }
  return report.winner ? 0 : kFailure;
}

int run_sweep(const std::string& preset, const std::string& shapes_file, const std::string& kernels_filter,
              const std::string& db, int device, bool dry_run, bool retune) {
  std::vector<std::string> wanted;
  std::stringstream list(kernels_filter);
  for (std::string name; std::getline(list, name, ',');) wanted.push_back(name);
  std::vector<gmjit::Problem> problems =
      shapes_file.empty() ? gmjit::preset_problems(preset) : gmjit::read_shapes_file(shapes_file, wanted);
  if (!wanted.empty()) {
    std::vector<gmjit::Problem> kept;
    for (auto& p : problems) {
      if (std::find(wanted.begin(), wanted.end(), p.kernel) != wanted.end()) kept.push_back(std::move(p));
    }
    problems = std::move(kept);
  }
  if (dry_run) {
    for (const auto& p : problems) {
      std::printf("%-12s %-5s %s\n", p.kernel.c_str(), p.dtype.c_str(), gmjit::format_assignments(p.shape).c_str());
    }
    std::printf("%zu problems\n", problems.size());
    return 0;
  }
  require_device();
  gmjit::SweepOptions options;
  options.db_path = db;
  options.retune = retune;
  options.tune.device = device;
  const auto started = std::chrono::steady_clock::now();
  options.on_progress = [&](std::size_t index, std::size_t total, const gmjit::Problem& p, const std::string& state) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    const bool finished = state != "tuning";
    const std::size_t done = index + (finished ? 1 : 0);
    std::string eta = done > 0 && done < total ? " eta " + std::to_string(static_cast<int>(elapsed / done * (total - done))) + " s" : "";
    std::fprintf(stderr, "[%zu/%zu] %s %s %s: %s  (%.0f s elapsed%s)\n", index + 1, total, p.kernel.c_str(),
                 p.dtype.c_str(), gmjit::format_assignments(p.shape).c_str(), state.c_str(), elapsed, eta.c_str());
  };
  const auto summary = gmjit::sweep(problems, options);
  std::printf("sweep: %zu tuned, %zu already cached, %zu without a verified configuration -> %s\n", summary.tuned,
              summary.skipped, summary.failed, summary.db_path.c_str());
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

std::int64_t parse_size(const std::string& text) {
  std::size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    throw gmjit::Error(gmjit::ErrorKind::usage, 0, "'" + text + "': not a size (e.g. 512M, 2G, 1048576)");
  }
  const std::string unit = text.substr(used);
  const double scale = unit.empty() || unit == "B" ? 1
                       : unit == "K" || unit == "KiB" ? 1024.0
                       : unit == "M" || unit == "MiB" ? 1048576.0
                       : unit == "G" || unit == "GiB" ? 1073741824.0
                                                       : -1;
  if (scale < 0 || value < 0) {
    throw gmjit::Error(gmjit::ErrorKind::usage, 0, "'" + text + "': not a size (e.g. 512M, 2G, 1048576)");
  }
  return static_cast<std::int64_t>(value * scale);
}

void print_exchange(const char* verb, const gmjit::ExchangeSummary& s) {
  std::printf("%s: %zu trials added, %zu winners changed, %zu binaries added, %zu binaries ignored\n", verb,
              s.trials_added, s.winners_changed, s.binaries_added, s.binaries_ignored);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gmtune: compile, autotune and cache CUDA kernels with libgmjit " + std::string(gmjit::version())};
  app.require_subcommand(1);
  std::string log_level;
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, critical, off");

  bool json = false;
  auto* devices = app.add_subcommand("devices", "list GPUs and their fingerprints");
  devices->add_flag("--json", json, "JSON output");

  auto* list = app.add_subcommand("list", "list kernels, parameters and domains");
  list->add_flag("--json", json, "JSON output");

  std::string kernel, shape, config, dtype, arch, out_dir, db, preset = "default", shapes_file, kernels_filter;
  int device = 0;
  bool dry_run = false, retune = false;
  auto* compile = app.add_subcommand("compile", "specialize and compile one configuration");
  compile->add_option("kernel", kernel, "kernel name (gmtune list)")->required();
  compile->add_option("--shape", shape, "problem, e.g. m=4096,n=4096,k=4096")->required();
  compile->add_option("--config", config, "parameters, e.g. bm=128,bn=128 (defaults for the rest)");
  compile->add_option("--dtype", dtype, "data type (default: the kernel's first)");
  compile->add_option("--arch", arch, "target, e.g. sm_90a (default: device 0's; with it no GPU is needed)");
  compile->add_option("--out", out_dir, "write .cu .ptx .cubin .sass .log (NVRTC + ptxas) and resources.json here");

  auto* tune = app.add_subcommand("tune", "tune one problem on the GPU and print every candidate");
  tune->add_option("kernel", kernel, "kernel name")->required();
  tune->add_option("--shape", shape, "problem, e.g. n=1048576")->required();
  tune->add_option("--dtype", dtype, "data type");
  tune->add_option("--device", device, "GPU ordinal");
  tune->add_flag("--json", json, "JSON output");

  auto* sweep = app.add_subcommand("sweep", "tune a preset or a shapes file into the cache (resumable)");
  auto* preset_option = sweep->add_option("--preset", preset, "built-in shape set (default: default)");
  sweep->add_option("--shapes", shapes_file, "shapes file (see DESIGN.md)")->excludes(preset_option);
  sweep->add_option("--kernels", kernels_filter, "only these kernels, e.g. sgemm,vector_add");
  sweep->add_option("--db", db, "cache file (default: $GMJIT_CACHE, $XDG_CACHE_HOME/gmjit/gmjit.db, ~/.cache/gmjit/gmjit.db)");
  sweep->add_option("--device", device, "GPU ordinal");
  sweep->add_flag("--dry-run", dry_run, "list the problems and stop");
  sweep->add_flag("--retune", retune, "tune problems that already have a winner");

  std::string device_filter, file, into, max_size;
  bool csv = false, with_binaries = false, trust_binaries = false;
  std::vector<std::string> sources;
  const std::string db_help = "cache file (default: $GMJIT_CACHE, $XDG_CACHE_HOME/gmjit/gmjit.db, ~/.cache/gmjit/gmjit.db)";
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
                       "accept cubins whose checksum holds and whose compile key this toolkit reproduces");
  import_cmd->add_option("--db", db, db_help);
  auto* merge = app.add_subcommand("merge", "combine cache files into one");
  merge->add_option("sources", sources, "cache files to read")->required();
  merge->add_option("--into", into, "cache file to write")->required();
  merge->add_flag("--trust-binaries", trust_binaries, "as for import");
  auto* verify = app.add_subcommand("verify", "check the cache; exit 1 on any problem");
  verify->add_option("--db", db, db_help);
  auto* gc = app.add_subcommand("gc", "evict least recently used binaries above a size");
  gc->add_option("--max-size", max_size, "e.g. 512M, 2G")->required();
  gc->add_option("--db", db, db_help);

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
    if (devices->parsed()) return run_devices(json);
    if (list->parsed()) return run_list(json);
    if (compile->parsed()) return run_compile(kernel, shape, config, dtype, arch, out_dir);
    if (tune->parsed()) return run_tune(kernel, shape, dtype, device, json);
    if (sweep->parsed()) return run_sweep(preset, shapes_file, kernels_filter, db, device, dry_run, retune);
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
      const auto r = gmjit::gc_cache(db, parse_size(max_size));
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
