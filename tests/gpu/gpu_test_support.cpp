#include "gpu_test_support.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <set>
#include <utility>

#include "core/module.hpp"
#include "require_gpu.hpp"
#include "templates/registry.hpp"
#include "tuner/harness.hpp"

namespace gmjit::gpu_test {
namespace {

// A run of the whole tier stores a few hundred MB of cubins and PTX; a later run after a template
// edit adds that template's again. Least recently used binaries go beyond this, so the file in
// the build tree stays bounded however many runs it serves.
constexpr std::int64_t kBinaryCacheBytes = std::int64_t{1} << 30;

std::string binary_cache_path() {
  const char* chosen = std::getenv("GMJIT_TEST_BINARY_CACHE");
  return chosen != nullptr && *chosen != '\0' ? chosen : GMJIT_TEST_BINARY_CACHE_DEFAULT;
}

std::atomic<std::size_t> loads_from_cache{0};
std::atomic<std::size_t> loads_compiled{0};
std::atomic<std::size_t> compiled_only{0};
std::atomic<std::size_t> compiled_only_held{0};

// Where a run's time went, printed after gtest's own summary: each suite's time (a parameterized
// suite is one group of cases), the slowest tests, and how many kernels the binary cache served.
// gtest_filter runs of a part of the tier print theirs too, so parts can be timed alike.
class TimeSummary : public ::testing::EmptyTestEventListener {
  void OnTestProgramEnd(const ::testing::UnitTest& unit) override {
    std::vector<std::pair<double, std::string>> suites, tests;
    for (int s = 0; s < unit.total_test_suite_count(); ++s) {
      const auto& suite = *unit.GetTestSuite(s);
      if (suite.test_to_run_count() == 0) continue;
      suites.emplace_back(suite.elapsed_time() / 1000.0,
                          std::string(suite.name()) + ": " + std::to_string(suite.test_to_run_count()) + " tests");
      for (int t = 0; t < suite.total_test_count(); ++t) {
        const auto& test = *suite.GetTestInfo(t);
        if (test.should_run()) {
          tests.emplace_back(test.result()->elapsed_time() / 1000.0,
                             std::string(suite.name()) + "." + test.name());
        }
      }
    }
    const auto slowest_first = [](const auto& a, const auto& b) { return a.first > b.first; };
    std::sort(suites.begin(), suites.end(), slowest_first);
    std::sort(tests.begin(), tests.end(), slowest_first);
    std::printf("[ timing   ] %d tests in %.1f s\n", unit.test_to_run_count(), unit.elapsed_time() / 1000.0);
    for (const auto& [seconds, what] : suites) std::printf("[ suite    ] %8.1f s  %s\n", seconds, what.c_str());
    for (std::size_t i = 0; i < std::min<std::size_t>(tests.size(), 10); ++i) {
      std::printf("[ slowest  ] %8.1f s  %s\n", tests[i].first, tests[i].second.c_str());
    }
    if (const char* arch = compile_only_arch()) {
      std::printf("[ binaries ] %zu kernels compiled for %s into the run's binary cache (%s), %zu already there\n",
                  compiled_only.load(), arch, binary_cache_path().c_str(), compiled_only_held.load());
    } else {
      std::printf("[ binaries ] %zu kernels loaded from the run's binary cache (%s), %zu compiled for it\n",
                  loads_from_cache.load(), binary_cache_path().c_str(), loads_compiled.load());
    }
    std::fflush(stdout);
  }
};

// Registered before main runs, as gtest_main owns main.
const bool kTimeSummaryListens = [] {
  ::testing::UnitTest::GetInstance()->listeners().Append(new TimeSummary);
  return true;
}();

// Compiles every distinct kernel of `sources` that the binary cache lacks and stores it there;
// returns how many it compiled and how many the cache already held. A compile error fails the
// test that asked, as it would in a run on the GPU.
std::pair<std::size_t, std::size_t> compile_into_binary_cache(const std::vector<codegen::GeneratedSource>& sources,
                                                              const std::string& arch) {
  std::set<std::string> seen;
  std::vector<std::shared_future<tuner::CompiledPtr>> compiling;
  std::size_t held = 0;
  tuner::CompilePool pool(arch, /*threads=*/0, sources.size());
  for (const auto& source : sources) {
    const std::string key = codegen::compile_key(source, arch);
    if (!seen.insert(key).second) continue;
    if (binary_store().get_cubin(key)) {
      ++held;
      continue;
    }
    compiling.push_back(pool.submit(source));
  }
  for (const auto& result : compiling) {
    try {
      cache::store_binary(binary_store(), *result.get());
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what();
    }
  }
  compiled_only += compiling.size();
  compiled_only_held += held;
  return {compiling.size(), held};
}

}  // namespace

DeviceInfo device0() { return detail::query_device(0); }

cache::Store& binary_store() {
  static cache::Store store = [] {
    cache::Store opened(binary_cache_path());
    opened.gc(kBinaryCacheBytes);
    return opened;
  }();
  return store;
}

CompileAhead::CompileAhead(const std::vector<codegen::GeneratedSource>& sources, const std::string& arch)
    : pool_(arch, /*threads=*/0, sources.size()) {
  for (const auto& source : sources) pool_.submit(source, tuner::cached_module(binary_store(), source, arch));
}

cache::LoadedBinary load(const codegen::GeneratedSource& source, const std::string& arch) {
  auto loaded = cache::load_through_cache(binary_store(), source, arch);
  ++(loaded.from_cache ? loads_from_cache : loads_compiled);
  return loaded;
}

std::size_t verify_every_config(const std::string& name, const std::string& dtype, const Shape& shape,
                                std::uint64_t seed, const std::function<bool(const Config&)>& keep) {
  const auto& kernel = templates::find_kernel(name);
  auto configs = templates::valid_configs(kernel, shape);
  if (keep) configs.erase(std::remove_if(configs.begin(), configs.end(), [&](const Config& c) { return !keep(c); }),
                          configs.end());
  if (configs.empty()) {
    ADD_FAILURE() << name << " has no valid configuration at " << format_assignments(shape);
    return 0;
  }
  std::vector<codegen::GeneratedSource> sources;
  for (const auto& config : configs) sources.push_back(codegen::specialize(kernel, shape, dtype, config));
  std::vector<codegen::GeneratedSource> compiles = sources;
  // The harness compiles the reference kernel (where there is no host reference) before anything
  // else, so the pool takes it first.
  if (kernel.reference_expression && !kernel.host_reference) {
    compiles.insert(compiles.begin(), codegen::specialize_reference(kernel, shape, dtype));
  }
  if (const char* arch = compile_only_arch()) {
    const auto [compiled, held] = compile_into_binary_cache(compiles, arch);
    std::printf("[ compiled ] %zu %s %s configurations at %s for %s: %zu kernels compiled into the binary cache, "
                "%zu already there\n",
                configs.size(), name.c_str(), dtype.c_str(), format_assignments(shape).c_str(), arch, compiled, held);
    return configs.size();
  }
  const DeviceInfo device = device0();
  detail::Context context(0);
  CompileAhead ahead(compiles, device.arch);
  tuner::Harness harness(kernel, shape, dtype, device, seed);
  const auto& info = templates::dtype_info(dtype);
  std::size_t ran = 0;
  for (std::size_t i = 0; i < configs.size(); ++i) {
    SCOPED_TRACE(name + " " + dtype + " " + format_assignments(shape) + " " + format_assignments(configs[i]));
    const auto loaded = load(sources[i], device.arch);
    const double error = harness.verify(*loaded.kernel, kernel.geometry(configs[i], shape, info), configs[i]);
    EXPECT_LE(error, harness.tolerance()) << sources[i].name_expression << ": " << harness.failure();
    ++ran;
  }
  EXPECT_EQ(ran, configs.size());
  std::printf("[ verified ] %zu %s %s configurations at %s\n", ran, name.c_str(), dtype.c_str(),
              format_assignments(shape).c_str());
  return ran;
}

std::size_t verify_every_config(const std::string& name, const std::string& dtype, const Shape& shape) {
  return verify_every_config(name, dtype, shape, static_cast<std::uint64_t>(shape.begin()->second));
}

}  // namespace gmjit::gpu_test
