// Expression programs lowered through LLVM 19 (codegen/expr_lower.cpp), no GPU: every operator at
// every storage dtype, and softmax, rmsnorm, layernorm and silu(a) * b at several LowerParams,
// become IR that verifies, PTX for sm_90a and a cubin nvJitLink assembles; the PTX has the shape
// the params ask for (vector loads, shuffles, a block's shared memory), and no local memory.
// Params that cannot work are usage errors naming the rule.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "codegen/expr.hpp"
#include "codegen/expr_lower.hpp"
#include "gmjit/error.hpp"

namespace gmjit {
namespace {

namespace ex = codegen::expr;

constexpr const char* kArch = "sm_90a";

struct Case {
  std::string label;
  std::string text;
};

const std::vector<std::string> kDtypes = {"fp32", "fp16", "bf16"};

// Every operator once, over inputs of dtype `d`: a and b full, w a row vector.
std::vector<Case> operator_cases(const std::string& d) {
  const std::string decl = "a: " + d + "; b: " + d + "; w: " + d + "[cols]; ";
  std::vector<Case> cases;
  for (const char* f : {"abs", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "silu", "relu", "gelu", "gelu_erf"}) {
    cases.push_back({f, decl + "y = " + f + "(a)"});
  }
  cases.push_back({"neg", decl + "y = -a"});
  for (const char* op : {"+", "-", "*", "/"}) cases.push_back({std::string("binary") + op, decl + "y = a " + op + " b"});
  cases.push_back({"min", decl + "y = min(a, b)"});
  cases.push_back({"max", decl + "y = max(a, w)"});
  cases.push_back({"row_broadcast", decl + "y = a * w + 2.5"});
  for (const char* op : {"<", "<=", ">", ">=", "==", "!="}) {
    cases.push_back({std::string("where") + op, decl + "y = where(a " + op + " b, a, w)"});
  }
  for (const char* to : {"fp32", "fp16", "bf16"}) cases.push_back({std::string("cast_") + to, decl + "y = " + to + "(a)"});
  cases.push_back({"cast_bool", decl + "y = fp32(a > 0) + fp32(a)"});
  for (const char* r : {"sum", "max", "min", "mean"}) cases.push_back({std::string("row_") + r, decl + "y = a - " + r + "(a * w)"});
  return cases;
}

std::vector<Case> composite_cases(const std::string& d) {
  return {
      {"softmax", "x: " + d + "; y = exp(x - max(x)) / sum(exp(x - max(x)))"},
      {"rmsnorm", "x: " + d + "; w: " + d + "[cols]; y = x * rsqrt(mean(x * x) + 1e-6) * w"},
      {"layernorm", "x: " + d + "; w: " + d + "[cols]; b: " + d +
                        "[cols]; y = (x - mean(x)) * rsqrt(mean((x - mean(x)) * (x - mean(x))) + 1e-5) * w + b"},
      {"silu_mul", "a: " + d + "; b: " + d + "; y = silu(a) * b"},
  };
}

std::string describe(const ex::LowerParams& p) {
  return "block=" + std::to_string(p.block) + " items=" + std::to_string(p.items) + " vector=" +
         std::to_string(p.vector) + " threads_per_row=" + std::to_string(p.threads_per_row);
}

// What a lowered kernel gets wrong, in a few words; empty when it is right.
std::string check(const ex::Program& program, const ex::LoweredKernel& k) {
  if (k.ptx.find(".entry " + k.name) == std::string::npos) return "no .entry " + k.name;
  if (k.ptx.find(".target sm_90a") == std::string::npos) return "not for sm_90a";
  if (k.ptx.find(".reqntid " + std::to_string(k.params.block)) == std::string::npos) return "no .reqntid";
  // Every accumulator and loop variable promoted to registers.
  if (k.ptx.find(".local") != std::string::npos) return "local memory in the PTX";
  if (k.ptx.find("__nv_") != std::string::npos) return "a libdevice call left in the PTX";
  if (k.cubin.size() < 4 || std::memcmp(k.cubin.data(), "\x7f" "ELF", 4) != 0) return "the cubin is no ELF";
  if (k.ir.find("define ptx_kernel void @" + k.name) == std::string::npos) return "the IR has no kernel";
  if (program.has_reduction() != k.reduces) return "reduces is wrong";
  if (program.has_reduction()) {
    if (k.ptx.find("shfl.sync.bfly") == std::string::npos) return "no warp shuffle";
    const bool block_per_row = k.params.threads_per_row == k.params.block && k.params.block > 32;
    if (block_per_row != (k.ptx.find("bar.sync") != std::string::npos)) return "bar.sync iff a block per row";
    if (block_per_row != (k.ptx.find(".shared") != std::string::npos)) return ".shared iff a block per row";
  }
  return {};
}

void lower_all(const std::vector<Case>& cases, const std::string& dtype, const std::vector<ex::LowerParams>& params,
               std::vector<std::string>& problems, std::size_t& lowered) {
  for (const auto& c : cases) {
    const ex::Program program = ex::parse(c.text);
    for (const auto& p : params) {
      const std::string what = c.label + " " + dtype + " " + describe(p) + " [" + c.text + "]";
      try {
        const ex::LoweredKernel k = ex::lower(program, p, kArch);
        ++lowered;
        const std::string wrong = check(program, k);
        if (!wrong.empty()) problems.push_back(what + ": " + wrong);
      } catch (const Error& e) {
        problems.push_back(what + ": " + e.what() + "\n" + e.log().substr(0, 2000));
      }
    }
  }
}

void expect_none(const std::vector<std::string>& problems) {
  std::string all;
  for (const auto& p : problems) all += p + "\n";
  EXPECT_TRUE(problems.empty()) << problems.size() << " problems:\n" << all;
}

TEST(ExprLower, EveryOperatorAtEveryDtypeGivesACubin) {
  // Warp per row, scalar loads; then a block per row with vector loads and one item.
  const std::vector<ex::LowerParams> params = {{256, 4, 1, 32}, {128, 1, 4, 128}};
  std::vector<std::string> problems;
  std::size_t lowered = 0;
  for (const auto& d : kDtypes) lower_all(operator_cases(d), d, params, problems, lowered);
  expect_none(problems);
  EXPECT_EQ(lowered, operator_cases("fp32").size() * kDtypes.size() * params.size());
}

TEST(ExprLower, CompositesAtSeveralParamsGiveCubins) {
  const std::vector<ex::LowerParams> params = {
      {256, 4, 1, 32}, {256, 1, 2, 32}, {256, 4, 4, 256}, {1024, 2, 4, 1024}, {32, 4, 1, 32}, {64, 16, 2, 64}};
  std::vector<std::string> problems;
  std::size_t lowered = 0;
  for (const auto& d : kDtypes) lower_all(composite_cases(d), d, params, problems, lowered);
  expect_none(problems);
  EXPECT_EQ(lowered, 4 * kDtypes.size() * params.size());
}

TEST(ExprLower, VectorFourFp32PointwiseLoadsAndStoresV4) {
  const ex::Program program = ex::parse("a: fp32; b: fp32; y = silu(a) * b");
  const ex::LoweredKernel k = ex::lower(program, {256, 4, 4, 32}, kArch);
  EXPECT_TRUE(k.ptx.find("ld.global.v4.f32") != std::string::npos ||
              k.ptx.find("ld.global.nc.v4.f32") != std::string::npos)
      << k.ptx;
  EXPECT_NE(k.ptx.find("st.global.v4.f32"), std::string::npos) << k.ptx;
  EXPECT_EQ(k.ptx.find(".local"), std::string::npos) << k.ptx;
  EXPECT_FALSE(k.reduces);
  EXPECT_EQ(k.passes, 1);
  EXPECT_EQ(k.name.rfind("gmjit_expr_", 0), 0u) << k.name;
  // fadd/fmul carry `contract`, nothing else fast.
  EXPECT_NE(k.ir.find("fmul contract float"), std::string::npos) << k.ir;
  EXPECT_EQ(k.ir.find(" fast "), std::string::npos) << k.ir;
  EXPECT_EQ(k.ir.find("nnan"), std::string::npos) << k.ir;
  EXPECT_EQ(k.ir.find("afn"), std::string::npos) << k.ir;
}

TEST(ExprLower, Bf16RmsnormLoadsBf16ComputesF32StoresBf16) {
  const ex::Program program = ex::parse("x: bf16; w: bf16[cols]; y = x * rsqrt(mean(x * x) + 1e-6) * w");
  for (const ex::LowerParams& p : {ex::LowerParams{256, 4, 4, 32}, ex::LowerParams{256, 4, 2, 256}}) {
    const ex::LoweredKernel k = ex::lower(program, p, kArch);
    SCOPED_TRACE(describe(p));
    EXPECT_EQ(check(program, k), "");
    EXPECT_TRUE(k.reduces);
    EXPECT_EQ(k.passes, 2);
    EXPECT_NE(k.ir.find("load <" + std::to_string(p.vector) + " x bfloat>"), std::string::npos) << k.ir;
    EXPECT_NE(k.ir.find("fpext bfloat"), std::string::npos) << k.ir;
    EXPECT_NE(k.ir.find("fptrunc float"), std::string::npos) << k.ir;
    EXPECT_NE(k.ptx.find("cvt.rn.bf16"), std::string::npos) << k.ptx;
    std::printf("rmsnorm bf16 %s: PTX %zu bytes, cubin %zu bytes\n", describe(p).c_str(), k.ptx.size(), k.cubin.size());
  }
}

TEST(ExprLower, NamesDifferByProgramAndParamsAndRepeat) {
  const ex::Program a = ex::parse("x: fp32; y = exp(x)");
  const ex::Program b = ex::parse("x: fp32; y = log(x)");
  const ex::LoweredKernel ka = ex::lower(a, {}, kArch);
  EXPECT_EQ(ka.name, ex::lower(a, {}, kArch).name);
  EXPECT_EQ(ka.ptx, ex::lower(a, {}, kArch).ptx);
  EXPECT_NE(ka.name, ex::lower(b, {}, kArch).name);
  EXPECT_NE(ka.name, ex::lower(a, {256, 2, 1, 32}, kArch).name);
}

// The ABI: inputs in program order (unused declared ones too), outputs, then i64 rows, i64 cols.
TEST(ExprLower, ParametersAreInputsThenOutputsThenRowsAndCols) {
  const ex::Program program = ex::parse("a: fp16; unused: fp32; w: bf16[cols]; y = a * fp16(w); z = fp32(a) + 1");
  const ex::LoweredKernel k = ex::lower(program, {}, kArch);
  const std::string define = "define ptx_kernel void @" + k.name +
                             "(ptr addrspace(1) nocapture readonly %a, ptr addrspace(1) nocapture readonly %unused, "
                             "ptr addrspace(1) nocapture readonly %w, ptr addrspace(1) nocapture %y, "
                             "ptr addrspace(1) nocapture %z, i64 %rows, i64 %cols)";
  EXPECT_NE(k.ir.find(define), std::string::npos) << k.ir;
  EXPECT_NE(k.ptx.find(k.name + "_param_6"), std::string::npos) << k.ptx;
  EXPECT_EQ(k.ptx.find(k.name + "_param_7"), std::string::npos) << k.ptx;
}

TEST(ExprLower, GeometryCoversTheProblemAndCapsTheGrid) {
  const ex::Program pointwise = ex::parse("x: fp32; y = x + 1");
  const ex::Program rows = ex::parse("x: fp32; y = x - max(x)");
  LaunchGeometry g = ex::geometry(pointwise, {256, 4, 1, 32}, 1000, 4097);
  EXPECT_EQ(g.block[0], 256u);
  EXPECT_EQ(g.grid[0], (1000u * 4097u + 1023u) / 1024u);
  EXPECT_EQ(g.dynamic_shared_bytes, 0u);
  g = ex::geometry(pointwise, {128, 2, 4, 32}, 7, 4);  // 7 chunks of 4
  EXPECT_EQ(g.grid[0], 1u);
  EXPECT_EQ(g.block[0], 128u);
  g = ex::geometry(pointwise, {256, 1, 1, 32}, 1 << 20, 1 << 20);
  EXPECT_EQ(g.grid[0], ex::kMaxGrid);
  g = ex::geometry(rows, {256, 4, 1, 32}, 33, 7);  // 8 warps, 8 rows per block
  EXPECT_EQ(g.grid[0], 5u);
  g = ex::geometry(rows, {256, 4, 1, 256}, 33, 7);  // a block per row
  EXPECT_EQ(g.grid[0], 33u);
  g = ex::geometry(rows, {512, 4, 1, 512}, 1 << 20, 8);
  EXPECT_EQ(g.grid[0], ex::kMaxGrid);
  // threads_per_row means nothing to a pointwise program.
  EXPECT_EQ(ex::violation(pointwise, {256, 4, 1, 64}), "");
}

void expect_usage(const std::function<void()>& call, const std::string& rule) {
  try {
    call();
    ADD_FAILURE() << "no error, expected one naming: " << rule;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::usage) << e.what();
    EXPECT_NE(e.message().find(rule), std::string::npos) << e.message();
  }
}

TEST(ExprLower, InvalidParamsAreUsageErrorsNamingTheRule) {
  const ex::Program pointwise = ex::parse("x: fp32; y = x + 1");
  const ex::Program rows = ex::parse("x: fp32; y = x / sum(x)");
  expect_usage([&] { ex::lower(pointwise, {48, 4, 1, 32}, kArch); }, "block must be a multiple of 32 in [32, 1024]");
  expect_usage([&] { ex::lower(pointwise, {2048, 4, 1, 32}, kArch); }, "block must be a multiple of 32 in [32, 1024]");
  expect_usage([&] { ex::lower(pointwise, {0, 4, 1, 32}, kArch); }, "not 0");
  expect_usage([&] { ex::lower(pointwise, {256, 0, 1, 32}, kArch); }, "items must be in [1, 16]");
  expect_usage([&] { ex::lower(pointwise, {256, 17, 1, 32}, kArch); }, "items must be in [1, 16]");
  expect_usage([&] { ex::lower(pointwise, {256, 4, 3, 32}, kArch); }, "vector must be 1, 2, 4 or 8");
  expect_usage([&] { ex::lower(pointwise, {256, 4, 16, 32}, kArch); }, "vector must be 1, 2, 4 or 8");
  expect_usage([&] { ex::lower(pointwise, {256, 4, 8, 32}, kArch); }, "vector 8 needs 16-bit storage, but input 'x' is fp32");
  expect_usage([&] { ex::lower(ex::parse("x: bf16; y = fp32(x)"), {256, 4, 8, 32}, kArch); },
               "vector 8 needs 16-bit storage, but output 'y' is fp32");
  expect_usage([&] { ex::lower(rows, {256, 4, 1, 64}, kArch); }, "threads_per_row must be 32 (a warp per row) or block");
  expect_usage([&] { ex::lower(rows, {256, 4, 1, 512}, kArch); }, "threads_per_row must be 32");
  expect_usage([&] { ex::geometry(pointwise, {256, 4, 2, 32}, 4, 7); }, "vector = 2 needs cols % vector == 0, but cols = 7");
  expect_usage([&] { ex::geometry(rows, {256, 4, 4, 32}, 4, 6); }, "cols % vector == 0");
  expect_usage([&] { ex::geometry(rows, {256, 4, 1, 32}, 0, 6); }, "rows and cols must be positive");
  expect_usage([&] { ex::geometry(rows, {256, 4, 1, 32}, 6, -1); }, "rows and cols must be positive");
  expect_usage([&] { ex::geometry(rows, {256, 4, 1, 32}, std::int64_t{1} << 31, std::int64_t{1} << 31); }, "below 2^62");
  expect_usage([&] { ex::lower(pointwise, {}, "sm_999"); }, "sm_999");
  EXPECT_EQ(ex::violation(rows, {256, 4, 4, 256}, 3, 8), "");
  EXPECT_EQ(ex::violation(rows, {32, 4, 1, 32}, 1, 1), "");
}

}  // namespace
}  // namespace gmjit
