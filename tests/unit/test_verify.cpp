// The per-element bound beside the relative L2 error, on the host (check_output, which the
// simulated device verifies with) and in the descriptors' bounds; the device's compare kernel
// reduces to the same OutputCheck and is tested in the gpu tier (test_verify.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "templates/manifest.hpp"
#include "templates/registry.hpp"
#include "tuner/harness.hpp"

namespace gmjit {
namespace {

using templates::dtype_info;
using templates::ElementBound;

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// vector_add's fp16 inputs at n and their exact sums: what a correct kernel rounds once.
std::vector<double> vector_add_reference(std::int64_t n) {
  const auto& kernel = templates::find_kernel("vector_add");
  const Shape shape{{"n", n}};
  const auto& fp16 = dtype_info("fp16");
  const auto inputs = tuner::widen_inputs(kernel, shape, fp16, tuner::random_inputs(kernel, shape, fp16, 7));
  std::vector<double> sum(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < sum.size(); ++i) sum[i] = inputs[0][i] + inputs[1][i];
  return sum;
}

std::vector<unsigned char> rounded(const templates::DtypeInfo& dtype, const std::vector<double>& values) {
  std::vector<unsigned char> out(values.size() * dtype.bytes);
  for (std::size_t i = 0; i < values.size(); ++i) tuner::store_element(dtype, out.data(), static_cast<std::int64_t>(i), values[i]);
  return out;
}

TEST(Verify, AZeroTailThatPassesTheL2ErrorFailsTheElementBound) {
  const std::int64_t n = std::int64_t{1} << 24;
  const auto& fp16 = dtype_info("fp16");
  const auto reference = vector_add_reference(n);
  const ElementBound bound = templates::element_bound(templates::find_kernel("vector_add"), fp16, {{"n", n}});
  const double tolerance = templates::find_kernel("vector_add").tolerance(fp16, {{"n", n}});

  auto out = rounded(fp16, reference);
  const auto correct = tuner::check_output(fp16, out.data(), reference.data(), n, bound);
  EXPECT_EQ(correct.outside, 0) << "element " << correct.first << ": " << correct.value << " against " << correct.expected;
  EXPECT_LE(correct.l2_error, std::ldexp(1.0, -11)) << "one fp16 rounding";
  EXPECT_EQ(tuner::output_failure("c", n, correct, bound, tolerance), "");

  std::int64_t zeros_outside = 0;
  for (std::int64_t i = n - 12; i < n; ++i) {
    tuner::store_element(fp16, out.data(), i, 0.0);
    zeros_outside += std::abs(reference[static_cast<std::size_t>(i)]) > bound.atol / (1 - bound.rtol);
  }
  ASSERT_GT(zeros_outside, 0);
  const auto tail = tuner::check_output(fp16, out.data(), reference.data(), n, bound);
  // The relative L2 error alone lets it through: wrong_tail.cuh shows it stays below 2.1e-3 for
  // any inputs (wrong_tail.json's tolerance is 4e-3) and near 9e-4 for typical ones, under
  // vector_add's fp16 tolerance of 1e-3.
  EXPECT_LE(tail.l2_error, 2.1e-3);
  std::printf("[ l2       ] relative L2 error with 12 zeros at the end: %.3g\n", tail.l2_error);
  EXPECT_EQ(tail.outside, zeros_outside);
  EXPECT_GE(tail.first, n - 12);
  EXPECT_EQ(tail.value, 0.0);
  EXPECT_EQ(tail.expected, reference[static_cast<std::size_t>(tail.first)]);
  const std::string why = tuner::output_failure("c", n, tail, bound, tolerance);
  EXPECT_NE(why.find(std::to_string(zeros_outside) + " of 16777216 elements of c outside |out - ref| <= 0.001 + "
                     "0.001 |ref|; the first, element " + std::to_string(tail.first) + ", is 0 against "),
            std::string::npos)
      << why;
}

TEST(Verify, IntegersCompareExactly) {
  const auto& u32 = dtype_info("u32");
  EXPECT_EQ(templates::element_bound(templates::find_kernel("histogram"), u32, {{"n", 10}, {"contention", 0}}).atol, 0.0);
  std::vector<double> counts(256, 1e6);
  auto out = rounded(u32, counts);
  const ElementBound exact = templates::default_element_bound(u32);
  EXPECT_EQ(tuner::check_output(u32, out.data(), counts.data(), 256, exact).outside, 0);
  tuner::store_element(u32, out.data(), 77, 1e6 + 1);
  const auto check = tuner::check_output(u32, out.data(), counts.data(), 256, exact);
  EXPECT_EQ(check.outside, 1);
  EXPECT_EQ(check.first, 77);
  EXPECT_EQ(check.value, 1e6 + 1);
  // One count in 2.56e8 is far inside any L2 tolerance but 0, and the bound names it.
  EXPECT_LT(check.l2_error, 1e-5);
  EXPECT_NE(tuner::output_failure("counts", 256, check, exact, 0.0).find("element 77, is 1000001 against 1000000"),
            std::string::npos);
}

TEST(Verify, AnUnwrittenElementIsNamed) {
  const auto& fp32 = dtype_info("fp32");
  std::vector<double> reference{1.0, 2.0, 3.0, 4.0};
  auto out = rounded(fp32, reference);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(out.data() + 2 * 4, &nan, 4);
  const ElementBound bound = templates::default_element_bound(fp32);
  const auto check = tuner::check_output(fp32, out.data(), reference.data(), 4, bound);
  EXPECT_EQ(check.non_finite, 1);
  EXPECT_EQ(check.outside, 1);
  EXPECT_EQ(check.first, 2);
  const std::string why = tuner::output_failure("y", 4, check, bound, 1e-5);
  EXPECT_NE(why.find("1 of 4 elements of y are NaN or infinite"), std::string::npos) << why;
  EXPECT_NE(why.find("element 2, is nan against 3"), std::string::npos) << why;
}

TEST(Verify, EveryFloatDtypeAdmitsOneRoundingAndRejectsAWrongElement) {
  for (const std::string name : {"fp32", "fp16", "bf16"}) {
    SCOPED_TRACE(name);
    const auto& dtype = dtype_info(name);
    std::vector<double> reference;
    for (int i = 0; i < 100000; ++i) reference.push_back(std::ldexp(std::sin(0.37 * i), i % 7 - 3));
    auto out = rounded(dtype, reference);
    const ElementBound bound = templates::default_element_bound(dtype);
    EXPECT_EQ(tuner::check_output(dtype, out.data(), reference.data(), 100000, bound).outside, 0);
    tuner::store_element(dtype, out.data(), 5000, reference[5000] * 1.1);
    const auto check = tuner::check_output(dtype, out.data(), reference.data(), 100000, bound);
    EXPECT_EQ(check.outside, 1);
    EXPECT_EQ(check.first, 5000);
  }
}

TEST(Verify, DescriptorsScaleTheirBounds) {
  const auto& fp32 = dtype_info("fp32");
  const auto& sgemm = templates::find_kernel("sgemm");
  const auto small = templates::element_bound(sgemm, fp32, {{"m", 64}, {"n", 64}, {"k", 64}});
  const auto deep = templates::element_bound(sgemm, fp32, {{"m", 64}, {"n", 64}, {"k", 4096}});
  EXPECT_GT(deep.atol, small.atol) << "accumulation error grows with k";
  // Still far below one element's magnitude, about 0.36 sqrt(k) = 23.
  EXPECT_LT(deep.atol, 0.01);
  const auto& softmax = templates::find_kernel("softmax");
  const auto wide = templates::element_bound(softmax, fp32, {{"rows", 2}, {"cols", 393216}});
  EXPECT_LT(wide.atol, 1e-3 / 393216) << "softmax values average 1 / cols";
  EXPECT_EQ(templates::element_bound(templates::find_kernel("vector_add"), fp32, {{"n", 1}}).rtol,
            templates::default_element_bound(fp32).rtol);

  // A manifest's declared L2 tolerance loosens the dtype's bound, never tightens it.
  const std::string dir = std::string(GMJIT_SOURCE_DIR) + "/tests/data/wrong_tail/";
  const auto user = templates::parse_manifest(read_text(dir + "wrong_tail.json"), read_text(dir + "wrong_tail.cuh"));
  const auto fp16 = templates::element_bound(user, dtype_info("fp16"), {{"n", 100}});
  EXPECT_DOUBLE_EQ(fp16.atol, 4e-3);
  EXPECT_DOUBLE_EQ(fp16.rtol, 4e-3);
  const auto declared_tighter = templates::element_bound(user, fp32, {{"n", 100}});
  EXPECT_DOUBLE_EQ(declared_tighter.rtol, templates::default_element_bound(fp32).rtol);
}

}  // namespace
}  // namespace gmjit
