#include <gtest/gtest.h>

#include <set>

#include "codegen/compiler.hpp"
#include "gmjit/error.hpp"
#include "templates/registry.hpp"
#include "unit/templates_test_support.hpp"

namespace gmjit::templates {
namespace {

using testing::usage_message;

TEST(Catalog, EveryTemplateIsEmbeddedAndDescribed) {
  ASSERT_GE(catalog().size(), 2u);
  for (const auto& kernel : catalog()) {
    if (is_user_kernel(kernel.name)) continue;  // other tests register their own
    SCOPED_TRACE(kernel.name);
    const auto header = find_header(kernel.header);
    ASSERT_TRUE(header.has_value());
    EXPECT_NE(header->find("namespace gmjit"), std::string::npos);
    EXPECT_FALSE(kernel.problem_keys.empty());
    EXPECT_FALSE(kernel.dtypes.empty());
    for (const auto& key : kernel.problem_keys) EXPECT_EQ(key, [&] {
        std::string lower = key;
        for (auto& c : lower) c = static_cast<char>(std::tolower(c));
        return lower;
      }());
    EXPECT_EQ(kernel.default_config.size(), kernel.params.size());
    EXPECT_EQ(template_hash(kernel.header).size(), 16u);
  }
  EXPECT_TRUE(find_header(kReferenceHeader).has_value());
}

TEST(Catalog, UnknownKernelNamesTheKnownOnes) {
  try {
    find_kernel("sgemn");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::usage);
    EXPECT_NE(e.message().find("sgemn"), std::string::npos);
    EXPECT_NE(e.message().find("sgemm"), std::string::npos);
  }
}

TEST(Catalog, DefaultConfigsAreValidForOddShapes) {
  EXPECT_NO_THROW(resolve_config(find_kernel("vector_add"), {{"n", 1}}, "fp16", {}));
  EXPECT_NO_THROW(resolve_config(find_kernel("sgemm"), {{"m", 1}, {"n", 1}, {"k", 1}}, "fp32", {}));
  EXPECT_NO_THROW(resolve_config(find_kernel("sgemm"), {{"m", 127}, {"n", 1000}, {"k", 3000}}, "fp32", {}));
}

TEST(Catalog, BadRequestsNameTheOffendingToken) {
  const auto& sgemm = find_kernel("sgemm");
  const Shape square{{"m", 64}, {"n", 64}, {"k", 64}};
  EXPECT_NE(usage_message([&] { resolve_config(sgemm, {{"m", 64}, {"n", 64}}, "fp32", {}); }).find("'k'"),
            std::string::npos);
  EXPECT_NE(usage_message([&] { resolve_config(sgemm, {{"m", 64}, {"n", 64}, {"k", 64}, {"q", 1}}, "fp32", {}); })
                .find("q=1"),
            std::string::npos);
  EXPECT_NE(usage_message([&] { resolve_config(sgemm, {{"m", 0}, {"n", 64}, {"k", 64}}, "fp32", {}); }).find("m=0"),
            std::string::npos);
  EXPECT_NE(usage_message([&] { resolve_config(sgemm, square, "fp32", {{"bm", 48}}); }).find("bm=48"),
            std::string::npos);
  EXPECT_NE(usage_message([&] { resolve_config(sgemm, square, "fp32", {{"zz", 1}}); }).find("zz=1"),
            std::string::npos);
  EXPECT_NE(usage_message([&] { resolve_config(sgemm, square, "fp16", {}); }).find("fp16"), std::string::npos);
  // vec=1 is a constraint between the configuration and the problem.
  EXPECT_NE(usage_message([&] { resolve_config(sgemm, {{"m", 64}, {"n", 63}, {"k", 64}}, "fp32", {{"vec", 1}}); })
                .find("vec=1"),
            std::string::npos);
}

TEST(Catalog, ValidConfigsAreTheConstraintFilteredCrossProduct) {
  for (const auto& kernel : catalog()) {
    if (is_user_kernel(kernel.name)) continue;
    Shape shape;
    for (const auto& key : kernel.problem_keys) shape[key] = 512;
    for (const auto& key : kernel.flag_keys) shape[key] = 1;
    const auto all = all_configs(kernel);
    const auto valid = valid_configs(kernel, shape);
    std::size_t product = 1;
    for (const auto& p : kernel.params) product *= p.values.size();
    if (kernel.configurations) {
      EXPECT_LT(all.size(), product);  // gemm's two paths, checked in test_gemm.cpp
    } else {
      EXPECT_EQ(all.size(), product);
    }
    EXPECT_GT(valid.size(), 0u);
    EXPECT_LE(valid.size(), all.size());
    for (const auto& config : valid) EXPECT_EQ(kernel.violation(config, shape), "");
  }
}

// A configuration recorded before a parameter existed (gemm's tma_store, added in the nineteenth
// session) names the one it ran as once the parameter takes its default; what it names stays.
TEST(Catalog, WithDefaultsCompletesAnOlderConfiguration) {
  const auto& gemm = find_kernel("gemm");
  Config recorded = gemm.default_config;
  recorded.erase("tma_store");
  recorded["wgmma"] = 1, recorded["bm"] = 64;
  const Config completed = with_defaults(gemm, recorded);
  EXPECT_EQ(completed.size(), gemm.params.size());
  EXPECT_EQ(completed.at("tma_store"), 0);
  EXPECT_EQ(completed.at("wgmma"), 1);
  EXPECT_EQ(completed.at("bm"), 64);
  EXPECT_EQ(with_defaults(gemm, completed), completed);
}

TEST(Catalog, ReachableHeadersFollowProjectIncludesOnly) {
  register_header("test/leaf.cuh", "#pragma once\n#include <cuda_fp16.h>\n");
  register_header("test/root.cuh", "#include \"test/leaf.cuh\"\n#include \"test/leaf.cuh\"\n");
  const auto reached = reachable_headers("test/root.cuh");
  ASSERT_EQ(reached.size(), 2u);
  EXPECT_EQ(reached[0], "test/root.cuh");
  EXPECT_EQ(reached[1], "test/leaf.cuh");
  const std::string before = template_hash("test/root.cuh");
  register_header("test/leaf.cuh", "#pragma once\n#include <cuda_fp16.h>\n ");
  EXPECT_NE(template_hash("test/root.cuh"), before) << "a byte in an included header must change the hash";
}

TEST(Specialize, GeneratedSourceIsTheIncludePlusAFewLines) {
  const auto& sgemm = find_kernel("sgemm");
  const Shape shape{{"m", 256}, {"n", 256}, {"k", 256}};
  Config config = sgemm.default_config;
  config["vec"] = 1;
  const auto generated = codegen::specialize(sgemm, shape, "fp32", config);
  EXPECT_EQ(generated.name_expression, "gmjit::sgemm<64, 64, 8, 4, 4, true, true>");
  EXPECT_NE(generated.source.find("#include \"gmjit/sgemm.cuh\""), std::string::npos);
  EXPECT_LE(std::count(generated.source.begin(), generated.source.end(), '\n'), 4);
  const auto uneven = codegen::specialize(sgemm, {{"m", 100}, {"n", 256}, {"k", 256}}, "fp32", config);
  EXPECT_EQ(uneven.name_expression, "gmjit::sgemm<64, 64, 8, 4, 4, true, false>");
  const auto add = codegen::specialize(find_kernel("vector_add"), {{"n", 10}}, "fp16",
                                       find_kernel("vector_add").default_config);
  EXPECT_EQ(add.name_expression, "gmjit::vector_add<__half, 256, 4, 16>");
}

TEST(PtxasReport, ParsesTheBlockOfTheNamedKernel) {
  const std::string log =
      "ptxas info    : 0 bytes gmem\n"
      "ptxas info    : Compiling entry function '_Z5otherv' for 'sm_90a'\n"
      "ptxas info    : Function properties for _Z5otherv\n"
      "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 8 registers, 360 bytes cmem[0]\n"
      "ptxas info    : Compiling entry function '_Z1kILi128EEvPf' for 'sm_90a'\n"
      "ptxas info    : Function properties for _Z1kILi128EEvPf\n"
      "ptxas         .     24 bytes stack frame, 16 bytes spill stores, 12 bytes spill loads\n"
      "ptxas info    : Used 255 registers, used 1 barriers, 8704 bytes smem, 380 bytes cmem[0]\n";
  const ResourceUsage usage = codegen::parse_ptxas_report(log, "_Z1kILi128EEvPf");
  EXPECT_EQ(usage.registers, 255);
  EXPECT_EQ(usage.barriers, 1);
  EXPECT_EQ(usage.stack_bytes, 24);
  EXPECT_EQ(usage.spill_store_bytes, 16);
  EXPECT_EQ(usage.spill_load_bytes, 12);
  EXPECT_EQ(usage.shared_bytes, 8704);
  EXPECT_EQ(usage.constant_bytes, 380);
  EXPECT_EQ(codegen::parse_ptxas_report(log, "_Z5otherv").registers, 8);
}

}  // namespace
}  // namespace gmjit::templates
