// The public face of the LLVM code generator: gmjit::compile_expression and `gmtune compile
// --expr`, compiled for sm_90a without a GPU (LLVM and nvJitLink need none).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

#include "cli_runner.hpp"
#include "gmjit/error.hpp"
#include "gmjit/expression.hpp"
#include "temp_dir.hpp"

namespace gmjit {
namespace {

ExpressionRequest rmsnorm_request() {
  ExpressionRequest request;
  request.expression = "w: bf16[cols]; y = x * rsqrt(mean(x * x) + 1e-6) * w";
  request.dtype = "bf16";
  request.shape = {{"rows", 4096}, {"cols", 4096}};
  request.arch = "sm_90a";
  return request;
}

Error error_of(const ExpressionRequest& request) {
  try {
    compile_expression(request);
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no error for " << request.expression;
  return Error(ErrorKind::cache, 0, "none");
}

TEST(ExpressionApi, CompilesRmsnormToACubinDescribingItsTensors) {
  const auto r = compile_expression(rmsnorm_request());
  EXPECT_EQ(r.canonical, "w: bf16[cols]; x: bf16[rows, cols]; y = ((x * rsqrt((mean((x * x)) + 1e-06))) * w)");
  ASSERT_EQ(r.tensors.size(), 3u);
  EXPECT_EQ(r.tensors[0].name, "w");
  EXPECT_TRUE(r.tensors[0].row_vector);
  EXPECT_EQ(r.tensors[0].elements, 4096);
  EXPECT_EQ(r.tensors[1].name, "x");
  EXPECT_EQ(r.tensors[1].elements, 4096 * 4096);
  EXPECT_EQ(r.tensors[2].name, "y");
  EXPECT_TRUE(r.tensors[2].output);
  EXPECT_EQ(r.tensors[2].dtype, "bf16");
  EXPECT_EQ(r.config, (Config{{"block", 256}, {"items", 4}, {"vector", 1}, {"threads_per_row", 32}}));
  EXPECT_NE(r.ptx.find(".target sm_90a"), std::string::npos);
  EXPECT_NE(r.ptx.find(".entry " + r.kernel_name), std::string::npos);
  EXPECT_NE(r.llvm_ir.find("ptx_kernel"), std::string::npos);
  ASSERT_GE(r.cubin.size(), 4u);
  EXPECT_EQ(std::string(r.cubin.data() + 1, 3), "ELF");
  EXPECT_GT(r.resources.registers, 0);
  EXPECT_EQ(r.geometry.block[0], 256u);
  // A warp per row: 8 rows a block.
  EXPECT_EQ(r.geometry.grid[0], 4096u / 8);
  EXPECT_EQ(r.compile_key.size(), 32u);  // the 128-bit key of every compile
}

TEST(ExpressionApi, TheCompileKeyFollowsExpressionParametersAndArchOnly) {
  const auto base = compile_expression(rmsnorm_request());
  EXPECT_EQ(compile_expression(rmsnorm_request()).compile_key, base.compile_key);
  auto other_shape = rmsnorm_request();
  other_shape.shape = {{"rows", 3}, {"cols", 4096}};
  EXPECT_EQ(compile_expression(other_shape).compile_key, base.compile_key) << "sizes are arguments, not code";
  auto spaced = rmsnorm_request();
  spaced.expression = "w: bf16[cols]\ny = x*rsqrt(mean(x*x) + 1e-6)*w  # the same";
  EXPECT_EQ(compile_expression(spaced).compile_key, base.compile_key) << "the canonical form is keyed";
  auto vector = rmsnorm_request();
  vector.config = {{"vector", 4}};
  EXPECT_NE(compile_expression(vector).compile_key, base.compile_key);
  auto eps = rmsnorm_request();
  eps.expression = "w: bf16[cols]; y = x * rsqrt(mean(x * x) + 1e-5) * w";
  EXPECT_NE(compile_expression(eps).compile_key, base.compile_key);
  auto arch = rmsnorm_request();
  arch.arch = "sm_90";
  EXPECT_NE(compile_expression(arch).compile_key, base.compile_key);
}

TEST(ExpressionApi, BadRequestsAreUsageErrorsNamingTheProblem) {
  auto request = rmsnorm_request();
  request.expression = "y = silux(x)";
  Error e = error_of(request);
  EXPECT_EQ(e.kind(), ErrorKind::usage);
  EXPECT_NE(e.message().find("column 5: unknown function 'silux'"), std::string::npos) << e.message();

  request = rmsnorm_request();
  request.shape = {{"rows", 8}};
  e = error_of(request);
  EXPECT_NE(e.message().find("missing problem key 'cols'"), std::string::npos) << e.message();

  request = rmsnorm_request();
  request.shape = {{"rows", 8}, {"cols", 8}, {"n", 3}};
  e = error_of(request);
  EXPECT_NE(e.message().find("no problem key 'n'"), std::string::npos) << e.message();

  request = rmsnorm_request();
  request.config = {{"warps", 2}};
  e = error_of(request);
  EXPECT_NE(e.message().find("no parameter 'warps'"), std::string::npos) << e.message();

  request = rmsnorm_request();
  request.config = {{"vector", 3}};
  e = error_of(request);
  EXPECT_NE(e.message().find("outside the domain of vector"), std::string::npos) << e.message();

  request = rmsnorm_request();
  request.shape = {{"rows", 8}, {"cols", 4094}};
  request.config = {{"vector", 4}};
  e = error_of(request);
  EXPECT_EQ(e.kind(), ErrorKind::usage);
  EXPECT_NE(e.message().find("vector=4"), std::string::npos) << e.message();

  request = rmsnorm_request();
  request.dtype = "fp64";
  EXPECT_EQ(error_of(request).kind(), ErrorKind::usage);
}

class ExpressionCli : public testing::TempDirTest {
 protected:
  ExpressionCli() : TempDirTest("gmjit-expr-cli") {}
};

TEST_F(ExpressionCli, CompileExprWritesIrPtxCubinAndResources) {
  const auto out = dir_ / "silu";
  const auto run = testing::run_gmtune("compile --expr 'out = silu(a) * b' --dtype fp16 --shape rows=1000,cols=4096 "
                                       "--config vector=4,items=2 --arch sm_90a --out " + out.string());
  ASSERT_EQ(run.status, 0) << run.err;
  const auto resources = nlohmann::json::parse(testing::read_text(out / "resources.json"));
  const std::string stem = resources.at("kernel").get<std::string>();
  for (const char* suffix : {".ll", ".ptx", ".cubin"}) {
    EXPECT_TRUE(std::filesystem::is_regular_file(out / (stem + suffix))) << suffix;
  }
  EXPECT_EQ(resources.at("expression"), "a: fp16[rows, cols]; b: fp16[rows, cols]; out = (silu(a) * b)");
  EXPECT_EQ(resources.at("config").at("vector"), 4);
  EXPECT_EQ(resources.at("tensors").size(), 3u);
  EXPECT_EQ(resources.at("ptx_isa"), "8.5");
  EXPECT_NE(testing::read_text(out / (stem + ".ptx")).find("ld.global"), std::string::npos);

  const auto json = testing::run_gmtune("compile --expr 'y = exp(x - max(x)) / sum(exp(x - max(x)))' "
                                        "--shape rows=7,cols=33 --config threads_per_row=256 --arch sm_90a");
  ASSERT_EQ(json.status, 0) << json.err;
  const auto softmax = nlohmann::json::parse(json.out);
  EXPECT_EQ(softmax.at("tensors").at(0).at("dtype"), "fp32");
  // A block per row combines its 8 warps' partials in shared memory: a few words, not the
  // system's 1 KiB reserve that the cubin's section also counts.
  EXPECT_GT(softmax.at("shared_bytes").get<int>(), 0);
  EXPECT_LT(softmax.at("shared_bytes").get<int>(), 1024);

  const auto bad = testing::run_gmtune("compile --expr 'y = x +' --shape rows=7,cols=33 --arch sm_90a");
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.err.find("column"), std::string::npos) << bad.err;
  const auto both = testing::run_gmtune("compile softmax --expr 'y = x' --shape rows=7,cols=33 --arch sm_90a");
  EXPECT_NE(both.status, 0);
  const auto neither = testing::run_gmtune("compile --shape rows=7,cols=33 --arch sm_90a");
  EXPECT_NE(neither.status, 0);
  EXPECT_NE(neither.err.find("--expr"), std::string::npos) << neither.err;
}

}  // namespace
}  // namespace gmjit
