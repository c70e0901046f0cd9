// What a sweep works on: shapes files, the built-in presets, job-array shards, and the problems
// a cache has not finished yet. Nothing here touches the driver, so all of it runs on a login node.
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <set>
#include <sstream>
#include <utility>

#include "cache/store.hpp"
#include "codegen/expr_kernel.hpp"
#include "gmjit/error.hpp"
#include "gmjit/tune.hpp"
#include "core/log.hpp"
#include "templates/registry.hpp"
#include "cache/keys.hpp"
#include "tuner/presets.hpp"
#include "tuner/problems.hpp"

namespace gmjit::tuner {

void normalize_problem(Problem& problem, const std::string& where) {
  try {
    auto normalized = templates::normalize_problem(problem.kernel, problem.shape, problem.dtype);
    problem.dtype = std::move(normalized.dtype);
    problem.shape = std::move(normalized.shape);
  } catch (const Error& e) {
    throw Error(ErrorKind::usage, 0, where + ": " + e.message());
  }
}

}  // namespace gmjit::tuner

namespace gmjit {
namespace {

// How a preset reads its shapes file, beyond what a --shapes file gets.
struct ReadRules {
  // kernel -> problem keys every shape of its sweeps gets unless the shape or the sweep's own
  // "keys" name them (the llm preset's gemm: trans_b=1, the weight layout of a linear layer)
  std::map<std::string, Shape> sweep_keys;
  // Sweeps of kernels not in the catalog are dropped with one log line instead of failing: a
  // preset may list kernels the library gains later.
  bool skip_unknown_kernels = false;
};

bool in_catalog(const std::string& kernel) {
  const auto& kernels = templates::catalog();
  return std::any_of(kernels.begin(), kernels.end(), [&](const auto& k) { return k.name == kernel; });
}

std::string identity(const Problem& problem) {
  return fmt::format("{}|{}|{}", problem.kernel, problem.dtype, format_assignments(problem.shape));
}

// A problem listed twice (in a file, or after a preset's substitution) is one problem of the
// cache: keeping both would tune it twice, possibly at once in two shards.
std::vector<Problem> merge_repeats(std::vector<Problem> problems) {
  std::vector<Problem> unique;
  std::map<std::string, std::size_t> seen;
  for (auto& problem : problems) {
    const auto [at, inserted] = seen.emplace(identity(problem), unique.size());
    if (inserted) {
      unique.push_back(std::move(problem));
      continue;
    }
    std::string& label = unique[at->second].label;
    if (!problem.label.empty() && ("; " + label + "; ").find("; " + problem.label + "; ") == std::string::npos) {
      label += label.empty() ? problem.label : "; " + problem.label;
    }
  }
  return unique;
}

std::vector<Problem> parse_shapes(const std::string& text, const std::string& source,
                                  const std::vector<std::string>& only_kernels, const ReadRules& rules) {
  nlohmann::json document;
  try {
    document = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorKind::usage, 0, fmt::format("{}: not valid JSON ({})", source, e.what()));
  }
  if (!document.is_object() || !document.contains("sweeps") || !document["sweeps"].is_array()) {
    throw Error(ErrorKind::usage, 0, source + ": expected an object with a \"sweeps\" array");
  }
  std::vector<Problem> problems;
  std::vector<std::string> skipped;
  const auto& sweeps = document["sweeps"];
  for (std::size_t s = 0; s < sweeps.size(); ++s) {
    const auto& entry = sweeps[s];
    const std::string where = fmt::format("{}: sweep {}", source, s);
    if (!entry.is_object() || !entry.contains("kernel") || !entry["kernel"].is_string() || !entry.contains("shapes") ||
        !entry["shapes"].is_array()) {
      throw Error(ErrorKind::usage, 0, where + ": needs a \"kernel\" string and a \"shapes\" array");
    }
    if (entry.contains("dtype") && !entry["dtype"].is_string()) {
      throw Error(ErrorKind::usage, 0, where + ": \"dtype\" must be a string");
    }
    // Keys shared by every shape of the sweep; a shape that names one keeps its own value.
    Shape shared_keys;
    if (entry.contains("keys")) {
      if (!entry["keys"].is_object()) {
        throw Error(ErrorKind::usage, 0, where + ": \"keys\" must be an object of integers, e.g. {\"trans_b\": 1}");
      }
      for (const auto& [key, value] : entry["keys"].items()) {
        if (!value.is_number_integer()) {
          throw Error(ErrorKind::usage, 0, fmt::format("{}: keys.{} is not an integer ({})", where, key, value.dump()));
        }
        shared_keys[key] = value.get<std::int64_t>();
      }
    }
    std::string kernel = entry["kernel"].get<std::string>();
    std::string dtype = entry.value("dtype", std::string());
    if (!only_kernels.empty() && std::find(only_kernels.begin(), only_kernels.end(), kernel) == only_kernels.end()) {
      continue;
    }
    if (const auto preset_keys = rules.sweep_keys.find(kernel); preset_keys != rules.sweep_keys.end()) {
      for (const auto& [key, value] : preset_keys->second) shared_keys.emplace(key, value);
    }
    // A sweep of a generated kernel carries its expression; its dtype is that of the inputs the
    // text leaves undeclared, and each problem's dtype is then the expression's output's.
    if (entry.contains("expr")) {
      if (!entry["expr"].is_string()) {
        throw Error(ErrorKind::usage, 0, where + ": \"expr\" must be a string, e.g. \"y = silu(a) * b\"");
      }
      try {
        codegen::expr::register_kernel(kernel, entry["expr"].get<std::string>(),
                                       dtype.empty() ? codegen::expr::Dtype::f32 : codegen::expr::parse_dtype(dtype));
      } catch (const Error& e) {
        throw Error(ErrorKind::usage, 0, fmt::format("{} ({}): expr: {}", where, kernel, e.message()));
      }
      dtype.clear();
    }
    if (rules.skip_unknown_kernels && !in_catalog(kernel)) {
      skipped.push_back(fmt::format("{}{}{} ({} shapes)", kernel, dtype.empty() ? "" : " ", dtype,
                                    entry["shapes"].size()));
      continue;
    }
    const auto& shapes = entry["shapes"];
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      const std::string at = fmt::format("{} ({}), shape {}", where, kernel, i);
      if (!shapes[i].is_object()) throw Error(ErrorKind::usage, 0, at + ": not an object");
      Problem problem{kernel, dtype, {}, {}};
      problem.shape = shared_keys;
      for (const auto& [key, value] : shapes[i].items()) {
        if (key == "from") {
          problem.label = value.is_string() ? value.get<std::string>() : value.dump();
        } else if (value.is_number_integer()) {
          problem.shape[key] = value.get<std::int64_t>();
        } else {
          throw Error(ErrorKind::usage, 0, fmt::format("{}: '{}' is not an integer ({})", at, key, value.dump()));
        }
      }
      tuner::normalize_problem(problem, at);
      problems.push_back(std::move(problem));
    }
  }
  if (!skipped.empty()) {
    detail::logger().warn("{}: skipping sweeps of kernels not in the catalog: {}", source, fmt::join(skipped, ", "));
  }
  return merge_repeats(std::move(problems));
}

struct Preset {
  const char* name;
  const char* summary;
  const char* file;  // embedded shapes file; nullptr: the problems are listed in code
  ReadRules rules;
};

const std::vector<Preset>& presets() {
  static const std::vector<Preset> all = {
      {"default", "vector_add fp32 and fp16 at n=2^24, sgemm fp32 at 1024^3 and 4096^3", nullptr, {}},
      {"llm",
       "the GEMM shapes of LLM layers (llama-3-8b and -70b projections), square, GPU MODE and KernelBench "
       "matmul sizes, as bf16 and fp16 'gemm' with trans_b=1 (B holds the weights n x k, as in x @ W^T); a "
       "shape listed twice is tuned once",
       "llm.json",
       {{{"gemm", {{"trans_b", 1}}}}, false}},
      {"gpumode",
       "the GPU MODE / KernelBench memory-bound problems; sweeps of kernels not yet in the catalog are skipped, "
       "with a warning naming them",
       "gpumode.json",
       {{}, true}},
  };
  return all;
}

const Preset& find_preset(const std::string& name) {
  for (const auto& preset : presets()) {
    if (preset.name == name) return preset;
  }
  throw Error(ErrorKind::usage, 0, fmt::format("unknown preset '{}' (presets: {})", name, fmt::join(preset_names(), ", ")));
}

std::string embedded_preset_text(const std::string& file) {
  for (const auto& embedded : tuner::embedded_presets()) {
    if (file == embedded.name) return embedded.content;
  }
  throw Error(ErrorKind::usage, 0, "preset file '" + file + "' is not embedded in this build");
}

// Digits only: from_chars alone would accept a leading '-' for a signed type and stop quietly
// at trailing junk.
bool parse_count(const std::string& text, std::size_t& value) {
  if (text.empty() || !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return false;
  }
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  return error == std::errc() && end == text.data() + text.size();
}

}  // namespace

std::vector<Problem> read_shapes_file(const std::string& path, const std::vector<std::string>& only_kernels) {
  std::ifstream in(path);
  if (!in) throw Error(ErrorKind::usage, 0, "cannot read shapes file '" + path + "'");
  std::stringstream text;
  text << in.rdbuf();
  return parse_shapes(text.str(), path, only_kernels, {});
}

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const auto& preset : presets()) names.emplace_back(preset.name);
  return names;
}

std::string preset_summary(const std::string& name) { return find_preset(name).summary; }

std::vector<Problem> preset_problems(const std::string& name) {
  const Preset& preset = find_preset(name);
  if (preset.file != nullptr) {
    return parse_shapes(embedded_preset_text(preset.file), "preset " + name, {}, preset.rules);
  }
  return {
      {"vector_add", "fp32", {{"n", 1 << 24}}, "preset default"},
      {"vector_add", "fp16", {{"n", 1 << 24}}, "preset default"},
      {"sgemm", "fp32", {{"m", 1024}, {"n", 1024}, {"k", 1024}}, "preset default"},
      {"sgemm", "fp32", {{"m", 4096}, {"n", 4096}, {"k", 4096}}, "preset default"},
  };
}

ShardSpec parse_shard(const std::string& text) {
  const auto slash = text.find('/');
  ShardSpec spec;
  if (slash == std::string::npos || !parse_count(text.substr(0, slash), spec.index) ||
      !parse_count(text.substr(slash + 1), spec.count)) {
    throw Error(ErrorKind::usage, 0, fmt::format("'{}': a shard is I/N, e.g. 0/4 (I from 0 to N-1)", text));
  }
  if (spec.count == 0 || spec.index >= spec.count) {
    throw Error(ErrorKind::usage, 0,
                fmt::format("'{}': shard index must be below the shard count (I from 0 to N-1, N at least 1)", text));
  }
  return spec;
}

std::vector<Problem> shard_problems(const std::vector<Problem>& problems, std::size_t index, std::size_t count) {
  if (count == 0 || index >= count) {
    throw Error(ErrorKind::usage, 0, fmt::format("shard {}/{}: index must be below the count", index, count));
  }
  // Ranking by a hash rather than by position spreads each file's runs of similar sizes (e.g.
  // m = 1..4096 for one weight) over the shards, so no shard gets all the slow ones.
  std::vector<std::pair<std::uint64_t, std::size_t>> ranked;
  ranked.reserve(problems.size());
  for (std::size_t i = 0; i < problems.size(); ++i) {
    const std::string id = identity(problems[i]);
    ranked.emplace_back(XXH3_64bits(id.data(), id.size()), i);
  }
  std::sort(ranked.begin(), ranked.end());
  std::vector<std::size_t> mine;
  for (std::size_t rank = index; rank < ranked.size(); rank += count) mine.push_back(ranked[rank].second);
  std::sort(mine.begin(), mine.end());
  std::vector<Problem> shard;
  shard.reserve(mine.size());
  for (const auto i : mine) shard.push_back(problems[i]);
  return shard;
}

std::vector<Problem> pending_problems(const std::vector<Problem>& problems, const std::string& db_path,
                                      const std::string& device_key) {
  const std::filesystem::path path = db_path.empty() ? cache::default_path() : std::filesystem::path(db_path);
  std::error_code error;
  if (!std::filesystem::exists(path, error)) return problems;
  // SQLite takes an empty file for an empty database, which a first open would turn into a cache.
  if (std::filesystem::is_regular_file(path, error) && std::filesystem::file_size(path, error) == 0 && !error) {
    return problems;
  }
  // Read-only: a dry run must not create, migrate or quarantine what it only looks at.
  cache::Store store = cache::Store::open_read_only(path, "cache");
  std::set<std::string> finished_anywhere;
  if (device_key.empty()) {
    for (const auto& winner : store.winners()) finished_anywhere.insert(winner.problem_key);
  }
  std::vector<Problem> pending;
  for (const auto& problem : problems) {
    const auto normalized = templates::normalize_problem(problem.kernel, problem.shape, problem.dtype);
    const std::string key = cache::problem_key(problem.kernel, templates::template_hash(normalized.kernel->header),
                                               normalized.dtype, cache::kRowMajor, normalized.shape);
    const bool finished =
        device_key.empty() ? finished_anywhere.count(key) > 0 : store.find_winner(device_key, key).has_value();
    if (!finished) pending.push_back(problem);
  }
  return pending;
}

}  // namespace gmjit
