#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "nvrtc/compile_support.hpp"
#include "templates/registry.hpp"

namespace gmjit {
namespace {

Shape gemm_shape(std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t trans_b) {
  return {{"m", m}, {"n", n}, {"k", k}, {"trans_b", trans_b}};
}

// Every valid skinny configuration (path=1) of these shapes: m = 1 (decode) and m = 16 with
// 16-byte loads, m = 5 with scalar ones (k and n odd), both B layouts. Split-K is valid at all of
// them; a split is the grid's depth, so its configurations share the unsplit one's compile.
std::vector<testing::CompileItem> skinny_items(const std::vector<std::string>& dtypes) {
  std::vector<Shape> shapes;
  for (std::int64_t trans_b : {0, 1}) {
    shapes.push_back(gemm_shape(1, 4096, 4096, trans_b));
    shapes.push_back(gemm_shape(16, 4096, 4096, trans_b));
    shapes.push_back(gemm_shape(5, 4095, 4093, trans_b));
  }
  const auto& kernel = templates::find_kernel("gemm");
  std::vector<testing::CompileItem> items;
  for (const auto& item : testing::every_valid_config(kernel, dtypes, shapes)) {
    if (item.config.at("path") == 1) items.push_back(item);
  }
  return items;
}

// gemm_skinny alone, through its own header.
void compile_skinny(const std::string& arch, const std::vector<std::string>& dtypes) {
  const auto& kernel = templates::find_kernel("gemm");
  const auto items = skinny_items(dtypes);
  ASSERT_FALSE(items.empty());
  codegen::Compiler compiler;
  // The H200 (sm_90a) gets no spill at all (the one scalar-path kernel that spilled 24 bytes is
  // not a valid configuration). For sm_80, ptxas 13.0 parks 8-24 bytes in a few m > 4
  // configurations (at most 214 registers there: its choice, not the 255 limit); the kernels stay
  // correct, and a slice of the accumulators in memory would take far more.
  const int limit = arch == "sm_90a" ? 0 : 32;
  const auto check = [limit](const testing::CompileItem&, const codegen::CompiledModule& module) {
    return testing::spills_beyond(module.resources, limit);
  };
  const auto own_header = [](codegen::GeneratedSource& source) {
    const std::string from = "#include \"" + source.header + "\"";
    const std::string to = "#include \"gmjit/gemm_skinny.cuh\"";
    source.source.replace(source.source.find(from), from.size(), to);
    source.header = "gmjit/gemm_skinny.cuh";
  };
  testing::compile_each(compiler, kernel, items, check, arch, own_header);
}

// sm_90a in both dtypes; the older targets in one each, which the same code paths serve.
TEST(GemmSkinnyCompile, EveryValidConfigForSm90a) { compile_skinny("sm_90a", {"bf16", "fp16"}); }
TEST(GemmSkinnyCompile, EveryValidConfigForSm80) { compile_skinny("sm_80", {"bf16"}); }
TEST(GemmSkinnyCompile, EveryValidConfigForSm89) { compile_skinny("sm_89", {"fp16"}); }

// The catalog's own path (gmjit/gemm_kernels.cuh, which includes gemm.cuh and gemm_skinny.cuh):
// the default configuration (path 0, gemm_mma) and a skinny one at one shape per dtype and layout.
TEST(GemmCompile, DefaultConfigThroughTheCatalog) {
  const auto& kernel = templates::find_kernel("gemm");
  std::vector<testing::CompileItem> items;
  for (const char* dtype : {"bf16", "fp16"}) {
    for (std::int64_t trans_b : {0, 1}) {
      items.push_back({dtype, gemm_shape(512, 512, 512, trans_b), kernel.default_config});
      Config skinny = kernel.default_config;
      skinny["path"] = 1;
      items.push_back({dtype, gemm_shape(4, 512, 512, trans_b), skinny});
    }
  }
  codegen::Compiler compiler;
  testing::compile_each(compiler, kernel, items, [](const testing::CompileItem&, const codegen::CompiledModule&) {
    return std::string();
  });
}

// Every tile, warp layout and stage count the descriptor accepts (group_m=1, split_k=1) is one
// gemm_mma's static_asserts accept too: the descriptor's mirror of mma_config_violation_code
// admits nothing the kernel refuses.
TEST(GemmCompile, EveryValidMmaTileThroughTheCatalog) {
  const auto& kernel = templates::find_kernel("gemm");
  std::vector<testing::CompileItem> items;
  const Shape shape = gemm_shape(512, 512, 512, 1);
  for (const auto& config : templates::valid_configs(kernel, shape)) {
    if (config.at("path") == 0 && config.at("wgmma") == 0 && config.at("group_m") == 1 && config.at("split_k") == 1) {
      items.push_back({"bf16", shape, config});
    }
  }
  EXPECT_EQ(items.size(), 206u);
  codegen::Compiler compiler;
  testing::compile_each(compiler, kernel, items, [](const testing::CompileItem&, const codegen::CompiledModule&) {
    return std::string();
  });
}

}  // namespace
}  // namespace gmjit
