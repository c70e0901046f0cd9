#include <gtest/gtest.h>

#include "nvrtc/compile_support.hpp"
#include "templates/registry.hpp"

namespace gmjit {
namespace {

// As for softmax, a few bytes of stack are ptxas's choice: with ptxas 13.0 streamed layernorm
// parks up to 40 bytes of loop state (pointers, the running moments) even where 128 registers
// are allowed, once per row against the row's hundreds of bytes per thread, so streamed
// configurations may spill 48 bytes and cached ones, whose slice of the row is what would go,
// 16. Shapes: the benchmark's cached blocks of 16-byte accesses (4096 and 8192 columns), odd
// rows (single elements, every cached variant) and 4-byte (bf16) / 8-byte (fp32) rows.
class NormCompile : public ::testing::TestWithParam<std::string> {};

TEST_P(NormCompile, NoConfigurationSpillsItsRow) {
  const auto& kernel = templates::find_kernel(GetParam());
  const auto items = testing::every_valid_config(
      kernel, {"fp32", "bf16"},
      {Shape{{"rows", 16384}, {"cols", 8192}}, Shape{{"rows", 128}, {"cols", 4096}}, Shape{{"rows", 3}, {"cols", 127}},
       Shape{{"rows", 127}, {"cols", 1002}}});
  codegen::Compiler compiler;
  const auto check = [](const testing::CompileItem& item, const codegen::CompiledModule& module) {
    return testing::spills_beyond(module.resources, item.config.at("cached") != 0 ? 16 : 48);
  };
  testing::compile_each(compiler, kernel, items, check);
}

INSTANTIATE_TEST_SUITE_P(Templates, NormCompile, ::testing::Values("rmsnorm", "layernorm"));

}  // namespace
}  // namespace gmjit
