// The memory-bound catalog kernels on the GPU: every valid configuration of grayscale and
// transpose against its double-precision reference at sizes that leave partial tiles, partial
// quads and single elements.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>

#include "gpu_test_support.hpp"
#include "require_gpu.hpp"

namespace gmjit {
namespace {

using gpu_test::verify_every_config;

using Size = std::pair<std::int64_t, std::int64_t>;

std::string size_name(const ::testing::TestParamInfo<Size>& info) {
  return std::to_string(info.param.first) + "x" + std::to_string(info.param.second);
}

const auto kSizes = ::testing::Values(Size{1, 1}, Size{1, 127}, Size{127, 1000}, Size{1000, 1000}, Size{4096, 4096});

class Grayscale : public ::testing::TestWithParam<Size> {};

TEST_P(Grayscale, EveryConfigMatchesTheReference) {
  GMJIT_REQUIRE_SM90_OR_COMPILE_ONLY();
  verify_every_config("grayscale", "fp32", {{"h", GetParam().first}, {"w", GetParam().second}});
}

INSTANTIATE_TEST_SUITE_P(SM90, Grayscale, kSizes, size_name);

class Transpose : public ::testing::TestWithParam<Size> {};

TEST_P(Transpose, EveryConfigMatchesTheReference) {
  GMJIT_REQUIRE_SM90_OR_COMPILE_ONLY();
  verify_every_config("transpose", "fp32", {{"rows", GetParam().first}, {"cols", GetParam().second}});
}

INSTANTIATE_TEST_SUITE_P(SM90, Transpose, kSizes, size_name);

// Transposing the other way round and non-square tiles are where row/column mix-ups show.
TEST(SM90_Transpose, TallAndWideShapesBothWays) {
  GMJIT_REQUIRE_SM90_OR_COMPILE_ONLY();
  for (const Size& size : {Size{3, 70000}, Size{70000, 3}, Size{65, 33}, Size{33, 65}}) {
    const Shape shape{{"rows", size.first}, {"cols", size.second}};
    EXPECT_EQ(verify_every_config("transpose", "fp32", shape), 8u) << format_assignments(shape);
  }
}

}  // namespace
}  // namespace gmjit
