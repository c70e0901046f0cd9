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
#include "core/device.hpp"
#include "core/module.hpp"
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
}  // namespace
}  // namespace gmjit
