#include <gtest/gtest.h>

#include "nvrtc/compile_support.hpp"
#include "templates/registry.hpp"

namespace gmjit {
namespace {

// With ptxas 13.0 a few warp-per-row streaming configurations still park one or two 8-byte
// values on the stack at under 64 registers (ptxas's choice, not register pressure); anything
// more means a thread's slice of the row itself went to memory.
TEST(SoftmaxCompile, NoConfigurationSpillsItsRowAtTheIssueShapes) {
  const auto& kernel = templates::find_kernel("softmax");
  const auto items = testing::every_valid_config(
      kernel, {"fp32", "bf16"},
      {Shape{{"rows", 4096}, {"cols", 32000}}, Shape{{"rows", 32768}, {"cols", 128}},
       Shape{{"rows", 2}, {"cols", 393216}}});
  codegen::Compiler compiler;
  const auto check = [](const testing::CompileItem&, const codegen::CompiledModule& module) {
    return testing::spills_beyond(module.resources, 16);
  };
  testing::compile_each(compiler, kernel, items, check);
}

}  // namespace
}  // namespace gmjit
