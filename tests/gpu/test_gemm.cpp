#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include "codegen/compiler.hpp"
#include "core/device.hpp"
#include "core/module.hpp"
#include "gmjit/tune.hpp"
#include "gpu_test_support.hpp"
#include "require_gpu.hpp"
#include "templates/registry.hpp"
#include "tuner/harness.hpp"

namespace gmjit {
namespace {

Shape gemm_shape(std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t trans_b) {
  return {{"m", m}, {"n", n}, {"k", k}, {"trans_b", trans_b}};
}

using Case = std::tuple<std::string, std::int64_t, std::int64_t, std::int64_t, std::int64_t>;  // dtype, m, n, k, trans_b

class Gemm : public ::testing::TestWithParam<Case> {};

// Every valid configuration, both paths, against the double-precision reference (fresh random
// inputs, NaN-poisoned outputs, guard bytes past them and past the workspace). Run size (pinned by
// Gemm.ValidConfigCounts in tests/unit/test_gemm.cpp): 6238 configurations per dtype over the 10
// (shape, trans_b) cases, 12476 verifications in all: per layout 206 mma at 1x1x1, 17x33x29 and
// 64x64x8, 656 at 128^3, 824 plus 24-26 skinny at 16x4096x1024, 6-10 skinny at 1x1x1, and the
// Hopper family's 198 at 64x64x8, 289 at 128^3 (unsplit: every ring holds both k-tiles) and 501 at
// 16x4096x1024, about half of each with the TMA store epilogue (tma_store=1).
// Compiles: the shape enters the instantiation only through the aligned flag (and the skinny
// path's m rounded to a power of two), so about 1150 distinct kernels per dtype and layout
// before the Hopper family's tma_store=1 twins.
TEST_P(Gemm, EveryConfigMatchesTheReference) {
  GMJIT_REQUIRE_SM90_OR_COMPILE_ONLY();
  const auto& [dtype, m, n, k, trans_b] = GetParam();
  gpu_test::verify_every_config("gemm", dtype, gemm_shape(m, n, k, trans_b),
                                static_cast<std::uint64_t>(m * 131 + n * 7 + k + trans_b));
}

// One element; primes (no 16-byte path, partial tiles everywhere); whole tiles; the decode shape
// of the skinny path (split-K valid); k shorter than one k-tile.
std::vector<Case> cases() {
  std::vector<Case> all;
  for (const char* dtype : {"bf16", "fp16"}) {
    for (std::int64_t trans_b : {0, 1}) {
      for (const auto& [m, n, k] : std::vector<std::tuple<std::int64_t, std::int64_t, std::int64_t>>{
               {1, 1, 1}, {17, 33, 29}, {128, 128, 128}, {16, 4096, 1024}, {64, 64, 8}}) {
        all.emplace_back(dtype, m, n, k, trans_b);
      }
    }
  }
  return all;
}

INSTANTIATE_TEST_SUITE_P(SM90, Gemm, ::testing::ValuesIn(cases()), [](const ::testing::TestParamInfo<Case>& info) {
  return std::get<0>(info.param) + "_" + std::to_string(std::get<1>(info.param)) + "x" +
         std::to_string(std::get<2>(info.param)) + "x" + std::to_string(std::get<3>(info.param)) + "_t" +
         std::to_string(std::get<4>(info.param));
});

// The reference every gemm verification trusts, against a product computed here in double. With
// bf16 or fp16 inputs every product and partial sum is exact in double, so the two must agree bit
// for bit. The cases leave partial 64 x 64 tiles and a k that is no multiple of the reference's
// 16-deep steps, in both layouts; the last has more rows of tiles (65538) than the grid's 65535,
// which the reference walks again from the top.
TEST(GemmReference, MatchesTheHostProductExactly) {
  GMJIT_REQUIRE_DEVICE();
  const auto& kernel = templates::find_kernel("gemm");
  const DeviceInfo device = gpu_test::device0();
  detail::Context context(0);
  detail::Stream stream;
  for (const auto& [dtype, m, n, k, trans_b] : std::vector<Case>{{"bf16", 1, 1, 1, 0},
                                                              {"bf16", 67, 131, 45, 1},
                                                              {"fp16", 130, 70, 200, 0},
                                                              {"fp16", 33, 65, 17, 1},
                                                              {"bf16", 64 * 65535 + 131, 3, 2, 1}}) {
    const Shape shape = gemm_shape(m, n, k, trans_b);
    SCOPED_TRACE(dtype + " " + format_assignments(shape));
    const auto& info = templates::dtype_info(dtype);
    const auto inputs = tuner::random_inputs(kernel, shape, info, static_cast<std::uint64_t>(m + n + k));
    const auto wide = tuner::widen_inputs(kernel, shape, info, inputs);
    const auto& a = wide.at(0);
    const auto& b = wide.at(1);

    const auto compiled = codegen::shared_compiler().compile(codegen::specialize_reference(kernel, shape, dtype),
                                                             device.arch).module;
    detail::Module module(compiled->cubin);
    detail::Kernel reference = module.kernel(compiled->lowered_name);
    std::vector<detail::DeviceBuffer> operands;
    for (const auto& bytes : inputs) operands.emplace_back(bytes.size()).upload(bytes.data(), bytes.size());
    const std::size_t count = static_cast<std::size_t>(m * n);
    detail::DeviceBuffer out(count * sizeof(double));
    out.fill_bytes(0xFF, stream.get());
    detail::KernelArgs args;
    args.add(operands.at(0).get()).add(operands.at(1).get()).add(out.get());
    if (kernel.workspace) args.add(CUdeviceptr{0});  // the reference leaves the split-K workspace alone
    kernel.add_scalars(args, shape);
    detail::launch(reference, kernel.reference_geometry(shape), args, stream.get());
    stream.synchronize();
    std::vector<double> got(count);
    out.download(got.data(), count * sizeof(double));

    std::size_t wrong = 0;
    for (std::int64_t row = 0; row < m; ++row) {
      for (std::int64_t col = 0; col < n; ++col) {
        double sum = 0;
        for (std::int64_t i = 0; i < k; ++i) sum += a[row * k + i] * b[trans_b ? col * k + i : i * n + col];
        const double value = got[static_cast<std::size_t>(row * n + col)];
        if (value != sum && wrong++ == 0) {
          ADD_FAILURE() << "C[" << row << "][" << col << "] is " << value << ", the host product " << sum;
        }
      }
    }
    EXPECT_EQ(wrong, 0u);
  }
}

class GemmWgmma : public ::testing::TestWithParam<Case> {};

// The Hopper family alone (wgmma=1), at shapes the cases above do not stress it with: partial tiles
// in m, n and k (TMA's zero fill and the epilogue's bounds), a k that is not a whole number of
// 64-deep stages, one row, and more tiles than the persistent grid's 132 blocks, so blocks walk
// several tiles and the barriers' phases carry over from one tile to the next.
TEST_P(GemmWgmma, EveryConfigMatchesTheReference) {
  GMJIT_REQUIRE_SM90_OR_COMPILE_ONLY();
  const auto& [dtype, m, n, k, trans_b] = GetParam();
  const std::size_t ran =
      gpu_test::verify_every_config("gemm", dtype, gemm_shape(m, n, k, trans_b),
                                    static_cast<std::uint64_t>(m * 131 + n * 7 + k + trans_b),
                                    [](const Config& c) { return c.at("wgmma") == 1; });
  EXPECT_GT(ran, 0u);
}

std::vector<Case> wgmma_cases() {
  std::vector<Case> all;
  for (const char* dtype : {"bf16", "fp16"}) {
    for (std::int64_t trans_b : {0, 1}) {
      for (const auto& [m, n, k] : std::vector<std::tuple<std::int64_t, std::int64_t, std::int64_t>>{
               {1, 264, 72}, {300, 136, 520}, {1000, 1096, 200}}) {
        all.emplace_back(dtype, m, n, k, trans_b);
      }
    }
  }
  return all;
}

INSTANTIATE_TEST_SUITE_P(SM90, GemmWgmma, ::testing::ValuesIn(wgmma_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::get<0>(info.param) + "_" + std::to_string(std::get<1>(info.param)) + "x" +
                                  std::to_string(std::get<2>(info.param)) + "x" +
                                  std::to_string(std::get<3>(info.param)) + "_t" +
                                  std::to_string(std::get<4>(info.param));
                         });

// The tuner at the large shape: 24 candidates chosen by the model strategy, each verified before
// it is timed; the winner must be verified and is printed with its throughput.
TEST(SM90_GemmTune, WinnerAt4096CubedIsVerified) {
  GMJIT_REQUIRE_SM90();
  const Problem problem{"gemm", "bf16", gemm_shape(4096, 4096, 4096, 1), "test"};
  TuneOptions options;
  options.max_evaluations = 24;
  options.max_seconds_per_candidate = 0.3;
  const TuneReport report = tune(problem, options);
  ASSERT_TRUE(report.winner.has_value());
  const auto& kernel = templates::find_kernel("gemm");
  const double tolerance = kernel.tolerance(templates::dtype_info("bf16"), problem.shape);
  for (const auto& t : report.trials) {
    if (t.status == TrialStatus::ok) EXPECT_LE(t.verify_error, tolerance) << format_assignments(t.config);
  }
  const auto& winner = report.trials[*report.winner];
  EXPECT_EQ(winner.status, TrialStatus::ok);
  std::printf("[ winner   ] gemm bf16 4096^3 trans_b=1: %s, %.3f ms, %.0f TFLOP/s\n",
              format_assignments(winner.config).c_str(), winner.median_ms,
              2.0 * 4096 * 4096 * 4096 / (winner.median_ms * 1e-3) / 1e12);
}

}  // namespace
}  // namespace gmjit
