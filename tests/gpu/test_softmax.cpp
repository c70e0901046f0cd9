#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "gpu_test_support.hpp"
#include "require_gpu.hpp"

namespace gmjit {
namespace {

using Case = std::tuple<std::string, std::int64_t, std::int64_t>;  // dtype, rows, cols

class Softmax : public ::testing::TestWithParam<Case> {};

// Every valid configuration against the double-precision reference (fresh random inputs,
// NaN-poisoned outputs, guard bytes past them).
TEST_P(Softmax, EveryConfigMatchesTheReference) {
  GMJIT_REQUIRE_SM90_OR_COMPILE_ONLY();
  const auto& [dtype, rows, cols] = GetParam();
  gpu_test::verify_every_config("softmax", dtype, {{"rows", rows}, {"cols", cols}},
                                static_cast<std::uint64_t>(rows * 131 + cols));
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
