// The memory-bound catalog kernels on the GPU: every valid configuration of grayscale and
// transpose against its double-precision reference at sizes that leave partial tiles, partial
// quads and single elements; and their best configurations against a plain copy's bandwidth.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <memory>
#include <optional>

#include "codegen/compiler.hpp"
#include "lib/core/device.hpp"
#include "lib/core/module.hpp"
#include "require_gpu.hpp"
#include "templates/registry.hpp"
#include "tuner/harness.hpp"

namespace gmjit {
namespace {

DeviceInfo device0() { return detail::query_device(0); }

struct Loaded {
  std::shared_ptr<const codegen::CompiledModule> compiled;
  std::unique_ptr<detail::Module> module;
  std::optional<detail::Kernel> kernel;
};

Loaded load(const codegen::GeneratedSource& source, const std::string& arch) {
  Loaded loaded;
  loaded.compiled = codegen::shared_compiler().compile(source, arch).module;
  loaded.module = std::make_unique<detail::Module>(loaded.compiled->cubin);
  loaded.kernel.emplace(loaded.module->kernel(loaded.compiled->lowered_name));
  return loaded;
}

// Verifies every valid configuration on NaN-poisoned, guarded outputs; returns how many ran.
std::size_t verify_every_config(const std::string& name, const Shape& shape) {
  const auto& kernel = templates::find_kernel(name);
  const DeviceInfo device = device0();
  detail::Context context(0);
  tuner::Harness harness(kernel, shape, "fp32", device, /*seed=*/static_cast<std::uint64_t>(shape.begin()->second));
  std::size_t ran = 0;
  for (const auto& config : templates::valid_configs(kernel, shape)) {
    SCOPED_TRACE(name + " " + format_assignments(shape) + " " + format_assignments(config));
    auto loaded = load(codegen::specialize(kernel, shape, "fp32", config), device.arch);
    const double error = harness.verify(*loaded.kernel, kernel.geometry(config, shape, templates::dtype_info("fp32")));
    EXPECT_LE(error, harness.tolerance());
    ++ran;
  }
  return ran;
}

using Size = std::pair<std::int64_t, std::int64_t>;

std::string size_name(const ::testing::TestParamInfo<Size>& info) {
  return std::to_string(info.param.first) + "x" + std::to_string(info.param.second);
}

const auto kSizes = ::testing::Values(Size{1, 1}, Size{1, 127}, Size{127, 1000}, Size{1000, 1000}, Size{4096, 4096});

class Grayscale : public ::testing::TestWithParam<Size> {};

TEST_P(Grayscale, EveryConfigMatchesTheReference) {
  GMJIT_REQUIRE_SM90();
  const Shape shape{{"h", GetParam().first}, {"w", GetParam().second}};
  const auto expected = templates::valid_configs(templates::find_kernel("grayscale"), shape).size();
  ASSERT_GT(expected, 0u);
  EXPECT_EQ(verify_every_config("grayscale", shape), expected);
  std::printf("[ verified ] %zu grayscale configurations at %s\n", expected, format_assignments(shape).c_str());
}

INSTANTIATE_TEST_SUITE_P(SM90, Grayscale, kSizes, size_name);

class Transpose : public ::testing::TestWithParam<Size> {};

TEST_P(Transpose, EveryConfigMatchesTheReference) {
  GMJIT_REQUIRE_SM90();
  const Shape shape{{"rows", GetParam().first}, {"cols", GetParam().second}};
  const auto expected = templates::valid_configs(templates::find_kernel("transpose"), shape).size();
  ASSERT_GT(expected, 0u);
  EXPECT_EQ(verify_every_config("transpose", shape), expected);
  std::printf("[ verified ] %zu transpose configurations at %s\n", expected, format_assignments(shape).c_str());
}

INSTANTIATE_TEST_SUITE_P(SM90, Transpose, kSizes, size_name);

// Transposing the other way round and non-square tiles are where row/column mix-ups show.
TEST(SM90_Transpose, TallAndWideShapesBothWays) {
  GMJIT_REQUIRE_SM90();
  for (const Size& size : {Size{3, 70000}, Size{70000, 3}, Size{65, 33}, Size{33, 65}}) {
    const Shape shape{{"rows", size.first}, {"cols", size.second}};
    EXPECT_EQ(verify_every_config("transpose", shape), 8u) << format_assignments(shape);
  }
}

// A copy kernel with transpose's signature, so the transpose harness times it on the same
// buffers: the bandwidth ceiling that memory-bound kernels are held to.
constexpr const char* kCopyHeader = R"(
__global__ void __launch_bounds__(256) copy_floats(const float* __restrict__ in, float* __restrict__ out,
                                                   long long rows, long long cols) {
  const long long n4 = rows * cols / 4;
  const long long stride = static_cast<long long>(gridDim.x) * 256;
  for (long long i = static_cast<long long>(blockIdx.x) * 256 + threadIdx.x; i < n4; i += stride) {
    reinterpret_cast<float4*>(out)[i] = __ldg(reinterpret_cast<const float4*>(in) + i);
  }
})";

// Device-to-device copy bandwidth in GB/s (bytes read + written), from a float4 copy of
// rows * cols floats (a multiple of 4).
double copy_gbps(const Shape& shape, const DeviceInfo& device, const tuner::MeasureOptions& options) {
  templates::register_header("test/copy_floats.cuh", kCopyHeader);
  codegen::GeneratedSource source;
  source.kernel = "copy_floats";
  source.header = "test/copy_floats.cuh";
  source.name_expression = "copy_floats";
  source.file_name = "copy_floats.cu";
  source.source = "#include \"test/copy_floats.cuh\"\n";
  auto loaded = load(source, device.arch);
  tuner::Harness harness(templates::find_kernel("transpose"), shape, "fp32", device, 1);
  LaunchGeometry geometry;
  geometry.grid[0] = static_cast<unsigned>(device.sm_count * 8);
  geometry.block[0] = 256;
  const double ms = harness.time(*loaded.kernel, geometry, options).median_ms;
  return 8.0 * static_cast<double>(shape.at("rows") * shape.at("cols")) / (ms * 1e6);
}

// Best bandwidth over every valid configuration, counting each tensor moved once.
double best_gbps(const std::string& name, const Shape& shape, const DeviceInfo& device,
                 const tuner::MeasureOptions& options, Config& best) {
  const auto& kernel = templates::find_kernel(name);
  const auto& fp32 = templates::dtype_info("fp32");
  tuner::Harness harness(kernel, shape, "fp32", device, 1);
  double bytes = 0;
  for (const auto& t : kernel.tensors(shape)) bytes += static_cast<double>(t.elements) * fp32.bytes;
  double best_ms = std::numeric_limits<double>::infinity();
  for (const auto& config : templates::valid_configs(kernel, shape)) {
    auto loaded = load(codegen::specialize(kernel, shape, "fp32", config), device.arch);
    const double ms = harness.time(*loaded.kernel, kernel.geometry(config, shape, fp32), options).median_ms;
    if (ms < best_ms) {
      best_ms = ms;
      best = config;
    }
  }
  return bytes / (best_ms * 1e6);
}

// The target of the memory-bound catalog: the best configuration reaches 90% of what a copy
// moves. Printed either way, so a miss says by how much and with which configuration.
TEST(SM90_CatalogBandwidth, BestConfigsReachNinetyPercentOfCopy) {
  GMJIT_REQUIRE_SM90();
  const DeviceInfo device = device0();
  detail::Context context(0);
  tuner::MeasureOptions options;
  options.max_seconds = 0.15;
  const double copy = copy_gbps({{"rows", 16384}, {"cols", 16384}}, device, options);
  std::printf("[ copy     ] %.0f GB/s\n", copy);
  for (const auto& [name, shape] : {std::pair<std::string, Shape>{"grayscale", {{"h", 16384}, {"w", 16384}}},
                                   std::pair<std::string, Shape>{"transpose", {{"rows", 16384}, {"cols", 16384}}},
                                   std::pair<std::string, Shape>{"transpose", {{"rows", 8192}, {"cols", 8192}}}}) {
    Config best;
    const double gbps = best_gbps(name, shape, device, options, best);
    std::printf("[ best     ] %s %s: %.0f GB/s (%.1f%% of copy) with %s\n", name.c_str(),
                format_assignments(shape).c_str(), gbps, 100 * gbps / copy, format_assignments(best).c_str());
    EXPECT_GE(gbps, 0.9 * copy) << name << " " << format_assignments(shape) << " best " << format_assignments(best);
  }
}

}  // namespace
}  // namespace gmjit
