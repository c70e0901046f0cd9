#pragma once
// gmtune's parsing of option values and its formatting of reports and progress, kept apart from
// main() so that the unit tests check them without a GPU. Public API only.

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <iterator>
#include <optional>
#include <string>
#include <utility>

#include "gmjit/error.hpp"
#include "gmjit/tune.hpp"
#include "gmjit/types.hpp"

namespace gmtune {

/// `text` with every control character escaped (\n, \t, \r, else \xHH), so that a label read
/// from a shapes file cannot break a line of output or send escape sequences to a terminal.
inline std::string printable(const std::string& text) {
  std::string out;
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte != 0x7f) {
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else {
      out += fmt::format("\\x{:02x}", byte);
    }
  }
  return out;
}

/// --budget: a plain count of evaluated candidates ("40"), or wall seconds with an s suffix
/// ("30s", "1.5s"). Exactly one of the two is set.
struct Budget {
  std::size_t evaluations = 0;
  double seconds = 0;
};

inline bool is_digit(char c) { return c >= '0' && c <= '9'; }

/// A plain decimal ("30", "1.5"), or nullopt: strtod alone would also take "inf", "1e3" or " 5".
inline std::optional<double> parse_decimal(const std::string& number) {
  const auto points = std::count(number.begin(), number.end(), '.');
  if (number.empty() || points > 1 || number == "." ||
      !std::all_of(number.begin(), number.end(), [](char c) { return is_digit(c) || c == '.'; })) {
    return std::nullopt;
  }
  return std::stod(number);
}

inline Budget parse_budget(const std::string& text) {
  const auto bad = [&] {
    return gmjit::Error(gmjit::ErrorKind::usage, 0,
                        fmt::format("--budget '{}': give a number of candidates (e.g. 40) or seconds (e.g. 30s)", text));
  };
  Budget budget;
  if (!text.empty() && text.back() == 's') {
    const auto seconds = parse_decimal(text.substr(0, text.size() - 1));
    if (!seconds || !(*seconds > 0)) throw bad();
    budget.seconds = *seconds;
    return budget;
  }
  if (text.empty() || !std::all_of(text.begin(), text.end(), is_digit)) throw bad();
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), budget.evaluations);
  if (error != std::errc() || end != text.data() + text.size() || budget.evaluations == 0) throw bad();
  return budget;
}

/// --deadline: hours, minutes and seconds, each a plain decimal with its unit, in that order and
/// each at most once ("2h", "1h30m", "90m", "45s", "1.5h"), in seconds. "0s" is a deadline
/// already spent: the sweep starts nothing and lists every problem it would have tuned.
inline double parse_duration(const std::string& text) {
  const auto bad = [&] {
    return gmjit::Error(gmjit::ErrorKind::usage, 0,
                        fmt::format("--deadline '{}': give a time such as 2h, 1h30m, 90m or 45s", text));
  };
  constexpr std::pair<char, double> kUnits[] = {{'h', 3600}, {'m', 60}, {'s', 1}};
  double seconds = 0;
  std::size_t at = 0;
  std::size_t next_unit = 0;
  while (at < text.size()) {
    const std::size_t end = text.find_first_not_of("0123456789.", at);
    if (end == std::string::npos) throw bad();
    const auto value = parse_decimal(text.substr(at, end - at));
    while (next_unit < std::size(kUnits) && kUnits[next_unit].first != text[end]) ++next_unit;
    if (!value || next_unit == std::size(kUnits)) throw bad();
    seconds += *value * kUnits[next_unit++].second;
    at = end + 1;
  }
  if (text.empty()) throw bad();
  return seconds;
}

/// "45s", "3m05s", "2h03m".
inline std::string format_duration(double seconds) {
  const long long s = std::llround(std::max(0.0, seconds));
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
}

/// Time left for a sweep: the mean time of the problems tuned so far times the problems left,
/// shared by `devices` devices tuning at once. Problems found in the cache cost nothing and are
/// not averaged in; nothing tuned yet: unknown.
inline std::optional<double> estimate_eta(std::size_t tuned, double tuning_seconds, std::size_t finished,
                                          std::size_t total, std::size_t devices = 1) {
  if (tuned == 0 || finished > total) return std::nullopt;
  return tuning_seconds / static_cast<double>(tuned) * static_cast<double>(total - finished) /
         static_cast<double>(std::max<std::size_t>(1, devices));
}

/// One progress report of a sweep.
struct Progress {
  std::size_t index = 0;  ///< the problem's position, from 0
  std::size_t total = 0;
  gmjit::Problem problem;
  std::string state;       ///< "tuning" while it runs; anything else means it is finished
  std::size_t trials = 0;  ///< trials of this problem so far
  double elapsed_seconds = 0;
  std::optional<double> eta_seconds;
};

inline std::string describe(const gmjit::Problem& problem) {
  return fmt::format("{} {} {}", problem.kernel, problem.dtype, gmjit::format_assignments(problem.shape));
}

/// For a terminal: one line, at most `width` characters, redrawn in place by the caller
/// ("\r" + line + erase to the end). Otherwise a plain log line.
inline std::string format_progress(const Progress& p, bool terminal, std::size_t width = 100) {
  const bool running = p.state == "tuning";
  const std::size_t done = std::min(p.total, p.index + (running ? 0 : 1));
  const std::string timing = fmt::format("{} elapsed{}", format_duration(p.elapsed_seconds),
                                         p.eta_seconds ? ", eta " + format_duration(*p.eta_seconds) : "");
  const std::string trials = p.trials > 0 ? fmt::format(", {} trials", p.trials) : "";
  if (!terminal) {
    return fmt::format("[{}/{}] {}{}: {}{}  ({})", p.index + 1, p.total, describe(p.problem),
                       p.problem.label.empty() ? "" : " (" + printable(p.problem.label) + ")", p.state, trials, timing);
  }
  constexpr std::size_t kBar = 20;
  const std::size_t filled = p.total == 0 ? kBar : done * kBar / p.total;
  std::string line = fmt::format("[{}{}] {}/{}  {}  {}{}  {}", std::string(filled, '#'), std::string(kBar - filled, '.'),
                                 done, p.total, describe(p.problem), p.state, trials, timing);
  if (line.size() > width && width > 3) line = line.substr(0, width - 3) + "...";
  return line;
}

/// What one device of a multi-device sweep is doing.
struct DeviceProgress {
  int device = 0;
  std::string name;
  std::optional<gmjit::Problem> problem;  ///< none: idle (waiting to start, or out of work)
  std::string state;                      ///< as in Progress
  std::size_t trials = 0;
  std::size_t candidates = 0;
};

inline std::string fit(std::string line, std::size_t width) {
  if (line.size() > width && width > 3) line = line.substr(0, width - 3) + "...";
  return line;
}

/// One line per device: "gpu1 NVIDIA H200: sgemm fp32 k=4096,m=16,n=4096  trial 37/196".
inline std::string format_device_line(const DeviceProgress& d, std::size_t width = 100) {
  std::string line = fmt::format("gpu{} {}: ", d.device, d.name);
  if (!d.problem) return fit(line + "idle", width);
  line += describe(*d.problem);
  if (d.state == "tuning" || d.state.rfind("tuning ", 0) == 0) {
    line += d.candidates > 0 ? fmt::format("  trial {}/{}", d.trials, d.candidates) : fmt::format("  trial {}", d.trials);
  } else {
    line += "  " + d.state;
  }
  return fit(line, width);
}

/// The last line under the devices' lines: problems done over every device, elapsed and ETA.
inline std::string format_sweep_line(std::size_t finished, std::size_t total, std::size_t devices, double elapsed_seconds,
                                     const std::optional<double>& eta_seconds, std::size_t width = 100) {
  constexpr std::size_t kBar = 20;
  const std::size_t filled = total == 0 ? kBar : std::min(finished, total) * kBar / total;
  return fit(fmt::format("[{}{}] {}/{} on {} device{}  {} elapsed{}", std::string(filled, '#'),
                         std::string(kBar - filled, '.'), finished, total, devices, devices == 1 ? "" : "s",
                         format_duration(elapsed_seconds), eta_seconds ? ", eta " + format_duration(*eta_seconds) : ""),
             width);
}

/// "kernel dtype shape label": one line of a problem list (gmtune sweep --dry-run, and the
/// problems a deadline left).
inline std::string problem_line(const gmjit::Problem& problem) {
  return describe(problem) + (problem.label.empty() ? "" : " " + printable(problem.label));
}

inline nlohmann::json problem_json(const gmjit::Problem& problem) {
  return {{"kernel", problem.kernel}, {"dtype", problem.dtype}, {"shape", problem.shape}, {"label", problem.label}};
}

/// Everything a TuneReport holds, for scripts (gmjit::tune_report_json).
inline nlohmann::json report_json(const gmjit::TuneReport& report) {
  return nlohmann::json::parse(gmjit::tune_report_json(report));
}

/// How much faster the winner is than the runner-up, in percent; nullopt without both.
inline std::optional<double> winner_margin_percent(const gmjit::TuneReport& report) {
  if (!report.winner || !report.runner_up) return std::nullopt;
  const double best = report.trials.at(*report.winner).median_ms;
  const double next = report.trials.at(*report.runner_up).median_ms;
  if (!(best > 0)) return std::nullopt;
  return 100 * (next / best - 1);
}

inline std::string format_number(double value, const char* spec, bool known) {
  return known && std::isfinite(value) ? fmt::format(fmt::runtime(spec), value) : "-";
}

/// The table gmtune tune prints: every candidate but the invalid ones (counted in one line), the
/// winner (marked *) with its margin over the runner-up, the budget spent and the wall time.
inline std::string format_report(const gmjit::TuneReport& report) {
  std::size_t width = 6;
  for (const auto& t : report.trials) width = std::max(width, gmjit::format_assignments(t.config).size());
  std::string out = fmt::format("{:<{}}   {:<14} {:>10} {:>6} {:>5} {:>5} {:>6} {:>9}  {}\n", "config", width, "status",
                                "median ms", "CI %", "batch", "regs", "smem", "error", "detail");
  std::size_t invalid = 0;
  for (std::size_t i = 0; i < report.trials.size(); ++i) {
    const auto& t = report.trials[i];
    if (t.status == gmjit::TrialStatus::invalid) {
      ++invalid;
      continue;
    }
    const bool timed = t.status == gmjit::TrialStatus::ok;
    const bool ran = timed || t.status == gmjit::TrialStatus::wrong_result;
    const bool compiled = t.status != gmjit::TrialStatus::compile_failed;
    std::string detail = t.detail;
    if (t.resumed) detail = "resumed" + std::string(detail.empty() ? "" : "; ") + detail;
    if (t.binary_cached) detail = "cached cubin" + std::string(detail.empty() ? "" : "; ") + detail;
    if (detail.size() > 80) detail = detail.substr(0, 77) + "...";
    out += fmt::format("{:<{}} {} {:<14} {:>10} {:>6} {:>5} {:>5} {:>6} {:>9}  {}\n",
                       gmjit::format_assignments(t.config), width, report.winner == i ? '*' : ' ',
                       gmjit::to_string(t.status), format_number(t.median_ms, "{:.4f}", timed),
                       format_number(t.ci_percent, "{:.1f}", timed), timed ? std::to_string(t.batch) : "-",
                       compiled ? std::to_string(t.resources.registers) : "-",
                       compiled ? std::to_string(t.resources.shared_bytes) : "-",
                       format_number(t.verify_error, "{:.2e}", ran), detail);
  }
  if (invalid > 0) {
    out += fmt::format("{} invalid candidate{} (constraints or device limits) not shown\n", invalid,
                       invalid == 1 ? "" : "s");
  }
  if (report.winner) {
    const auto& w = report.trials.at(*report.winner);
    out += fmt::format("winner: {}  {:.4f} ms", gmjit::format_assignments(w.config), w.median_ms);
    if (const auto margin = winner_margin_percent(report)) {
      const auto& r = report.trials.at(*report.runner_up);
      out += fmt::format(", {:.1f}% faster than the runner-up {} ({:.4f} ms)", *margin,
                         gmjit::format_assignments(r.config), r.median_ms);
    } else {
      out += " (no runner-up)";
    }
    out += "\n";
  } else {
    out += "no configuration verified\n";
  }
  out += fmt::format("{} evaluated of {} valid candidates (strategy {}), {} worker restart{}, {:.1f} s",
                     report.evaluations, report.valid_candidates, report.strategy,
                     report.worker_restarts, report.worker_restarts == 1 ? "" : "s", report.wall_seconds);
  if (report.compiled_early > 0) {
    out += fmt::format("; {} compiles started early, {} of them then asked for", report.compiled_early,
                       report.compiled_early_asked);
  }
  out += "\n";
  return out;
}

}  // namespace gmtune
