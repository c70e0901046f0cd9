// Expressions registered as catalog kernels (gmjit::register_expression): described, validated,
// compiled through the same compile key as compile_expression, swept from a shapes file's "expr",
// tuned end to end through the real worker process on the simulated device (LLVM compiles, no
// GPU), and reached from the C API and `gmtune tune --expr`.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <string>

#include "cli_runner.hpp"
#include "gmjit/compile.hpp"
#include "gmjit/error.hpp"
#include "gmjit/expression.hpp"
#include "gmjit/gmjit.h"
#include "gmjit/kernels.hpp"
#include "gmjit/tune.hpp"
#include "temp_dir.hpp"
#include "templates/registry.hpp"

namespace gmjit {
namespace {

constexpr const char* kRmsnorm = "w: bf16[cols]; y = x * rsqrt(mean(x * x) + 1e-6) * w";

KernelInfo info_of(const std::string& name) {
  for (const auto& k : list_kernels()) {
    if (k.name == name) return k;
  }
  ADD_FAILURE() << name << " is not in the catalog";
  return {};
}

std::string usage_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::usage) << e.what();
    return e.message();
  }
  ADD_FAILURE() << "no error";
  return {};
}

TEST(ExpressionKernels, RegisteredExpressionIsACatalogKernelWithItsTensorsAndParameters) {
  const std::string name = register_expression("test_rmsnorm", kRmsnorm, "bf16");
  EXPECT_EQ(name, "test_rmsnorm");
  const KernelInfo k = info_of(name);
  EXPECT_TRUE(k.user);
  EXPECT_EQ(k.problem_keys, (std::vector<std::string>{"rows", "cols"}));
  EXPECT_EQ(k.dtypes, (std::vector<std::string>{"bf16"}));
  ASSERT_EQ(k.tensors.size(), 3u);
  EXPECT_EQ(k.tensors[0].name, "w");
  EXPECT_EQ(k.tensors[0].dtype, "bf16");
  EXPECT_FALSE(k.tensors[0].output);
  EXPECT_EQ(k.tensors[1].name, "x");
  EXPECT_EQ(k.tensors[2].name, "y");
  EXPECT_TRUE(k.tensors[2].output);
  std::vector<std::string> params;
  for (const auto& p : k.params) params.push_back(p.name);
  EXPECT_EQ(params, (std::vector<std::string>{"block", "items", "vector", "threads_per_row"}));

  const auto described = nlohmann::json::parse(describe_kernel_json(name, {{"rows", 3}, {"cols", 8}}));
  EXPECT_EQ(described["tensors"][0]["count"], 8);
  EXPECT_EQ(described["tensors"][1]["count"], 24);
  EXPECT_EQ(described["tensors"][2]["count"], 24);

  // Unnamed, the same text gets the same name in every process.
  const std::string unnamed = register_expression("", kRmsnorm, "bf16");
  EXPECT_EQ(unnamed.rfind("expr_", 0), 0u) << unnamed;
  EXPECT_EQ(register_expression("", kRmsnorm, "bf16"), unnamed);
}

TEST(ExpressionKernels, BadTextNamesAndConfigurationsAreUsageErrors) {
  EXPECT_NE(usage_message([] { register_expression("e1", "y = silu(a) *", "fp32"); }).find("column"), std::string::npos);
  EXPECT_NE(usage_message([] { register_expression("e1", "y = a", "int8"); }).find("fp32"), std::string::npos);
  EXPECT_NE(usage_message([] { register_expression("not a name", "y = a", "fp32"); }).find("not an identifier"),
            std::string::npos);
  EXPECT_NE(usage_message([] { register_expression("softmax", "y = a", "fp32"); }).find("built-in"), std::string::npos);

  register_expression("test_pointwise", "y = silu(a) * b", "fp32");
  const auto& d = templates::find_kernel("test_pointwise");
  const Shape shape{{"rows", 4}, {"cols", 8}};
  EXPECT_EQ(d.violation({{"block", 256}, {"items", 4}, {"vector", 4}, {"threads_per_row", 32}}, shape), "");
  EXPECT_NE(d.violation({{"block", 256}, {"items", 4}, {"vector", 1}, {"threads_per_row", 256}}, shape)
                .find("threads_per_row is 32"),
            std::string::npos);
  EXPECT_NE(d.violation({{"block", 256}, {"items", 4}, {"vector", 8}, {"threads_per_row", 32}}, shape)
                .find("16-bit storage"),
            std::string::npos);
  EXPECT_NE(d.violation({{"block", 256}, {"items", 4}, {"vector", 4}, {"threads_per_row", 32}}, {{"rows", 4}, {"cols", 6}})
                .find("cols % vector == 0"),
            std::string::npos);
  // A pointwise program has one valid threads_per_row, so no configuration is tuned twice.
  EXPECT_EQ(templates::valid_configs(d, shape).size(), 5u * 4u * 3u);
}

// The Runtime's binary cache and `gmtune compile --expr` agree on what a configuration is.
TEST(ExpressionKernels, CatalogCompileAndCompileExpressionShareTheCompileKey) {
  const std::string name = register_expression("test_rmsnorm_key", kRmsnorm, "bf16");
  CompileRequest request;
  request.kernel = name;
  request.shape = {{"rows", 64}, {"cols", 4096}};
  request.config = {{"block", 128}, {"threads_per_row", 128}, {"vector", 8}};
  request.arch = "sm_90a";
  const CompileResult compiled = compile(request);
  EXPECT_FALSE(compiled.cubin.empty());
  EXPECT_NE(compiled.ptx.find(".entry " + compiled.lowered_name), std::string::npos);
  EXPECT_EQ(compiled.file_name.substr(compiled.file_name.size() - 5), ".expr");
  EXPECT_NE(compiled.source.find("x: bf16[rows, cols]"), std::string::npos) << compiled.source;

  ExpressionRequest direct;
  direct.expression = kRmsnorm;
  direct.dtype = "bf16";
  direct.shape = request.shape;
  direct.config = request.config;
  direct.arch = "sm_90a";
  const ExpressionCompileResult lowered = compile_expression(direct);
  EXPECT_EQ(lowered.compile_key, compiled.compile_key);
  EXPECT_EQ(lowered.kernel_name, compiled.lowered_name);
  // Another shape, same configuration: one key, as for a template.
  request.shape = {{"rows", 3}, {"cols", 8192}};
  EXPECT_EQ(compile(request).compile_key, compiled.compile_key);
  request.config["items"] = 2;
  EXPECT_NE(compile(request).compile_key, compiled.compile_key);

  // The same name with other text is another kernel: its problems have other keys.
  const std::string before = info_of(name).template_hash;
  register_expression(name, "w: bf16[cols]; y = x * rsqrt(mean(x * x) + 1e-5) * w", "bf16");
  EXPECT_NE(info_of(name).template_hash, before);
}

class ExpressionKernelTuning : public testing::TempDirTest {
 protected:
  ExpressionKernelTuning() : TempDirTest("gmjit-expr-kernels") {}
};

// Through the real worker process, which registers the expression from the problem message and
// computes its float64 reference itself.
TEST_F(ExpressionKernelTuning, TunesOnTheSimulatedDeviceThroughTheWorker) {
  const std::string name = register_expression("test_softmax", "y = exp(x - max(x)) / sum(exp(x - max(x)))", "fp16");
  TuneOptions options;
  options.simulated_device = true;
  options.strategy = "exhaustive";
  const TuneReport report = tune({name, "", {{"rows", 33}, {"cols", 1000}}, "test"}, options);
  ASSERT_TRUE(report.winner.has_value());
  // rows with reductions: threads_per_row is 32 or block; vector 1, 2, 4 or 8 divide 1000.
  EXPECT_EQ(report.valid_candidates, 5u * 4u * 4u * 2u);
  std::size_t ok = 0;
  for (const auto& t : report.trials) ok += t.status == TrialStatus::ok;
  EXPECT_EQ(ok, report.valid_candidates);
  EXPECT_EQ(report.problem.dtype, "fp16");
}

TEST_F(ExpressionKernelTuning, ShapesFileSweepsCarryTheirExpression) {
  const auto path = dir_ / "shapes.json";
  std::ofstream(path) << R"json({"sweeps": [
    {"kernel": "swept_silu_mul", "expr": "y = silu(a) * b", "dtype": "bf16",
     "shapes": [{"rows": 8192, "cols": 14336, "from": "llama-3 8b mlp"}, {"rows": 7, "cols": 33}]}]})json";
  const auto problems = read_shapes_file(path.string());
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_EQ(problems[0].kernel, "swept_silu_mul");
  EXPECT_EQ(problems[0].shape, (Shape{{"rows", 8192}, {"cols", 14336}}));
  EXPECT_EQ(info_of("swept_silu_mul").dtypes, (std::vector<std::string>{"bf16"}));

  std::ofstream(path) << R"json({"sweeps": [{"kernel": "bad_expr", "expr": "y = nope(a)", "shapes": [{"rows": 1, "cols": 1}]}]})json";
  const std::string message = usage_message([&] { read_shapes_file(path.string()); });
  EXPECT_NE(message.find("sweep 0 (bad_expr): expr:"), std::string::npos) << message;
  EXPECT_NE(message.find("unknown function 'nope'"), std::string::npos) << message;
}

TEST_F(ExpressionKernelTuning, GmtuneTuneExprRecordsAWinnerUnderItsName) {
  const auto db = dir_ / "gmjit.db";
  const auto tuned = testing::run_gmtune("tune --expr \"y = a * sigmoid(b) + c\" --name fused3 --dtype bf16 "
                                         "--shape rows=64,cols=4096 --budget 6 --json --db " + db.string(),
                                         "GMJIT_SIMULATED_DEVICE=1 ");
  ASSERT_EQ(tuned.status, 0) << tuned.err;
  EXPECT_NE(tuned.err.find("tuning the expression as kernel fused3"), std::string::npos) << tuned.err;
  const auto report = nlohmann::json::parse(tuned.out);
  EXPECT_TRUE(report["winner"].is_number());
  const auto bad = testing::run_gmtune("tune --expr \"y = a +\" --shape rows=1,cols=1 --db " + db.string(),
                                       "GMJIT_SIMULATED_DEVICE=1 ");
  EXPECT_EQ(bad.status, 2) << bad.out << bad.err;
  EXPECT_NE(bad.err.find("column"), std::string::npos) << bad.err;
}

TEST(ExpressionKernelsCApi, RegistersAndDescribesAnExpression) {
  char* name = nullptr;
  ASSERT_EQ(gmjit_register_expression("c_silu", "y = silu(a) * b", "fp16", &name), GMJIT_OK) << gmjit_last_error();
  ASSERT_NE(name, nullptr);
  EXPECT_STREQ(name, "c_silu");
  gmjit_free(name);
  char* json = nullptr;
  ASSERT_EQ(gmjit_describe("c_silu", nullptr, nullptr, nullptr, 0, &json), GMJIT_OK) << gmjit_last_error();
  const auto described = nlohmann::json::parse(json);
  gmjit_free(json);
  EXPECT_EQ(described["tensors"].size(), 3u);
  EXPECT_EQ(gmjit_register_expression("c_bad", nullptr, nullptr, &name), GMJIT_ERROR_USAGE);
  EXPECT_EQ(name, nullptr);
  EXPECT_EQ(gmjit_register_expression(nullptr, "y = min(a", nullptr, nullptr), GMJIT_ERROR_USAGE);
  EXPECT_NE(std::string(gmjit_last_error()).find("column"), std::string::npos) << gmjit_last_error();
}

}  // namespace
}  // namespace gmjit
