#include <fmt/format.h>
#include <nlohmann/json.hpp>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include "cache/store.hpp"
#include "codegen/compiler.hpp"
#include "gmjit/device.hpp"
#include "gmjit/tune.hpp"
#include "lib/core/device.hpp"
#include "lib/core/log.hpp"
#include "templates/registry.hpp"
#include "tuner/binaries.hpp"
#include "tuner/keys.hpp"

namespace gmjit {
namespace {

constexpr const char* kLibraryVersion = "0.1.0";
constexpr const char* kLayout = tuner::kRowMajor;

std::string to_json_text(const std::map<std::string, std::int64_t>& values) {
  return nlohmann::json(values).dump();
}

void check_problem(const Problem& problem, const std::string& where) {
  try {
    const auto& kernel = templates::find_kernel(problem.kernel);
    templates::validate_dtype(kernel, problem.dtype);
    templates::validate_shape(kernel, problem.shape);
  } catch (const Error& e) {
    throw Error(ErrorKind::usage, 0, where + ": " + e.message());
  }
}

}  // namespace

namespace tuner {

std::string problem_key(const std::string& kernel, const std::string& template_hash, const std::string& dtype,
                        const std::string& layout, const Shape& shape) {
  const std::string canonical =
      fmt::format("{}|{}|{}|{}|{}", kernel, template_hash, dtype, layout, format_assignments(shape));
  return fmt::format("{:016x}", XXH3_64bits(canonical.data(), canonical.size()));
}

}  // namespace tuner

std::string default_cache_path() { return cache::default_path().string(); }

SweepSummary sweep(const std::vector<Problem>& requested, const SweepOptions& options) {
  std::vector<Problem> problems = requested;
  for (std::size_t i = 0; i < problems.size(); ++i) {
    if (problems[i].dtype.empty()) problems[i].dtype = templates::find_kernel(problems[i].kernel).dtypes.front();
    check_problem(problems[i], fmt::format("problem {} ({})", i, problems[i].kernel));
  }
  SweepSummary summary;
  // The device is checked before the cache is touched, so a machine without a GPU gets the
  // driver's reason and no empty database.
  const DeviceInfo device = [&] {
    detail::Context context(options.tune.device);
    return detail::query_device(options.tune.device);
  }();
  cache::Store store(options.db_path.empty() ? cache::default_path() : std::filesystem::path(options.db_path));
  summary.db_path = store.path().string();
  const cache::DeviceRecord device_record{device.fingerprint(), device.name, device.arch, device.to_json()};

  for (std::size_t i = 0; i < problems.size(); ++i) {
    const Problem& problem = problems[i];
    const auto& kernel = templates::find_kernel(problem.kernel);
    const std::string template_hash = templates::template_hash(kernel.header);
    const cache::ProblemRecord problem_record{
        tuner::problem_key(problem.kernel, template_hash, problem.dtype, kLayout, problem.shape), problem.kernel,
        template_hash,
                                              problem.dtype, kLayout, to_json_text(problem.shape)};
    if (!options.retune && store.find_winner(device_record.key, problem_record.key)) {
      ++summary.skipped;
      if (options.on_progress) options.on_progress(i, problems.size(), problem, "cached");
      continue;
    }
    if (options.on_progress) options.on_progress(i, problems.size(), problem, "tuning");
    const TuneReport report = tune(problem, options.tune);
    std::vector<cache::TrialRecord> trials;
    for (const auto& trial : report.trials) {
      cache::TrialRecord record;
      record.config_json = to_json_text(trial.config);
      record.status = to_string(trial.status);
      record.median_ms = trial.median_ms;
      record.spread = trial.spread;
      record.repetitions = trial.repetitions;
      record.verify_error = std::isfinite(trial.verify_error) ? trial.verify_error : -1.0;
      record.compile_ms = trial.compile_ms;
      record.registers = trial.resources.registers;
      record.spill_bytes = trial.resources.spill_store_bytes;
      record.shared_bytes = trial.resources.shared_bytes;
      record.detail = trial.detail;
      trials.push_back(std::move(record));
    }
    store.record_tuning(device_record, problem_record, trials, report.winner, kLibraryVersion);
    if (report.winner) {
      // The winner's cubin goes to the binary cache, so a later process launches it without NVRTC.
      const auto source = codegen::specialize(kernel, problem.shape, problem.dtype, report.trials[*report.winner].config);
      tuner::store_binary(store, *codegen::shared_compiler().compile(source, device.arch).module);
      ++summary.tuned;
    } else {
      ++summary.failed;
    }
    if (options.on_progress) {
      options.on_progress(i, problems.size(), problem,
                          report.winner ? fmt::format("done {:.4f} ms", report.trials[*report.winner].median_ms)
                                        : std::string("no configuration verified"));
    }
  }
  return summary;
}

}  // namespace gmjit
