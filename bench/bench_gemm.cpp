// Half-precision GEMM against cuBLAS (issue 17). For every shape of a shapes file: the tuned
// winner of `gemm` (the cache's, or tuned into the cache now, with the tuning time printed),
// verified again and timed with the tuner's harness, interleaved with cublasGemmEx on the same
// dtypes, layout and fp32 compute; for m <= 16 also the bandwidth of reading the weights beside a
// device-to-device copy. bf16 sweeps run with trans_b=1 (x @ W^T), fp16 with trans_b=0 (a @ b),
// unless the file gives trans_b. Not a test: the targets are printed, never asserted; the exit
// status is 1 only when a shape has no verified winner.
#include <CLI/CLI.hpp>
#include <cublas_v2.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>

#include "cache/binaries.hpp"
#include "codegen/compiler.hpp"
#include "core/device.hpp"
#include "gmjit/gmjit.hpp"
#include "templates/registry.hpp"
#include "tuner/harness.hpp"

namespace {

using namespace gmjit;
using nlohmann::json;

struct Options {
  std::string shapes;
  std::string cache;
  std::vector<std::string> dtypes;
  std::int64_t max_m = 0;  // 0: every m
  std::size_t limit = 0;   // 0: every shape
  std::string json_out;
  int device = 0;
  std::uint64_t seed = 2;  // not the tuner's (1): the winner is verified on inputs it was not chosen on
  int samples = 30;
  std::size_t tune_evaluations = 40;
  double tune_seconds = 0;
  std::string strategy = "model";
  bool list = false;
};

struct Row {
  Problem problem;
  Config config;
  std::string source;  // cache | tuned
  double tune_seconds = 0;
  std::string failure;
  double verify_error = 0;
  tuner::Timing ours, cublas, copy;

  bool ok() const { return failure.empty(); }
  double flops() const {
    return 2.0 * problem.shape.at("m") * static_cast<double>(problem.shape.at("n")) * problem.shape.at("k");
  }
  double weight_bytes() const { return 2.0 * problem.shape.at("n") * static_cast<double>(problem.shape.at("k")); }
  double tflops(const tuner::Timing& t) const { return flops() / t.median_ms / 1e9; }
  double vs_cublas() const { return cublas.median_ms / ours.median_ms; }
  bool skinny() const { return problem.shape.at("m") <= 16; }
  // Reading the weights once at the kernel's time, against the copy's read + write rate.
  double weight_gbps() const { return weight_bytes() / ours.median_ms / 1e6; }
  double copy_gbps() const { return 2.0 * weight_bytes() / copy.median_ms / 1e6; }
};

std::vector<Problem> read_gemm_shapes(const Options& o) {
  std::ifstream in(o.shapes);
  if (!in) throw Error(ErrorKind::usage, 0, "cannot read shapes file '" + o.shapes + "'");
  const json file = json::parse(in);
  std::vector<Problem> problems;
  for (const auto& sweep : file.at("sweeps")) {
    if (sweep.at("kernel") != "gemm") continue;
    const std::string dtype = sweep.at("dtype").get<std::string>();
    if (!o.dtypes.empty() && std::find(o.dtypes.begin(), o.dtypes.end(), dtype) == o.dtypes.end()) continue;
    for (const auto& s : sweep.at("shapes")) {
      Problem p{"gemm", dtype, {{"trans_b", dtype == "bf16" ? 1 : 0}}, s.value("from", std::string())};
      for (const auto& [key, value] : s.items()) {
        if (key != "from") p.shape[key] = value.get<std::int64_t>();
      }
      if (o.max_m > 0 && p.shape.at("m") > o.max_m) continue;
      problems.push_back(std::move(p));
    }
  }
  if (o.limit > 0 && problems.size() > o.limit) problems.resize(o.limit);
  return problems;
}

void resolve_winners(const Options& o, std::vector<Row>& rows) {
  RuntimeOptions runtime_options;
  runtime_options.db_path = o.cache;
  runtime_options.device = o.device;
  runtime_options.miss_policy = MissPolicy::tune;
  runtime_options.tune.max_evaluations = o.tune_evaluations;
  runtime_options.tune.max_seconds = o.tune_seconds;
  runtime_options.tune.strategy = o.strategy;
  Runtime runtime(runtime_options);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    Row& row = rows[i];
    const Problem& p = row.problem;
    const auto began = std::chrono::steady_clock::now();
    try {
      const Resolution r = runtime.resolve(p.kernel, p.shape, LaunchOptions{p.dtype, std::nullopt});
      row.config = r.config;
      row.source = to_string(r.source);
      row.tune_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
      std::fprintf(stderr, "[%zu/%zu] gemm %s %s: %s, config %s\n", i + 1, rows.size(), p.dtype.c_str(),
                   format_assignments(p.shape).c_str(),
                   r.source == ConfigSource::tuned ? fmt::format("tuned in {:.1f} s", row.tune_seconds).c_str()
                                                   : "from the cache",
                   format_assignments(r.config).c_str());
    } catch (const std::exception& e) {
      row.failure = std::string("no winner: ") + e.what();
      std::fprintf(stderr, "[%zu/%zu] gemm %s %s: %s\n", i + 1, rows.size(), p.dtype.c_str(),
                   format_assignments(p.shape).c_str(), row.failure.c_str());
    }
  }
}

#define BENCH_CUBLAS(expr)                                                                    \
  do {                                                                                        \
    const cublasStatus_t status_ = (expr);                                                    \
    if (status_ != CUBLAS_STATUS_SUCCESS) {                                                   \
      throw Error(ErrorKind::launch, status_, std::string(#expr) + ": " + cublasGetStatusString(status_)); \
    }                                                                                         \
  } while (0)

// Row-major C[m,n] = A[m,k] B is column-major C^T = B^T A^T: cuBLAS computes the n x m result
// with B first. B stored k x n (trans_b=0) is B^T column-major as it lies (ld n); B stored n x k
// (trans_b=1) is read transposed (ld k).
void cublas_gemm(cublasHandle_t handle, const Problem& p, CUdeviceptr a_address, CUdeviceptr b_address,
                 CUdeviceptr c_address) {
  const auto* a = reinterpret_cast<const void*>(a_address);
  const auto* b = reinterpret_cast<const void*>(b_address);
  auto* c = reinterpret_cast<void*>(c_address);
  const int m = static_cast<int>(p.shape.at("m")), n = static_cast<int>(p.shape.at("n")),
            k = static_cast<int>(p.shape.at("k"));
  const bool trans_b = p.shape.at("trans_b") != 0;
  const cudaDataType type = p.dtype == "bf16" ? CUDA_R_16BF : CUDA_R_16F;
  const float alpha = 1.f, beta = 0.f;
  BENCH_CUBLAS(cublasGemmEx(handle, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha, b, type,
                            trans_b ? k : n, a, type, k, &beta, c, type, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// The winner through the harness that tuned it (fresh inputs, NaN-poisoned outputs, the float64
// reference), then cuBLAS (and for skinny m a copy of the weights' bytes) one sample each per
// round in rotating order, every sample after an L2 flush.
void measure(const Options& o, const DeviceInfo& device, cache::Store& store, cublasHandle_t handle, Row& row) {
  const Problem& p = row.problem;
  const auto& kernel = templates::find_kernel(p.kernel);
  const auto binary =
      cache::load_through_cache(store, codegen::specialize(kernel, p.shape, p.dtype, row.config), device.arch);
  const LaunchGeometry geometry = kernel.geometry(row.config, p.shape, templates::dtype_info(p.dtype));
  tuner::Harness harness(kernel, p.shape, p.dtype, device, o.seed);
  row.verify_error = harness.verify(*binary.kernel, geometry, row.config);
  if (!harness.failure().empty()) {
    row.failure = "verification: " + harness.failure();
    return;
  }
  const std::size_t m = p.shape.at("m"), n = p.shape.at("n");
  // cuBLAS multiplies the very operands the winner does: on constant operands the tensor cores
  // draw less power, the clocks stay higher, and cuBLAS ran 9-10% faster than on random ones
  // (bench/operand_power.py).
  const CUdeviceptr a = harness.tensor_address("A"), b = harness.tensor_address("B");
  detail::DeviceBuffer c(m * n * 2);
  BENCH_CUBLAS(cublasSetStream(handle, harness.stream()));
  auto cublas_sample = [&] { return harness.sample([&](CUstream) { cublas_gemm(handle, p, a, b, c.get()); }); };
  const std::size_t half = static_cast<std::size_t>(row.weight_bytes());
  std::optional<detail::DeviceBuffer> source, destination;
  if (row.skinny()) source.emplace(half), destination.emplace(half);
  auto copy_sample = [&] {
    return harness.sample([&](CUstream stream) {
      GMJIT_CU(detail::driver().cuMemcpyDtoDAsync(destination->get(), source->get(), half, stream));
    });
  };
  cublas_sample();  // cuBLAS's first call picks and loads its kernel
  if (row.skinny()) copy_sample();
  const tuner::Harness::Entrant entrant{binary.kernel.get(), geometry, row.config, 1};
  std::vector<double> ours, theirs, copies;
  for (int round = 0; round < o.samples; ++round) {
    if (round % 2) theirs.push_back(cublas_sample());
    ours.push_back(harness.retime({entrant}, 1).front().median_ms);
    if (round % 2 == 0) theirs.push_back(cublas_sample());
    if (row.skinny()) copies.push_back(copy_sample());
  }
  row.ours = tuner::summarize(ours);
  row.cublas = tuner::summarize(theirs);
  if (row.skinny()) row.copy = tuner::summarize(copies);
}

double geomean(const std::vector<double>& values) {
  double log_sum = 0;
  for (const double v : values) log_sum += std::log(v);
  return values.empty() ? 0 : std::exp(log_sum / static_cast<double>(values.size()));
}

void print_table(const std::vector<Row>& rows) {
  std::printf("| dtype | m | n | k | trans_b | from | config | tuned s | ms | TFLOP/s | cuBLAS TFLOP/s | vs cuBLAS | "
              "weights GB/s | %% of copy |\n|---|--:|--:|--:|--:|---|---|--:|--:|--:|--:|--:|--:|--:|\n");
  for (const auto& r : rows) {
    const auto& s = r.problem.shape;
    const std::string head = fmt::format("| {} | {} | {} | {} | {} | {} | {} | {:.1f} ", r.problem.dtype, s.at("m"),
                                         s.at("n"), s.at("k"), s.at("trans_b"), r.problem.label,
                                         format_assignments(r.config), r.tune_seconds);
    if (!r.ok()) {
      std::printf("%s| FAILED: %s |\n", head.c_str(), r.failure.c_str());
      continue;
    }
    std::printf("%s| %.4f | %.1f | %.1f | %.2f | %s | %s |\n", head.c_str(), r.ours.median_ms, r.tflops(r.ours),
                r.tflops(r.cublas), r.vs_cublas(), r.skinny() ? fmt::format("{:.0f}", r.weight_gbps()).c_str() : "",
                r.skinny() ? fmt::format("{:.1f}", 100.0 * r.weight_gbps() / r.copy_gbps()).c_str() : "");
  }
}

// Issue 17's targets for the mma.sync family, and the geometric means.
void print_targets(const std::vector<Row>& rows) {
  std::map<std::string, std::vector<double>> ratios;
  std::vector<std::string> lines;
  for (const auto& r : rows) {
    if (!r.ok()) continue;
    ratios[r.problem.dtype].push_back(r.vs_cublas());
    const std::string shape = fmt::format("{} {}", r.problem.dtype, format_assignments(r.problem.shape));
    if (r.skinny()) {
      const double share = 100.0 * r.weight_gbps() / r.copy_gbps();
      lines.push_back(fmt::format("| m <= 16: >= 1.2x cuBLAS and >= 85% of copy | {} | {:.2f}x, {:.0f}% | {} |", shape,
                                  r.vs_cublas(), share, r.vs_cublas() >= 1.2 && share >= 85 ? "met" : "MISSED"));
    } else if (r.problem.shape.at("m") >= 2048) {
      lines.push_back(fmt::format("| m >= 2048: >= 0.6x cuBLAS | {} | {:.2f}x | {} |", shape, r.vs_cublas(),
                                  r.vs_cublas() >= 0.6 ? "met" : "MISSED"));
    }
  }
  std::printf("\n| target | shape | measured | |\n|---|---|--:|---|\n");
  for (const auto& line : lines) std::printf("%s\n", line.c_str());
  for (const auto& [dtype, values] : ratios) {
    std::printf("| geometric mean of gmjit/cuBLAS, %s | %zu shapes | %.3f | |\n", dtype.c_str(), values.size(),
                geomean(values));
  }
}

json row_json(const Row& r) {
  json j = {{"dtype", r.problem.dtype}, {"shape", r.problem.shape}, {"from", r.problem.label},
            {"config", r.config},       {"source", r.source},        {"tune_seconds", r.tune_seconds}};
  if (!r.ok()) {
    j["failure"] = r.failure;
    return j;
  }
  j.update({{"ms", r.ours.median_ms},
            {"tflops", r.tflops(r.ours)},
            {"cublas_ms", r.cublas.median_ms},
            {"cublas_tflops", r.tflops(r.cublas)},
            {"vs_cublas", r.vs_cublas()},
            {"verify_error", r.verify_error}});
  if (r.skinny()) j.update({{"weight_gbps", r.weight_gbps()}, {"copy_gbps", r.copy_gbps()}});
  return j;
}

int run(const Options& o) {
  std::vector<Row> rows;
  for (auto& problem : read_gemm_shapes(o)) {
    rows.emplace_back();
    rows.back().problem = std::move(problem);
  }
  if (o.list) {
    for (const auto& r : rows) {
      std::printf("gemm %s %s %s\n", r.problem.dtype.c_str(), format_assignments(r.problem.shape).c_str(),
                  r.problem.label.c_str());
    }
    return 0;
  }
  if (rows.empty()) throw Error(ErrorKind::usage, 0, "no gemm shape of " + o.shapes + " is selected");
  const auto status = driver_status();
  if (!status.available) {
    std::fprintf(stderr, "bench_gemm: no GPU to measure on: %s (--list prints the shapes without one)\n",
                 status.reason.c_str());
    return 1;
  }
  detail::Context context(o.device);
  resolve_winners(o, rows);
  const DeviceInfo device = detail::query_device(o.device);
  cache::Store store(o.cache);
  cublasHandle_t handle = nullptr;
  BENCH_CUBLAS(cublasCreate(&handle));
  for (auto& row : rows) {
    if (!row.ok()) continue;
    try {
      measure(o, device, store, handle, row);
    } catch (const std::exception& e) {
      row.failure = e.what();
    }
    std::fprintf(stderr, "measured gemm %s %s: %s\n", row.problem.dtype.c_str(),
                 format_assignments(row.problem.shape).c_str(),
                 row.ok() ? fmt::format("{:.4f} ms, {:.2f}x cuBLAS", row.ours.median_ms, row.vs_cublas()).c_str()
                          : ("FAILED: " + row.failure).c_str());
  }
  cublasDestroy(handle);
  std::printf("bench_gemm on %s (%s): median of %d samples each, L2 flushed before every sample, CUDA events; "
              "cuBLAS = cublasGemmEx, same dtypes and layout, CUBLAS_COMPUTE_32F; tuning budget %zu evaluations, "
              "strategy %s\n\n",
              device.name.c_str(), device.arch.c_str(), o.samples, o.tune_evaluations, o.strategy.c_str());
  print_table(rows);
  print_targets(rows);
  if (!o.json_out.empty()) {
    json summary = {{"device", json::parse(device.to_json())}, {"samples", o.samples}, {"rows", json::array()}};
    for (const auto& r : rows) summary["rows"].push_back(row_json(r));
    std::ofstream out(o.json_out);
    out << summary.dump(2) << "\n";
    if (!out) throw Error(ErrorKind::usage, 0, "cannot write " + o.json_out);
  }
  return std::any_of(rows.begin(), rows.end(), [](const Row& r) { return !r.ok(); }) ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gemm (bf16, fp16) tuned winners against cuBLAS (issue 17)"};
  Options o;
  app.add_option("--shapes", o.shapes, "gmtune shapes file with gemm sweeps (e.g. shared/shapes/gemm.json)")->required();
  app.add_option("--cache", o.cache, "the tuning cache (default: $GMJIT_CACHE, else the user cache)");
  app.add_option("--dtypes", o.dtypes, "only these dtypes (bf16, fp16)")->delimiter(',');
  app.add_option("--max-m", o.max_m, "only shapes with m at most this (0: all)")->check(CLI::NonNegativeNumber);
  app.add_option("--limit", o.limit, "only the first N selected shapes (0: all)");
  app.add_option("--json-out", o.json_out, "write every row as JSON to this file");
  app.add_option("--device", o.device, "device ordinal")->capture_default_str();
  app.add_option("--seed", o.seed, "seed of the inputs the winners are verified on")->capture_default_str();
  app.add_option("--samples", o.samples, "timed samples per kernel")->check(CLI::Range(10, 100000))->capture_default_str();
  app.add_option("--tune-evaluations", o.tune_evaluations, "candidates measured per shape the cache lacks")
      ->capture_default_str();
  app.add_option("--tune-seconds", o.tune_seconds, "wall budget per tuning (0: none)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--strategy", o.strategy, "the search strategy of the tunings (gmtune tune --help lists them)")
      ->capture_default_str();
  app.add_flag("--list", o.list, "print the selected shapes and stop (no GPU needed)");
  CLI11_PARSE(app, argc, argv);
  try {
    strategy_summary(o.strategy);  // an unknown name fails here, as a usage error, not at the first tuning
    if (o.cache.empty()) o.cache = default_cache_path();
    return run(o);
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_gemm: %s\n", e.what());
    return e.kind() == ErrorKind::usage ? 2 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gemm: %s\n", e.what());
    return 1;
  }
}
