#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>

#include "codegen/compiler.hpp"
#include "gmjit/error.hpp"
#include "core/module.hpp"
#include "templates/registry.hpp"

namespace gmjit::templates {
namespace {

Shape shape(std::int64_t rows, std::int64_t cols) { return {{"rows", rows}, {"cols", cols}}; }

Config config(std::int64_t strategy, std::int64_t block, std::int64_t elems, std::int64_t vec, std::int64_t cached) {
  return {{"strategy", strategy}, {"block", block}, {"elems", elems}, {"vec", vec}, {"cached", cached}};
}

std::size_t count_if_valid(const KernelDescriptor& k, const Shape& s, const std::function<bool(const Config&)>& predicate) {
  std::size_t n = 0;
  for (const auto& c : valid_configs(k, s)) n += predicate(c) ? 1 : 0;
  return n;
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
  EXPECT_EQ(k.problem_keys, (std::vector<std::string>{"rows", "cols"}));
  EXPECT_EQ(k.dtypes, (std::vector<std::string>{"fp32", "bf16"}));
  EXPECT_EQ(k.header, "gmjit/norm.cuh");
  ASSERT_TRUE(find_header(k.header).has_value());
  // bf16 comes with the row kernels' shared accesses, which the template's key covers too.
  const auto reached = reachable_headers(k.header);
  EXPECT_NE(std::find(reached.begin(), reached.end(), "gmjit/row_access.cuh"), reached.end());
  EXPECT_NE(find_header("gmjit/row_access.cuh")->find("cuda_bf16.h"), std::string::npos);
  EXPECT_EQ(all_configs(k).size(), 128u) << "the domains stay small enough to tune exhaustively";
  EXPECT_TRUE(k.work);
  // `gmtune list` prints these: the fixed epsilon must be visible there.
  EXPECT_NE(k.summary.find("eps = 1e-5"), std::string::npos) << k.summary;
  EXPECT_NE(k.constraints_doc.find("eps = 1e-5"), std::string::npos) << k.constraints_doc;
  EXPECT_NE(k.summary.find(layer() ? "bias" : "mean(x^2)"), std::string::npos) << k.summary;
}

TEST_P(Norm, DefaultConfigServesEveryBenchmarkAndOddShape) {
  for (const auto& s : {shape(1, 4096), shape(128, 4096), shape(8192, 4096), shape(8192, 8192), shape(16384, 8192),
                        shape(1, 1), shape(3, 127), shape(127, 1000), shape(5, 1000003), shape(2, 393216)}) {
    for (const char* dtype : {"fp32", "bf16"}) {
      EXPECT_NO_THROW(resolve_config(kernel(), s, dtype, {})) << format_assignments(s) << " " << dtype;
    }
  }
  EXPECT_THROW(resolve_config(kernel(), shape(4, 4), "fp16", {}), Error);
  EXPECT_THROW(resolve_config(kernel(), {{"rows", 4}}, "bf16", {}), Error);
}

TEST_P(Norm, ValidConfigsPerShape) {
  const auto& k = kernel();
  // Odd cols: single-element accesses, which vec=1 compiles to; every register-cached variant
  // holds 127 (a warp of 4 elements holds 128).
  EXPECT_EQ(valid_configs(k, shape(3, 127)).size(), 64u);
  EXPECT_EQ(count_if_valid(k, shape(3, 127), [](const Config& c) { return c.at("vec") == 0; }), 0u);
  EXPECT_EQ(valid_configs(k, shape(1, 1)).size(), 64u);
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
  EXPECT_EQ(k.violation(config(0, 128, 32, 1, 1), shape(1, 1024)), "");
  EXPECT_NE(k.violation(config(0, 128, 32, 1, 1), shape(1, 1026)), "");
}

TEST_P(Norm, ViolationsSayWhy) {
  const auto& k = kernel();
  const std::string odd = k.violation(config(1, 256, 8, 0, 0), shape(3, 127));
  EXPECT_NE(odd.find("vec=0"), std::string::npos) << odd;
  EXPECT_NE(odd.find("cols=127"), std::string::npos) << odd;
  const std::string long_row = k.violation(config(1, 256, 16, 1, 1), shape(2, 8192));
  EXPECT_NE(long_row.find("cached=1"), std::string::npos) << long_row;
  EXPECT_NE(long_row.find("4096"), std::string::npos) << long_row;  // 256 x 16, what fits
  EXPECT_NE(long_row.find("cols=8192"), std::string::npos) << long_row;
  EXPECT_NE(k.violation(config(1, 256, 8, 0, 0), shape(1, std::int64_t{1} << 30)).find("2^30"), std::string::npos);
  try {
    resolve_config(k, shape(2, 1000003), "bf16", {{"cached", 1}});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::usage);
    EXPECT_NE(e.message().find("cached=1"), std::string::npos) << e.message();
  }
}

TEST_P(Norm, NameExpressionsPickTheWidestAlignedAccess) {
  const auto& k = kernel();
  const std::string n = "gmjit::" + GetParam();
  const auto& fp32 = dtype_info("fp32");
  const auto& bf16 = dtype_info("bf16");
  // 8 bf16 per 16-byte access at the benchmark shapes.
  EXPECT_EQ(k.name_expression(config(1, 512, 8, 1, 1), shape(8192, 4096), bf16),
            n + "<__nv_bfloat16, 512, 512, 8, 16, true>");
  EXPECT_EQ(k.name_expression(config(0, 256, 8, 1, 0), shape(128, 4096), fp32), n + "<float, 32, 256, 8, 16, false>");
  // Four bf16 elements per thread are 8 bytes: the access never outgrows a thread's slice.
  EXPECT_EQ(k.name_expression(config(0, 128, 4, 1, 1), shape(8, 64), bf16), n + "<__nv_bfloat16, 32, 128, 4, 8, true>");
  // 1002 bf16 are 2004 bytes (4-byte rows), as fp32 8016 bytes (16).
  EXPECT_EQ(k.name_expression(config(1, 256, 8, 1, 0), shape(127, 1002), bf16),
            n + "<__nv_bfloat16, 256, 256, 8, 4, false>");
  EXPECT_EQ(k.name_expression(config(1, 256, 8, 1, 0), shape(127, 1002), fp32), n + "<float, 256, 256, 8, 8, false>");
  // vec=0 is one element per access, and so is vec=1 for an odd cols.
  EXPECT_EQ(k.name_expression(config(1, 1024, 32, 0, 1), shape(3, 128), bf16),
            n + "<__nv_bfloat16, 1024, 1024, 32, 2, true>");
  EXPECT_EQ(k.name_expression(config(1, 1024, 32, 1, 1), shape(3, 127), bf16),
            n + "<__nv_bfloat16, 1024, 1024, 32, 2, true>");
  EXPECT_EQ(k.name_expression(config(1, 1024, 32, 1, 1), shape(3, 127), fp32), n + "<float, 1024, 1024, 32, 4, true>");
  const auto generated = codegen::specialize(k, shape(3, 127), "bf16", k.default_config);
  EXPECT_NE(generated.source.find("#include \"gmjit/norm.cuh\""), std::string::npos);
  EXPECT_EQ(codegen::specialize_reference(k, shape(3, 127), "bf16").name_expression,
            "gmjit::reference::" + GetParam() + "<__nv_bfloat16>");
}

TEST_P(Norm, GeometryAtEdgeSizes) {
  const auto& k = kernel();
  const auto& bf16 = dtype_info("bf16");
  auto g = k.geometry(config(0, 256, 8, 0, 1), shape(1, 1), bf16);
  EXPECT_EQ(g.grid[0], 1u);
  EXPECT_EQ(g.block[0], 256u);
  EXPECT_EQ(k.geometry(config(0, 256, 8, 1, 0), shape(128, 4096), bf16).grid[0], 16u);
  EXPECT_EQ(k.geometry(config(0, 1024, 8, 0, 1), shape(33, 128), bf16).grid[0], 2u);
  g = k.geometry(config(1, 1024, 8, 1, 1), shape(16384, 8192), bf16);
  EXPECT_EQ(g.grid[0], 16384u);
  EXPECT_EQ(g.block[0], 1024u);
  EXPECT_EQ(g.dynamic_shared_bytes, 0u);
  EXPECT_EQ(k.geometry(config(1, 128, 8, 0, 0), shape(std::int64_t{1} << 32, 1), bf16).grid[0], 2147483647u);
  EXPECT_EQ(k.reference_geometry(shape(100000, 3)).grid[0], 65535u);
  EXPECT_EQ(k.reference_geometry(shape(3, 100000)).block[0], 256u);
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
  long long rows = 0;
  int cols = 0;
  float eps = 0;
  std::memcpy(&rows, args.pointers()[0], sizeof rows);
  std::memcpy(&cols, args.pointers()[1], sizeof cols);
  std::memcpy(&eps, args.pointers()[2], sizeof eps);
  EXPECT_EQ(rows, 3);
  EXPECT_EQ(cols, 393216);
  EXPECT_EQ(eps, 1e-5f);
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
