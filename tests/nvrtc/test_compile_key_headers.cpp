// The compile key reads the headers a template reaches from a per-process memo (issue 15, item
// 11); registering a header the template includes must still change the key, and registering
// the old text back must give the old key.
#include <gtest/gtest.h>

#include <string>

#include "codegen/compiler.hpp"
#include "templates/registry.hpp"

namespace gmjit {
namespace {

TEST(CompileKeyHeaders, FollowsEveryRegistrationOfAnIncludedHeader) {
  const std::string top = "gmjit_test/compile_key_top.cuh";
  const std::string leaf = "gmjit_test/compile_key_leaf.cuh";
  templates::register_header(leaf, "#define LEAF 1\n");
  templates::register_header(top, "#include \"gmjit_test/compile_key_leaf.cuh\"\n__global__ void k() {}\n");
  codegen::GeneratedSource source;
  source.kernel = "k";
  source.dtype = "fp32";
  source.header = top;
  source.name_expression = "k";
  source.file_name = "k.cu";
  source.source = "#include \"gmjit_test/compile_key_top.cuh\"\n";
  const std::string before = codegen::compile_key(source, "sm_90a");
  EXPECT_EQ(codegen::compile_key(source, "sm_90a"), before);

  templates::register_header(leaf, "#define LEAF 2\n");
  const std::string edited = codegen::compile_key(source, "sm_90a");
  EXPECT_NE(edited, before);

  templates::register_header(leaf, "#define LEAF 1\n");
  EXPECT_EQ(codegen::compile_key(source, "sm_90a"), before);
  EXPECT_NE(codegen::compile_key(source, "sm_80"), before);
}

}  // namespace
}  // namespace gmjit
