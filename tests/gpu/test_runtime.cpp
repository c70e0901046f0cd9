// gmjit::Runtime on a live device: every miss policy and the hit path launch kernels whose results
// match a host reference (random nonzero inputs, NaN-poisoned outputs), and the counters prove
// that a problem's second launch does no cache work.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cache/store.hpp"
#include "cli_runner.hpp"
#include "codegen/compiler.hpp"
#include "gmjit/kernels.hpp"
#include "gmjit/runtime.hpp"
#include "core/device.hpp"
#include "require_gpu.hpp"
#include "runtime_fixture.hpp"
#include "templates/registry.hpp"
#include "cache/binaries.hpp"
#include "cache/keys.hpp"

namespace gmjit {
namespace {

std::vector<float> random_values(std::size_t count, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> magnitude(0.25f, 1.0f);
  std::bernoulli_distribution negative(0.5);
  std::vector<float> values(count);
  for (auto& v : values) v = negative(rng) ? -magnitude(rng) : magnitude(rng);
  return values;
}

// Relative L2 error of `got` against `want`; infinite when any element is not finite (the NaN
// poison survived, i.e. an output was never written).
double relative_error(const std::vector<float>& got, const std::vector<double>& want) {
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    diff += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return std::sqrt(diff / norm);
}

// Device buffers of one problem with random inputs and a poisoned output, and its host reference.
struct Operands {
  std::vector<detail::DeviceBuffer> buffers;
  std::vector<double> reference;
  std::size_t output_elements = 0;

  std::vector<DevicePtr> tensors() const {
    std::vector<DevicePtr> out;
    for (const auto& b : buffers) out.emplace_back(b.get());
    return out;
  }
  void poison() { buffers.back().fill_bytes(0xFF, nullptr); }
  double error() const {
    std::vector<float> got(output_elements);
    buffers.back().download(got.data(), got.size() * sizeof(float));
    return relative_error(got, reference);
  }
};

Operands vector_add_operands(std::int64_t n, std::uint32_t seed) {
  Operands o;
  const auto a = random_values(n, seed), b = random_values(n, seed + 1);
  for (const auto* host : {&a, &b}) {
    o.buffers.emplace_back(n * sizeof(float));
    o.buffers.back().upload(host->data(), n * sizeof(float));
  }
  o.buffers.emplace_back(n * sizeof(float));
  o.output_elements = n;
  o.reference.resize(n);
  for (std::int64_t i = 0; i < n; ++i) o.reference[i] = static_cast<double>(a[i]) + b[i];
  o.poison();
  return o;
}

Operands sgemm_operands(const Shape& shape, std::uint32_t seed) {
  const std::int64_t m = shape.at("m"), n = shape.at("n"), k = shape.at("k");
  Operands o;
  const auto a = random_values(m * k, seed), b = random_values(k * n, seed + 1);
  for (const auto* host : {&a, &b}) {
    o.buffers.emplace_back(host->size() * sizeof(float));
    o.buffers.back().upload(host->data(), host->size() * sizeof(float));
  }
  o.buffers.emplace_back(m * n * sizeof(float));
  o.output_elements = m * n;
  o.reference.assign(m * n, 0.0);
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t p = 0; p < k; ++p) {
      const double av = a[i * k + p];
      for (std::int64_t j = 0; j < n; ++j) o.reference[i * n + j] += av * b[p * n + j];
    }
  }
  o.poison();
  return o;
}

double tolerance(const std::string& kernel, const Shape& shape) {
  return templates::find_kernel(kernel).tolerance(templates::dtype_info("fp32"), shape);
}

class RuntimeGpu : public testing::RuntimeTest {
 protected:
  // Records `config` as the winner of a problem on device 0, with its compiled cubin in the
  // binary cache, as a sweep would leave it.
  void put_winner(const std::string& kernel_name, const Shape& shape, const Config& config) {
    const DeviceInfo device = detail::query_device(0);
    const auto& kernel = templates::find_kernel(kernel_name);
    const std::string dtype = kernel.dtypes.front();
    const std::string template_hash = templates::template_hash(kernel.header);
    cache::Store store(db_);
    const cache::DeviceRecord device_record{device.fingerprint(), device.name, device.arch, device.to_json()};
    const cache::ProblemRecord problem{cache::problem_key(kernel_name, template_hash, dtype, cache::kRowMajor, shape),
                                       kernel_name, template_hash, dtype, cache::kRowMajor,
                                       nlohmann::json(shape).dump()};
    cache::TrialRecord trial;
    trial.config_json = nlohmann::json(config).dump();
    trial.status = "ok";
    trial.median_ms = 0.5;
    trial.repetitions = 10;
    store.record_tuning(device_record, problem, {trial}, 0, "test");
    cache::store_binary(
        store,
        *codegen::shared_compiler().compile(codegen::specialize(kernel, shape, dtype, config), device.arch).module);
  }
};

TEST_F(RuntimeGpu, DefaultConfigLaunchesMatchTheReferenceAndTheSecondLaunchIsAMemoryHit) {
  GMJIT_REQUIRE_DEVICE();
  detail::Context context(0);
  Runtime runtime(options(MissPolicy::default_config));

  const Shape vshape{{"n", 1000003}};
  Operands v = vector_add_operands(vshape.at("n"), 1);
  const Resolution r = runtime.resolve("vector_add", vshape);
  EXPECT_EQ(r.source, ConfigSource::default_config);
  EXPECT_EQ(r.config, templates::find_kernel("vector_add").default_config);
  EXPECT_EQ(r.dtype, "fp32");
  const RuntimeStats before = runtime.stats();
  EXPECT_EQ(before.db_lookups, 1u);
  EXPECT_EQ(before.loads, 0u) << "resolve() loads nothing";

  runtime.launch("vector_add", vshape, v.tensors());
  context.synchronize();
  EXPECT_LE(v.error(), tolerance("vector_add", vshape));
  RuntimeStats s = runtime.stats();
  EXPECT_EQ(s.launches, 1u);
  EXPECT_EQ(s.loads, 1u);
  EXPECT_EQ(s.compiles, 1u) << "an empty binary cache: compiled once";
  EXPECT_EQ(s.default_config, 2u) << "resolve() and the first launch each resolved it";
  EXPECT_EQ(s.memory_hits, 0u);
  const std::uint64_t lookups = s.db_lookups;

  v.poison();
  runtime.launch("vector_add", vshape, v.tensors());
  context.synchronize();
  EXPECT_LE(v.error(), tolerance("vector_add", vshape));
  s = runtime.stats();
  EXPECT_EQ(s.launches, 2u);
  EXPECT_EQ(s.memory_hits, 1u);
  EXPECT_EQ(s.db_lookups, lookups) << "the second launch queried the cache";
  EXPECT_EQ(s.loads, 1u);
  EXPECT_EQ(runtime.resolve("vector_add", vshape).source, ConfigSource::default_config);
  EXPECT_EQ(runtime.stats().db_lookups, lookups) << "resolve() of a loaded problem answers from memory";

  const Shape gshape{{"m", 130}, {"n", 96}, {"k", 200}};
  Operands g = sgemm_operands(gshape, 2);
  runtime.launch("sgemm", gshape, g.tensors());
  context.synchronize();
  EXPECT_LE(g.error(), tolerance("sgemm", gshape));
  EXPECT_EQ(runtime.stats().loads, 2u);

  // Another Runtime (another process, in effect) finds the default config's cubin in the cache.
  Runtime again(options(MissPolicy::default_config));
  g.poison();
  again.launch("sgemm", gshape, g.tensors());
  context.synchronize();
  EXPECT_LE(g.error(), tolerance("sgemm", gshape));
  EXPECT_EQ(again.stats().compiles, 0u);
  EXPECT_EQ(again.stats().loads, 1u);
}

TEST_F(RuntimeGpu, FailPolicyOnAnEmptyCacheThrowsAndLoadsNothing) {
  GMJIT_REQUIRE_DEVICE();
  detail::Context context(0);
  { cache::Store create(db_); }
  Runtime runtime(options(MissPolicy::fail));
  Operands v = vector_add_operands(4096, 3);
  try {
    runtime.launch("vector_add", {{"n", 4096}}, v.tensors());
    FAIL() << "launched without a winner under MissPolicy::fail";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::cache_miss);
    EXPECT_NE(e.message().find("vector_add fp32 n=4096"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find(detail::query_device(0).name), std::string::npos) << e.message();
  }
  const RuntimeStats s = runtime.stats();
  EXPECT_EQ(s.failed, 1u);
  EXPECT_EQ(s.db_lookups, 1u);
  EXPECT_EQ(s.loads, 0u);
  EXPECT_EQ(s.launches, 0u);
  // A failed problem is not remembered: once the cache has a winner, the same Runtime launches it.
  put_winner("vector_add", {{"n", 4096}}, {{"block", 128}, {"items", 2}, {"vec_bytes", 8}});
  runtime.launch("vector_add", {{"n", 4096}}, v.tensors());
  context.synchronize();
  EXPECT_LE(v.error(), tolerance("vector_add", {{"n", 4096}}));
  EXPECT_EQ(runtime.stats().cache_hits, 1u);
}

TEST_F(RuntimeGpu, HitPathLaunchesTheCachedWinnerFromTheBinaryCache) {
  GMJIT_REQUIRE_DEVICE();
  detail::Context context(0);
  const Shape vshape{{"n", 65539}};
  const Config vconfig{{"block", 512}, {"items", 1}, {"vec_bytes", 8}};
  const Shape gshape{{"m", 64}, {"n", 96}, {"k", 128}};
  const Config gconfig{{"bm", 32}, {"bn", 32}, {"bk", 8}, {"tm", 4}, {"tn", 4}, {"vec", 1}, {"wm", 0}};
  put_winner("vector_add", vshape, vconfig);
  put_winner("sgemm", gshape, gconfig);

  Runtime runtime(options(MissPolicy::fail));
  for (const auto& [kernel, shape, config] :
       {std::tuple{"vector_add", vshape, vconfig}, std::tuple{"sgemm", gshape, gconfig}}) {
    SCOPED_TRACE(kernel);
    const Resolution r = runtime.resolve(kernel, shape);
    EXPECT_EQ(r.source, ConfigSource::cache);
    EXPECT_EQ(r.config, config);
    Operands o = std::string(kernel) == "sgemm" ? sgemm_operands(shape, 4) : vector_add_operands(shape.at("n"), 4);
    const double limit = tolerance(kernel, shape);
    const RuntimeStats before = runtime.stats();
    runtime.launch(kernel, shape, o.tensors());
    context.synchronize();
    EXPECT_LE(o.error(), limit);
    const RuntimeStats first = runtime.stats();
    // put_winner wrote no launch index: the first problem reads SQLite and has the index
    // rewritten, and the second finds its winner there.
    EXPECT_EQ(first.db_lookups + first.index_hits, before.db_lookups + before.index_hits + 1);
    EXPECT_EQ(first.index_hits - before.index_hits, std::string(kernel) == "sgemm" ? 1u : 0u);
    EXPECT_EQ(first.cache_hits, before.cache_hits + 1);
    EXPECT_EQ(first.loads, before.loads + 1);

    o.poison();
    runtime.launch(kernel, shape, o.tensors());
    context.synchronize();
    EXPECT_LE(o.error(), limit);
    const RuntimeStats second = runtime.stats();
    EXPECT_EQ(second.memory_hits, first.memory_hits + 1);
    EXPECT_EQ(second.db_lookups, first.db_lookups) << "the second launch queried the cache";
    EXPECT_EQ(second.loads, first.loads);
  }
  EXPECT_EQ(runtime.stats().compiles, 0u) << "every cubin came from the binary cache";
  EXPECT_EQ(runtime.stats().failed, 0u);
}

TEST_F(RuntimeGpu, NearestPolicyTakesTheNearestShapesConfigOrFallsBackToTheDefault) {
  GMJIT_REQUIRE_DEVICE();
  detail::Context context(0);
  const Config small{{"bm", 32}, {"bn", 32}, {"bk", 8}, {"tm", 4}, {"tn", 4}, {"vec", 1}, {"wm", 0}};
  const Config large{{"bm", 128}, {"bn", 128}, {"bk", 8}, {"tm", 8}, {"tn", 8}, {"vec", 1}, {"wm", 0}};
  put_winner("sgemm", {{"m", 256}, {"n", 256}, {"k", 256}}, small);
  put_winner("sgemm", {{"m", 4096}, {"n", 4096}, {"k", 4096}}, large);

  Runtime runtime(options(MissPolicy::nearest));
  const Shape near_small{{"m", 300}, {"n", 260}, {"k", 256}};
  const Resolution r = runtime.resolve("sgemm", near_small);
  EXPECT_EQ(r.source, ConfigSource::nearest);
  EXPECT_EQ(r.config, small);
  ASSERT_TRUE(r.nearest_shape.has_value());
  EXPECT_EQ(*r.nearest_shape, (Shape{{"m", 256}, {"n", 256}, {"k", 256}}));
  EXPECT_GT(r.nearest_distance, 0);
  Operands g = sgemm_operands(near_small, 5);
  runtime.launch("sgemm", near_small, g.tensors());
  context.synchronize();
  EXPECT_LE(g.error(), tolerance("sgemm", near_small));

  const Shape near_large{{"m", 3000}, {"n", 4096}, {"k", 2048}};
  EXPECT_EQ(runtime.resolve("sgemm", near_large).config, large);

  // n = 262 is not a multiple of 4, so the nearest winner's vec=1 is invalid here.
  const Shape odd{{"m", 300}, {"n", 262}, {"k", 256}};
  const Resolution fallback = runtime.resolve("sgemm", odd);
  EXPECT_EQ(fallback.source, ConfigSource::default_config);
  EXPECT_EQ(fallback.config, templates::find_kernel("sgemm").default_config);
  ASSERT_TRUE(fallback.nearest_shape.has_value());
  EXPECT_NE(fallback.note.find("vec=1"), std::string::npos) << fallback.note;
  Operands o = sgemm_operands(odd, 6);
  runtime.launch("sgemm", odd, o.tensors());
  context.synchronize();
  EXPECT_LE(o.error(), tolerance("sgemm", odd));

  // No tuned shape of this kernel and dtype at all: the default configuration.
  const Resolution none = runtime.resolve("vector_add", {{"n", 1000}});
  EXPECT_EQ(none.source, ConfigSource::default_config);
  EXPECT_FALSE(none.nearest_shape.has_value());
  EXPECT_NE(none.note.find("no tuned shape"), std::string::npos) << none.note;
}

TEST_F(RuntimeGpu, WrongTensorsAreUsageErrorsOnTheHitPathToo) {
  GMJIT_REQUIRE_DEVICE();
  detail::Context context(0);
  Runtime runtime(options(MissPolicy::default_config));
  const Shape shape{{"m", 32}, {"n", 32}, {"k", 32}};
  Operands g = sgemm_operands(shape, 7);
  runtime.launch("sgemm", shape, g.tensors());  // now loaded: the checks below run on the hit path
  context.synchronize();
  const auto t = g.tensors();
  try {
    runtime.launch("sgemm", shape, {t[0], t[1]});
    FAIL() << "launched with two tensors";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::usage);
    EXPECT_EQ(e.message(), "sgemm takes 3 tensors (A, B, C), got 2");
  }
  try {
    runtime.launch("sgemm", shape, {t[0], nullptr, t[2]});
    FAIL() << "launched with a null tensor";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::usage);
    EXPECT_NE(e.message().find("'B'"), std::string::npos) << e.message();
  }
  EXPECT_EQ(runtime.stats().launches, 1u);
  EXPECT_NO_THROW(context.synchronize()) << "nothing bad reached the device";
}

// A gemm whose k and n are multiples of 8 moves its tensors in 16-byte pieces: a C two bytes off
// (a view into a bf16 buffer) is a usage error, not a misaligned-address fault that would end
// the context, and the same tensors launch once aligned.
TEST_F(RuntimeGpu, MisalignedTensorsAreUsageErrorsNotFaults) {
  GMJIT_REQUIRE_DEVICE();
  detail::Context context(0);
  Runtime runtime(options(MissPolicy::default_config));
  const Shape shape{{"m", 64}, {"n", 64}, {"k", 64}, {"trans_b", 1}};
  LaunchOptions bf16;
  bf16.dtype = "bf16";
  const std::size_t bytes = 64 * 64 * 2;
  detail::DeviceBuffer a(bytes), b(bytes), c(bytes + 16);
  a.fill_bytes(0x3F, nullptr);
  b.fill_bytes(0x3F, nullptr);
  const std::vector<DevicePtr> misaligned{a.get(), b.get(), c.get() + 2}, aligned{a.get(), b.get(), c.get() + 16};
  try {
    runtime.launch("gemm", shape, misaligned, nullptr, bf16);
    FAIL() << "launched with C 2 bytes off 16";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::usage);
    EXPECT_NE(e.message().find("'C'"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("16-byte aligned"), std::string::npos) << e.message();
  }
  EXPECT_NO_THROW(context.synchronize()) << "nothing reached the device";
  runtime.launch("gemm", shape, aligned, nullptr, bf16);
  EXPECT_NO_THROW(context.synchronize());
  EXPECT_EQ(runtime.stats().launches, 1u);
}

TEST_F(RuntimeGpu, ConcurrentFirstLaunchesLoadOnceFromAnyThread) {
  GMJIT_REQUIRE_DEVICE();
  detail::Context context(0);
  Runtime runtime(options(MissPolicy::default_config));
  const std::int64_t n = 1 << 20;
  Operands v = vector_add_operands(n, 8);
  const auto tensors = v.tensors();
  constexpr int kThreads = 8, kLaunches = 50;
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    // These threads have no current context: the Runtime makes its own current per launch.
    threads.emplace_back([&] {
      try {
        for (int i = 0; i < kLaunches; ++i) runtime.launch("vector_add", {{"n", n}}, tensors);
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what();
        ++errors;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  ASSERT_EQ(errors.load(), 0);
  context.synchronize();
  EXPECT_LE(v.error(), tolerance("vector_add", {{"n", n}}));
  const RuntimeStats s = runtime.stats();
  EXPECT_EQ(s.launches, static_cast<std::uint64_t>(kThreads * kLaunches));
  EXPECT_EQ(s.loads, 1u);
  EXPECT_EQ(s.db_lookups, 1u);
  EXPECT_GE(s.memory_hits, static_cast<std::uint64_t>(kThreads * (kLaunches - 1)));
}

TEST_F(RuntimeGpu, TunePolicyTunesIntoTheCacheThenHits) {
  GMJIT_REQUIRE_DEVICE();
  detail::Context context(0);
  RuntimeOptions o = options(MissPolicy::tune);
  o.tune.max_evaluations = 4;
  o.tune.max_seconds_per_candidate = 0.05;
  Runtime runtime(o);
  const Shape shape{{"n", 1 << 16}};
  Operands v = vector_add_operands(shape.at("n"), 9);
  runtime.launch("vector_add", shape, v.tensors());
  context.synchronize();
  EXPECT_LE(v.error(), tolerance("vector_add", shape));
  const RuntimeStats s = runtime.stats();
  EXPECT_EQ(s.tuned, 1u);
  EXPECT_EQ(s.compiles, 0u) << "the sweep stored the winner's cubin";
  const Resolution r = runtime.resolve("vector_add", shape);
  EXPECT_EQ(r.source, ConfigSource::tuned);

  // The trials and the winner are in the cache, as `gmtune sweep` leaves them.
  cache::Store store(db_);
  const auto winners = store.winners("vector_add");
  ASSERT_EQ(winners.size(), 1u);
  EXPECT_EQ(nlohmann::json::parse(winners[0].config_json).get<Config>(), r.config);
  EXPECT_GE(store.trials(winners[0].device_key, winners[0].problem_key).size(), 1u);
  Runtime later(options(MissPolicy::fail));
  EXPECT_EQ(later.resolve("vector_add", shape).source, ConfigSource::cache);
}

// A cache-only deployment's miss names a gmtune command; run as printed, it records a winner and
// its cubin that the next Runtime launches without tuning or compiling.
TEST_F(RuntimeGpu, TheMissMessagesTuneCommandRecordsAWinnerTheRuntimeLaunches) {
  GMJIT_REQUIRE_DEVICE();
  detail::Context context(0);
  const Shape shape{{"n", 1 << 15}};
  std::string message;
  try {
    Runtime(options(MissPolicy::fail)).resolve("vector_add", shape);
    FAIL() << "resolved without a cache file under MissPolicy::fail";
  } catch (const Error& e) {
    message = e.message();
  }
  const std::string command = testing::quoted_gmtune_arguments(message);
  ASSERT_EQ(command, "tune vector_add --shape n=32768 --dtype fp32 --db " + db_.string()) << message;
  const auto tuned = testing::run_gmtune(command + " --budget 3");
  ASSERT_EQ(tuned.status, 0) << tuned.err;

  Runtime runtime(options(MissPolicy::fail));
  Operands v = vector_add_operands(shape.at("n"), 13);
  runtime.launch("vector_add", shape, v.tensors());
  context.synchronize();
  EXPECT_LE(v.error(), tolerance("vector_add", shape));
  const RuntimeStats s = runtime.stats();
  EXPECT_EQ(s.compiles, 0u) << "gmtune tune stored the winner's cubin";
  // gmtune tune rewrote the launch index: winner and cubin came from it, SQLite stayed closed.
  EXPECT_EQ(s.index_hits, 1u);
  EXPECT_EQ(s.db_lookups, 0u);
  EXPECT_TRUE(s.last_load.from_index);
  EXPECT_EQ(runtime.resolve("vector_add", shape).source, ConfigSource::cache);
}

// Workspaces belong to the Runtime: one per (stream, kernel), zeroed when allocated, grown when a
// launch needs more, and never shared by two streams.

std::vector<float> scan_input(std::int64_t n) {
  std::vector<float> host(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) host[i] = static_cast<float>((i * 7919) % 1001) / 1000.0f - 0.5f;
  return host;
}

// Largest |y[i] - (x[0] + ... + x[i])| over the scan in `y`.
double scan_error(const std::vector<float>& x, const detail::DeviceBuffer& y) {
  std::vector<float> out(x.size());
  y.download(out.data(), out.size() * sizeof(float));
  double running = 0, worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    running += x[i];
    if (!std::isfinite(out[i])) return INFINITY;
    worst = std::max(worst, std::abs(static_cast<double>(out[i]) - running));
  }
  return worst;
}

TEST_F(RuntimeGpu, SM90_PrefixSumWorkspaceGrowsOnOneStreamAndKeepsWorking) {
  GMJIT_REQUIRE_SM90();
  detail::Context context(0);
  detail::Stream stream;
  Runtime runtime(options(MissPolicy::default_config));
  const auto run = [&](std::int64_t n) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const auto x = scan_input(n);
    detail::DeviceBuffer xs(x.size() * sizeof(float)), ys(x.size() * sizeof(float));
    xs.upload(x.data(), x.size() * sizeof(float));
    // Twice: the second launch reads the state the first left in the workspace.
    for (int launch = 0; launch < 2; ++launch) {
      ys.fill_bytes(0xFF, stream.get());
      runtime.launch("prefix_sum", {{"n", n}}, {xs.get(), ys.get()}, stream.get());
      stream.synchronize();
      EXPECT_LE(scan_error(x, ys), 1e-5 * std::sqrt(static_cast<double>(n))) << "launch " << launch;
    }
  };
  const auto& prefix_sum = templates::find_kernel("prefix_sum");
  run(1000);
  RuntimeStats s = runtime.stats();
  EXPECT_EQ(s.workspaces, 1u);
  EXPECT_EQ(s.workspace_allocations, 1u);
  EXPECT_GE(s.workspace_bytes, static_cast<std::uint64_t>(prefix_sum.workspace({{"n", 1000}}).bytes));
  const std::int64_t large = std::int64_t{1} << 24;
  run(large);
  s = runtime.stats();
  EXPECT_EQ(s.workspaces, 1u) << "one stream, one kernel";
  EXPECT_EQ(s.workspace_allocations, 2u) << "the large n needed a larger workspace";
  EXPECT_GE(s.workspace_bytes, static_cast<std::uint64_t>(prefix_sum.workspace({{"n", large}}).bytes));
  run(1000);  // back to the small n on the grown workspace
  run(large);
  EXPECT_EQ(runtime.stats().workspace_allocations, 2u) << "the grown workspace serves both sizes";
  runtime.release_workspaces(stream.get());
  EXPECT_EQ(runtime.stats().workspaces, 0u);
  EXPECT_EQ(runtime.stats().workspace_bytes, 0u);
  run(1000);
  EXPECT_EQ(runtime.stats().workspace_allocations, 3u) << "a released stream allocates afresh";
}

TEST_F(RuntimeGpu, SM90_TwoStreamsLaunchConcurrentlyOnWorkspacesOfTheirOwn) {
  GMJIT_REQUIRE_SM90();
  detail::Context context(0);
  Runtime runtime(options(MissPolicy::default_config));
  const std::int64_t n = std::int64_t{1} << 22;
  constexpr int kThreads = 2, kRounds = 10, kBurst = 50;
  // Each thread sums its own data on its own stream, in bursts of back-to-back launches that
  // overlap the other stream's: a shared completion counter or partials would mix the sums.
  struct Lane {
    std::vector<float> x;
    double expected = 0;
    std::vector<float> results;
  };
  std::vector<Lane> lanes(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    lanes[t].x.resize(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) {
      lanes[t].x[i] = static_cast<float>((i * (31 + 17 * t)) % 997) / 997.0f + static_cast<float>(t);
      lanes[t].expected += lanes[t].x[i];
    }
  }
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        context.make_current();  // this thread allocates its stream and buffers there
        detail::Stream stream;
        detail::DeviceBuffer x(static_cast<std::size_t>(n) * sizeof(float)), y(sizeof(float));
        x.upload(lanes[t].x.data(), lanes[t].x.size() * sizeof(float));
        for (int round = 0; round < kRounds; ++round) {
          for (int i = 0; i < kBurst; ++i) runtime.launch("vector_sum", {{"n", n}}, {x.get(), y.get()}, stream.get());
          stream.synchronize();
          float got = 0;
          y.download(&got, sizeof(float));
          lanes[t].results.push_back(got);
        }
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what();
        ++errors;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  ASSERT_EQ(errors.load(), 0);
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_EQ(lanes[t].results.size(), static_cast<std::size_t>(kRounds));
    for (const float got : lanes[t].results) {
      EXPECT_NEAR(got, lanes[t].expected, 1e-5 * std::abs(lanes[t].expected)) << "stream " << t;
    }
  }
  const RuntimeStats s = runtime.stats();
  EXPECT_EQ(s.workspaces, static_cast<std::uint64_t>(kThreads)) << "one workspace per stream";
  EXPECT_EQ(s.workspace_allocations, static_cast<std::uint64_t>(kThreads));
  EXPECT_EQ(s.launches, static_cast<std::uint64_t>(kThreads * kRounds * kBurst));
}

TEST_F(RuntimeGpu, SM90_HistogramLaunchesFromNAloneWithTheWinnerOfItsDefaultContention) {
  GMJIT_REQUIRE_SM90();
  detail::Context context(0);
  const std::int64_t n = 1000003;
  const Config config{{"block", 256}, {"stripes", 8}, {"unroll", 1}, {"blocks", 264}};
  // The winner a sweep of {"n": n} (or of n at contention 1) leaves.
  put_winner("histogram", validate("histogram", {{"n", n}}).shape, config);
  Runtime runtime(options(MissPolicy::fail));
  const Resolution r = runtime.resolve("histogram", {{"n", n}});
  EXPECT_EQ(r.source, ConfigSource::cache);
  EXPECT_EQ(r.config, config);
  EXPECT_EQ(r.shape, (Shape{{"contention", 1}, {"i64_counts", 0}, {"n", n}}));

  std::vector<unsigned char> host(static_cast<std::size_t>(n));
  std::vector<std::uint32_t> expected(256, 0);
  for (std::int64_t i = 0; i < n; ++i) {
    host[i] = static_cast<unsigned char>((i * 131) % 251 + (i % 3 == 0 ? 5 : 0));
    ++expected[host[i]];
  }
  detail::DeviceBuffer x(host.size()), counts(256 * sizeof(std::uint32_t));
  x.upload(host.data(), host.size());
  for (int launch = 0; launch < 3; ++launch) {
    counts.fill_bytes(0xFF, nullptr);
    runtime.launch("histogram", {{"n", n}}, {x.get(), counts.get()});
    context.synchronize();
    std::vector<std::uint32_t> got(256);
    counts.download(got.data(), got.size() * sizeof(std::uint32_t));
    EXPECT_EQ(got, expected) << "launch " << launch;
  }
  EXPECT_EQ(runtime.stats().cache_hits, 2u) << "resolve() and the first launch";
  EXPECT_EQ(runtime.stats().failed, 0u);
}

// softmax's split rows keep per-row counters whose place depends on rows: a launch with another
// rows finds the stream's workspace zeroed first, and each launch stays right.
TEST_F(RuntimeGpu, SM90_SoftmaxSplitRowsAlternateShapesOnOneWorkspace) {
  GMJIT_REQUIRE_SM90();
  detail::Context context(0);
  const std::int64_t cols = 131072;
  const Config split{{"strategy", 2}, {"block", 1024}, {"elems", 8}, {"vec", 1}, {"cached", 1}, {"split", 16}};
  for (const std::int64_t rows : {3, 5}) put_winner("softmax", {{"rows", rows}, {"cols", cols}}, split);
  Runtime runtime(options(MissPolicy::fail));
  detail::Stream stream;
  for (const std::int64_t rows : {3, 5, 3, 3, 5}) {
    SCOPED_TRACE("rows=" + std::to_string(rows));
    const Shape shape{{"rows", rows}, {"cols", cols}};
    ASSERT_EQ(runtime.resolve("softmax", shape).config, split);
    const auto x = random_values(static_cast<std::size_t>(rows * cols), static_cast<std::uint32_t>(rows));
    std::vector<double> reference(x.size());
    for (std::int64_t r = 0; r < rows; ++r) {
      const float* row = x.data() + r * cols;
      const double top = *std::max_element(row, row + cols);
      double sum = 0;
      for (std::int64_t c = 0; c < cols; ++c) sum += std::exp(row[c] - top);
      for (std::int64_t c = 0; c < cols; ++c) reference[r * cols + c] = std::exp(row[c] - top) / sum;
    }
    detail::DeviceBuffer xs(x.size() * sizeof(float)), ys(x.size() * sizeof(float));
    xs.upload(x.data(), x.size() * sizeof(float));
    ys.fill_bytes(0xFF, stream.get());
    runtime.launch("softmax", shape, {xs.get(), ys.get()}, stream.get());
    stream.synchronize();
    std::vector<float> got(x.size());
    ys.download(got.data(), got.size() * sizeof(float));
    EXPECT_LE(relative_error(got, reference), tolerance("softmax", shape));
  }
  EXPECT_EQ(runtime.stats().workspaces, 1u);
}

}  // namespace
}  // namespace gmjit

namespace gmjit {
namespace {

// RuntimeStats::last_load names the stages of a first launch (issue 15, item 11): from the
// binary cache no compile, and a compile only where the cache had no cubin. Times are not judged.
TEST_F(RuntimeGpu, LastLoadNamesTheStagesOfAFirstLaunch) {
  GMJIT_REQUIRE_DEVICE();
  detail::Context context(0);
  const Shape shape{{"n", 65536}};
  put_winner("vector_add", shape, {{"block", 256}, {"items", 4}, {"vec_bytes", 16}});
  Runtime runtime(options(MissPolicy::fail));
  EXPECT_EQ(runtime.stats().last_load.total_us, 0.0);
  Operands v = vector_add_operands(shape.at("n"), 11);
  runtime.launch("vector_add", shape, v.tensors());
  context.synchronize();
  EXPECT_LE(v.error(), tolerance("vector_add", shape));
  const LoadTimes t = runtime.stats().last_load;
  EXPECT_EQ(t.compile_us, 0.0) << "the cubin came from the binary cache";
  for (const double stage : {t.check_us, t.driver_us, t.device_us, t.keys_us, t.cache_open_us, t.lookup_us,
                             t.compile_key_us, t.fetch_us, t.module_load_us, t.prepare_us, t.launch_us}) {
    EXPECT_GE(stage, 0.0);
  }
  EXPECT_GT(t.cache_open_us + t.fetch_us + t.module_load_us, 0.0);
  const double stages = t.check_us + t.driver_us + t.device_us + t.keys_us + t.cache_open_us + t.lookup_us +
                        t.compile_key_us + t.fetch_us + t.module_load_us + t.prepare_us + t.launch_us;
  EXPECT_LE(stages, t.total_us);

  v.poison();
  runtime.launch("vector_add", shape, v.tensors());
  context.synchronize();
  EXPECT_EQ(runtime.stats().last_load.total_us, t.total_us) << "a memory hit loads nothing";

  // A problem whose cubin the cache lacks: compiled, and the compile is where the time went.
  const Shape gshape{{"m", 64}, {"n", 64}, {"k", 64}};
  Operands g = sgemm_operands(gshape, 12);
  runtime.launch("sgemm", gshape, g.tensors(), nullptr, LaunchOptions{"", MissPolicy::default_config});
  context.synchronize();
  EXPECT_LE(g.error(), tolerance("sgemm", gshape));
  const LoadTimes compiled = runtime.stats().last_load;
  EXPECT_GT(compiled.compile_us, 0.0);
  EXPECT_EQ(compiled.cache_open_us, 0.0) << "the Runtime's cache file was already open";
  EXPECT_EQ(compiled.device_us, 0.0) << "the device was already set up";
  EXPECT_EQ(runtime.stats().compiles, 1u);
}

// A launch index written by a process of this library build plans the whole launch of each
// winner: a fresh Runtime's first launch of a tuned problem does no catalog work and launches what
// the catalog would (vector_add, and prefix_sum with its workspace).
TEST_F(RuntimeGpu, AFreshRuntimeLaunchesTunedProblemsFromTheirPlans) {
  GMJIT_REQUIRE_DEVICE();
  detail::Context context(0);
  const Shape add_shape{{"n", (1 << 16) + 3}};
  const std::int64_t n = 100003;
  const Shape scan_shape{{"n", n}};
  put_winner("vector_add", add_shape, templates::find_kernel("vector_add").default_config);
  put_winner("prefix_sum", scan_shape, templates::find_kernel("prefix_sum").default_config);
  {
    cache::Store store(db_);
    ASSERT_EQ(cache::publish_launch_index(store).plans, 2u);
  }

  Runtime runtime(options(MissPolicy::fail));
  Operands v = vector_add_operands(add_shape.at("n"), 21);
  runtime.launch("vector_add", add_shape, v.tensors());
  context.synchronize();
  EXPECT_LE(v.error(), tolerance("vector_add", add_shape));
  const LoadTimes t = runtime.stats().last_load;
  EXPECT_TRUE(t.from_plan);
  EXPECT_TRUE(t.from_index);
  EXPECT_EQ(t.check_us + t.keys_us + t.compile_key_us, 0.0) << "no catalog work";

  const auto x = scan_input(n);
  detail::DeviceBuffer xs(x.size() * sizeof(float)), ys(x.size() * sizeof(float));
  xs.upload(x.data(), x.size() * sizeof(float));
  for (int launch = 0; launch < 2; ++launch) {  // the second reads the state the first left
    ys.fill_bytes(0xFF, nullptr);
    runtime.launch("prefix_sum", scan_shape, {xs.get(), ys.get()});
    context.synchronize();
    EXPECT_LE(scan_error(x, ys), 1e-5 * std::sqrt(static_cast<double>(n))) << "launch " << launch;
  }
  const RuntimeStats s = runtime.stats();
  EXPECT_TRUE(s.last_load.from_plan);
  EXPECT_EQ(s.compiles, 0u);
  EXPECT_EQ(s.db_lookups, 0u) << "SQLite stayed closed";
  EXPECT_EQ(s.index_hits, 2u);
  EXPECT_EQ(s.workspaces, 1u);

  // The plan's resolution is the catalog's.
  Runtime catalog(options(MissPolicy::fail));
  EXPECT_EQ(runtime.resolve("vector_add", add_shape).config, catalog.resolve("vector_add", add_shape).config);
  EXPECT_EQ(runtime.resolve("prefix_sum", scan_shape).config, catalog.resolve("prefix_sum", scan_shape).config);
}

}  // namespace
}  // namespace gmjit
