#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "core/kernel_args.hpp"
#include "gmjit/error.hpp"
#include "templates/registry.hpp"
#include "unit/templates_test_support.hpp"

namespace gmjit::templates {
namespace {

using testing::count_if_valid;
using testing::expect_names;
using testing::scalar_at;
using testing::shape;

Config config(std::int64_t strategy, std::int64_t block, std::int64_t elems, std::int64_t vec, std::int64_t cached) {
  return {{"strategy", strategy}, {"block", block}, {"elems", elems}, {"vec", vec}, {"cached", cached}};
}

class Norm : public ::testing::TestWithParam<std::string> {
 protected:
  const KernelDescriptor& kernel() const { return find_kernel(GetParam()); }
  bool layer() const { return GetParam() == "layernorm"; }
};

TEST(Norms, FollowSoftmaxInTheCatalog) {
  std::vector<std::string> names;
  for (const auto& k : catalog()) names.push_back(k.name);
  const auto softmax = std::find(names.begin(), names.end(), "softmax");
  ASSERT_NE(softmax, names.end());
  ASSERT_GE(names.end() - softmax, 3);
  EXPECT_EQ(softmax[1], "rmsnorm");
  EXPECT_EQ(softmax[2], "layernorm");
  EXPECT_FALSE(is_user_kernel("rmsnorm"));
  EXPECT_FALSE(is_user_kernel("layernorm"));
}

TEST_P(Norm, DescribesItself) {
  const auto& k = kernel();
  EXPECT_EQ(k.header, "gmjit/norm.cuh");
  testing::expect_row_kernel_description(k);
  EXPECT_EQ(all_configs(k).size(), 128u) << "the domains stay small enough to tune exhaustively";
  // `gmtune list` prints these: the fixed epsilon must be visible there.
  EXPECT_NE(k.summary.find("eps = 1e-5"), std::string::npos) << k.summary;
  EXPECT_NE(k.constraints_doc.find("eps = 1e-5"), std::string::npos) << k.constraints_doc;
  EXPECT_NE(k.summary.find(layer() ? "bias" : "mean(x^2)"), std::string::npos) << k.summary;
}

TEST_P(Norm, DefaultConfigServesEveryBenchmarkAndOddShape) {
  testing::expect_defaults_serve(kernel(), {shape(1, 4096), shape(128, 4096), shape(8192, 4096), shape(8192, 8192),
                                            shape(16384, 8192), shape(1, 1), shape(3, 127), shape(127, 1000),
                                            shape(5, 1000003), shape(2, 393216)});
  EXPECT_THROW(resolve_config(kernel(), {{"rows", 4}}, "bf16", {}), Error);
}

TEST_P(Norm, ValidConfigsPerShape) {
  const auto& k = kernel();
  testing::expect_row_access_rules(k);
  // 4096 columns cached: a block of block * elems >= 4096: (128, 32), (256, 16), (256, 32),
  // (512, 8..32), (1024, 4..32): 10, each with vec 0 and 1; a warp holds at most 1024.
  EXPECT_EQ(count_if_valid(k, shape(8192, 4096), [](const Config& c) { return c.at("cached") == 1; }), 20u);
  EXPECT_EQ(count_if_valid(k, shape(8192, 4096),
                           [](const Config& c) { return c.at("cached") == 1 && c.at("strategy") == 0; }),
            0u);
  // 8192 columns: (256, 32), (512, 16), (512, 32), (1024, 8), (1024, 16), (1024, 32).
  EXPECT_EQ(count_if_valid(k, shape(16384, 8192), [](const Config& c) { return c.at("cached") == 1; }), 12u);
  EXPECT_EQ(count_if_valid(k, shape(16384, 8192), [](const Config& c) { return c.at("cached") == 0; }), 64u);
  EXPECT_EQ(count_if_valid(k, shape(5, 1000003), [](const Config& c) { return c.at("cached") == 1; }), 0u);
  EXPECT_EQ(valid_configs(k, shape(5, 1000003)).size(), 32u);
}

TEST_P(Norm, ViolationsSayWhy) {
  testing::expect_row_violations_say_why(kernel(), shape(2, 8192), shape(2, 1000003), "bf16");
}

TEST_P(Norm, NameExpressionsPickTheWidestAlignedAccess) {
  const auto& k = kernel();
  testing::expect_row_access_names(k);
  const std::string n = "gmjit::" + GetParam();
  // 8 bf16 per 16-byte access at the benchmark shapes.
  expect_names(k, {
                      {config(1, 512, 8, 1, 1), shape(8192, 4096), "bf16", n + "<__nv_bfloat16, 512, 512, 8, 16, true>"},
                      {config(0, 256, 8, 1, 0), shape(128, 4096), "fp32", n + "<float, 32, 256, 8, 16, false>"},
                  });
}

TEST_P(Norm, GeometryAtEdgeSizes) {
  const auto& k = kernel();
  testing::expect_row_geometry_at_edge_sizes(k, "bf16");
  EXPECT_EQ(k.geometry(config(0, 256, 8, 1, 0), shape(128, 4096), dtype_info("bf16")).grid[0], 16u);
  testing::expect_block_per_row(k, config(1, 1024, 8, 1, 1), shape(16384, 8192), "bf16");
}

TEST_P(Norm, TensorsAndScalarsInArgumentOrder) {
  const auto& k = kernel();
  const auto tensors = k.tensors(shape(3, 127));
  std::vector<std::string> names;
  for (const auto& t : tensors) names.push_back(t.name);
  EXPECT_EQ(names, layer() ? (std::vector<std::string>{"x", "weight", "bias", "y"})
                           : (std::vector<std::string>{"x", "weight", "y"}));
  ASSERT_EQ(tensors.size(), layer() ? 4u : 3u);
  EXPECT_EQ(tensors.front().elements, 381);
  EXPECT_EQ(tensors[1].elements, 127);
  EXPECT_EQ(tensors[tensors.size() - 2].elements, 127);
  for (std::size_t i = 0; i + 1 < tensors.size(); ++i) EXPECT_FALSE(tensors[i].output) << tensors[i].name;
  EXPECT_TRUE(tensors.back().output);
  EXPECT_EQ(tensors.back().elements, 381);

  // The kernel's (long long rows, int cols, float eps).
  detail::KernelArgs args;
  k.add_scalars(args, shape(3, 393216));
  ASSERT_EQ(args.size(), 3u);
  EXPECT_EQ(scalar_at<long long>(args, 0), 3);
  EXPECT_EQ(scalar_at<int>(args, 1), 393216);
  EXPECT_EQ(scalar_at<float>(args, 2), 1e-5f);
}

TEST_P(Norm, WorkAndTolerance) {
  const auto& k = kernel();
  const auto& fp32 = dtype_info("fp32");
  const auto& bf16 = dtype_info("bf16");
  const double vectors = layer() ? 2.0 : 1.0;  // weight, and bias
  const auto cached = k.work(config(1, 1024, 8, 1, 1), shape(8192, 8192), bf16);
  EXPECT_DOUBLE_EQ(cached.bytes, (2.0 * 8192 * 8192 + vectors * 8192) * 2);
  EXPECT_EQ(cached.shared_bytes, 2 * 32 * (layer() ? 12 : 4));
  const auto streamed = k.work(config(1, 1024, 32, 1, 0), shape(8192, 8192), fp32);
  EXPECT_DOUBLE_EQ(streamed.bytes, (2.0 * 8192 * 8192 + vectors * 8192) * 4);
  // A warp per row keeps every row of 32 KB in flight at once, far beyond L2: x twice.
  const auto warps = k.work(config(0, 256, 32, 1, 0), shape(8192, 8192), fp32);
  EXPECT_DOUBLE_EQ(warps.bytes, (3.0 * 8192 * 8192 + vectors * 8192) * 4);
  EXPECT_EQ(warps.shared_bytes, 0);
  EXPECT_GT(cached.compute_efficiency, 0.0);
  EXPECT_LE(cached.compute_efficiency, 1.0);
  EXPECT_GT(k.work(config(1, 256, 32, 1, 1), shape(8, 8192), bf16).registers,
            k.work(config(1, 256, 4, 1, 1), shape(8, 8192), bf16).registers);
  EXPECT_DOUBLE_EQ(k.tolerance(fp32, shape(5, 1000003)), 1e-5);
  EXPECT_DOUBLE_EQ(k.tolerance(bf16, shape(5, 1000003)), 1e-2);
}

TEST(Norms, LayernormDoesMoreWorkThanRmsnorm) {
  const auto& bf16 = dtype_info("bf16");
  const Config c = config(1, 512, 8, 1, 1);
  const auto rms = find_kernel("rmsnorm").work(c, shape(8192, 4096), bf16);
  const auto layer = find_kernel("layernorm").work(c, shape(8192, 4096), bf16);
  EXPECT_DOUBLE_EQ(layer.bytes - rms.bytes, 4096.0 * 2) << "the bias";
  EXPECT_GT(layer.flops, rms.flops);
  EXPECT_GT(layer.shared_bytes, rms.shared_bytes);
}

INSTANTIATE_TEST_SUITE_P(Templates, Norm, ::testing::Values("rmsnorm", "layernorm"));

}  // namespace
}  // namespace gmjit::templates
