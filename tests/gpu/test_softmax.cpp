#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "codegen/compiler.hpp"
#include "gmjit/error.hpp"
#include "core/device.hpp"
#include "core/module.hpp"
#include "require_gpu.hpp"
#include "templates/registry.hpp"
#include "tuner/harness.hpp"

namespace gmjit {
namespace {

using Case = std::tuple<std::string, std::int64_t, std::int64_t>;  // dtype, rows, cols

class Softmax : public ::testing::TestWithParam<Case> {};

// Every valid configuration against the double-precision reference (fresh random inputs,
// NaN-poisoned outputs, guard bytes past them).
TEST_P(Softmax, EveryConfigMatchesTheReference) {
  GMJIT_REQUIRE_SM90();
  const auto& [dtype, rows, cols] = GetParam();
  const Shape shape{{"rows", rows}, {"cols", cols}};
  const auto& kernel = templates::find_kernel("softmax");
  const auto configs = templates::valid_configs(kernel, shape);
  ASSERT_FALSE(configs.empty());
  const DeviceInfo device = detail::query_device(0);
  detail::Context context(0);
  auto harness =
      std::make_unique<tuner::Harness>(kernel, shape, dtype, device, static_cast<std::uint64_t>(rows * 131 + cols));
  std::size_t ran = 0;
  for (const auto& config : configs) {
    SCOPED_TRACE(dtype + " " + format_assignments(shape) + " " + format_assignments(config));
    const auto source = codegen::specialize(kernel, shape, dtype, config);
    const auto compiled = codegen::shared_compiler().compile(source, device.arch).module;
    detail::Module module(compiled->cubin);
    detail::Kernel loaded = module.kernel(compiled->lowered_name);
    const double error = harness->verify(loaded, kernel.geometry(config, shape, templates::dtype_info(dtype)));
    EXPECT_LE(error, harness->tolerance()) << source.name_expression;
    ++ran;
  }
  EXPECT_EQ(ran, configs.size());
  std::printf("[ verified ] %zu softmax %s configurations at %s\n", ran, dtype.c_str(),
              format_assignments(shape).c_str());
}

// Single elements, odd rows, rows that are not whole chunks, one long row, and rows longer than
// any cached variant holds.
std::vector<Case> cases() {
  std::vector<Case> all;
  for (const char* dtype : {"fp32", "bf16"}) {
    for (const auto& [rows, cols] : std::vector<std::pair<std::int64_t, std::int64_t>>{
             {1, 1}, {3, 127}, {127, 1000}, {64, 8192}, {1, 131072}, {2, 393216}}) {
      all.emplace_back(dtype, rows, cols);
    }
  }
  return all;
}

INSTANTIATE_TEST_SUITE_P(SM90, Softmax, ::testing::ValuesIn(cases()), [](const ::testing::TestParamInfo<Case>& info) {
  return std::get<0>(info.param) + "_" + std::to_string(std::get<1>(info.param)) + "x" +
         std::to_string(std::get<2>(info.param));
});

}  // namespace
}  // namespace gmjit
