// Expressions registered as catalog kernels, launched through gmjit::Runtime on the GPU (issue
// 20): a miss tunes the expression in the worker process into the cache, the launch computes what
// expr::evaluate computes in float64 (fresh random inputs, NaN-poisoned outputs), and a fresh
// Runtime serves the recorded winner from the cache.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "codegen/expr.hpp"
#include "core/device.hpp"
#include "core/module.hpp"
#include "gmjit/expression.hpp"
#include "gmjit/runtime.hpp"
#include "require_gpu.hpp"
#include "runtime_fixture.hpp"

namespace gmjit {
namespace {

namespace ex = codegen::expr;

// Storage of values already rounded to `dtype` (fp32 or bf16, the top half of a binary32).
std::vector<unsigned char> storage(const std::vector<double>& values, ex::Dtype dtype) {
  const std::size_t size = dtype == ex::Dtype::f32 ? 4 : 2;
  std::vector<unsigned char> bytes(values.size() * size);
  for (std::size_t i = 0; i < values.size(); ++i) {
    const float f = static_cast<float>(values[i]);
    std::uint32_t bits = 0;
    std::memcpy(&bits, &f, 4);
    if (size == 4) {
      std::memcpy(bytes.data() + 4 * i, &bits, 4);
    } else {
      const auto top = static_cast<std::uint16_t>(bits >> 16);
      std::memcpy(bytes.data() + 2 * i, &top, 2);
    }
  }
  return bytes;
}

double value_at(const std::vector<unsigned char>& bytes, ex::Dtype dtype, std::size_t i) {
  std::uint32_t bits = 0;
  if (dtype == ex::Dtype::f32) {
    std::memcpy(&bits, bytes.data() + 4 * i, 4);
  } else {
    std::uint16_t top = 0;
    std::memcpy(&top, bytes.data() + 2 * i, 2);
    bits = std::uint32_t{top} << 16;
  }
  float f = 0;
  std::memcpy(&f, &bits, 4);
  return f;
}

class SM90_ExprRuntime : public testing::RuntimeTest {
 protected:
  // Launches `name` on fresh inputs through `runtime` and compares every output element with
  // evaluate(); returns the number of elements outside |out - ref| <= atol + rtol |ref|.
  std::size_t launch_and_check(Runtime& runtime, const std::string& name, const std::string& text, ex::Dtype dtype,
                               std::int64_t rows, std::int64_t cols, double atol, double rtol) {
    ex::ParseOptions parse_options;
    parse_options.default_dtype = dtype;
    const ex::Program program = ex::parse(text, parse_options);
    std::mt19937_64 rng(static_cast<std::uint64_t>(rows * 131 + cols));
    std::uniform_real_distribution<double> magnitude(0.25, 2.0);
    std::vector<std::vector<double>> inputs;
    std::vector<detail::DeviceBuffer> buffers;
    std::vector<DevicePtr> pointers;
    for (const auto& in : program.inputs()) {
      const std::int64_t count = in.kind == ex::InputKind::row ? cols : rows * cols;
      std::vector<double> values(static_cast<std::size_t>(count));
      for (auto& v : values) v = ex::round_to((rng() & 1 ? -1 : 1) * magnitude(rng), in.dtype);
      const auto bytes = storage(values, in.dtype);
      buffers.emplace_back(bytes.size());
      buffers.back().upload(bytes.data(), bytes.size());
      inputs.push_back(std::move(values));
    }
    detail::Stream stream;
    for (const auto& out : program.outputs()) {
      buffers.emplace_back(static_cast<std::size_t>(rows * cols) * (out.dtype == ex::Dtype::f32 ? 4 : 2));
      buffers.back().fill_bytes(0xFF, stream.get());
    }
    for (const auto& b : buffers) pointers.push_back(b.get());
    runtime.launch(name, {{"rows", rows}, {"cols", cols}}, Tensors(pointers.data(), pointers.size()), stream.get());
    stream.synchronize();

    const auto reference = ex::evaluate(program, inputs, rows, cols);
    std::size_t misses = 0;
    for (std::size_t o = 0; o < program.outputs().size(); ++o) {
      const ex::Dtype out_dtype = program.outputs()[o].dtype;
      auto& buffer = buffers[program.inputs().size() + o];
      std::vector<unsigned char> got(buffer.bytes());
      buffer.download(got.data(), got.size());
      for (std::size_t i = 0; i < reference[o].size(); ++i) {
        const double v = value_at(got, out_dtype, i);
        const double r = reference[o][i];
        if (!(std::fabs(v - r) <= atol + rtol * std::fabs(r))) {
          if (++misses <= 3) ADD_FAILURE() << name << " element " << i << ": " << v << " against " << r;
        }
      }
    }
    return misses;
  }
};

TEST_F(SM90_ExprRuntime, AMissTunesTheExpressionAndAFreshRuntimeServesItsWinner) {
  GMJIT_REQUIRE_SM90();
  detail::Context context(0);
  const std::string rmsnorm = "w: bf16[cols]; y = x * rsqrt(mean(x * x) + 1e-6) * w";
  const std::string silu_mul = "y = silu(a) * b";
  ASSERT_EQ(register_expression("rt_rmsnorm", rmsnorm, "bf16"), "rt_rmsnorm");
  ASSERT_EQ(register_expression("rt_silu_mul", silu_mul, "fp32"), "rt_silu_mul");

  Config tuned_rmsnorm;
  {
    Runtime runtime(options(MissPolicy::tune));
    EXPECT_EQ(launch_and_check(runtime, "rt_rmsnorm", rmsnorm, ex::Dtype::bf16, 1000, 4096, 1e-4, 1e-2), 0u);
    EXPECT_EQ(launch_and_check(runtime, "rt_silu_mul", silu_mul, ex::Dtype::f32, 7, 1001, 1e-6, 1e-5), 0u);
    const Resolution r = runtime.resolve("rt_rmsnorm", {{"rows", 1000}, {"cols", 4096}});
    tuned_rmsnorm = r.config;
    EXPECT_EQ(r.dtype, "bf16");
  }
  // Another process would find the same: the winner and its cubin come from the cache.
  Runtime fresh(options(MissPolicy::fail));
  const Resolution r = fresh.resolve("rt_rmsnorm", {{"rows", 1000}, {"cols", 4096}});
  EXPECT_EQ(r.source, ConfigSource::cache);
  EXPECT_EQ(r.config, tuned_rmsnorm);
  EXPECT_EQ(launch_and_check(fresh, "rt_rmsnorm", rmsnorm, ex::Dtype::bf16, 1000, 4096, 1e-4, 1e-2), 0u);
  // An untuned shape of the same expression is a miss under this policy, never a wrong kernel.
  EXPECT_THROW(fresh.resolve("rt_rmsnorm", {{"rows", 3}, {"cols", 64}}), Error);
}

}  // namespace
}  // namespace gmjit
