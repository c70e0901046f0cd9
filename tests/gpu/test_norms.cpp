#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "codegen/compiler.hpp"
#include "gmjit/error.hpp"
#include "core/device.hpp"
#include "core/module.hpp"
#include "gpu_test_support.hpp"
#include "require_gpu.hpp"
#include "templates/registry.hpp"
#include "tuner/harness.hpp"

namespace gmjit {
namespace {

using Case = std::tuple<std::string, std::string, std::int64_t, std::int64_t>;  // kernel, dtype, rows, cols

class Norms : public ::testing::TestWithParam<Case> {};

// Every valid configuration against the double-precision reference (fresh random inputs,
// NaN-poisoned outputs, guard bytes past them).
TEST_P(Norms, EveryConfigMatchesTheReference) {
  GMJIT_REQUIRE_SM90_OR_COMPILE_ONLY();
  const auto& [name, dtype, rows, cols] = GetParam();
  gpu_test::verify_every_config(name, dtype, {{"rows", rows}, {"cols", cols}},
                                static_cast<std::uint64_t>(rows * 131 + cols));
}

// Single elements, odd rows, 4- and 16-byte rows that are not whole chunks, the benchmark's
// widths (one row, a few rows, rows a block caches whole), and rows longer than any cached
// variant holds.
std::vector<Case> cases() {
  std::vector<Case> all;
  for (const char* name : {"rmsnorm", "layernorm"}) {
    for (const char* dtype : {"fp32", "bf16"}) {
      for (const auto& [rows, cols] : std::vector<std::pair<std::int64_t, std::int64_t>>{
               {1, 1}, {3, 127}, {127, 1000}, {127, 1002}, {1, 4096}, {128, 4096}, {64, 8192}, {5, 1000003}}) {
        all.emplace_back(name, dtype, rows, cols);
      }
    }
  }
  return all;
}

INSTANTIATE_TEST_SUITE_P(SM90, Norms, ::testing::ValuesIn(cases()), [](const ::testing::TestParamInfo<Case>& info) {
  return std::get<0>(info.param) + "_" + std::get<1>(info.param) + "_" + std::to_string(std::get<2>(info.param)) +
         "x" + std::to_string(std::get<3>(info.param));
});

// The harness's buffers are always 16-byte aligned, so the single-element fallback for pointers
// that are not (views into a larger tensor) runs only here: every tensor one bf16 element past an
// aligned address, against the same formula evaluated on the host in double.
TEST(SM90_Norms, MisalignedPointersFallBackToSingleElements) {
  GMJIT_REQUIRE_SM90();
  const DeviceInfo device = gpu_test::device0();
  detail::Context context(0);
  const std::int64_t rows = 3, cols = 4096;
  const Shape shape{{"rows", rows}, {"cols", cols}};
  const auto& bf16 = templates::dtype_info("bf16");
  for (const char* name : {"rmsnorm", "layernorm"}) {
    SCOPED_TRACE(name);
    const auto& kernel = templates::find_kernel(name);
    const Config config{{"strategy", 1}, {"block", 512}, {"elems", 8}, {"vec", 1}, {"cached", 1}};
    const auto source = codegen::specialize(kernel, shape, "bf16", config);
    ASSERT_NE(source.name_expression.find(", 16, true>"), std::string::npos) << source.name_expression;
    const auto loaded = gpu_test::load(source, device.arch);

    const auto inputs = tuner::random_inputs(kernel, shape, bf16, 7);
    std::vector<detail::DeviceBuffer> buffers;
    detail::KernelArgs args;
    for (const auto& bytes : inputs) {
      buffers.emplace_back(bytes.size() + 16);
      std::vector<unsigned char> shifted(bytes.size() + 16, 0);
      std::memcpy(shifted.data() + 2, bytes.data(), bytes.size());
      buffers.back().upload(shifted.data(), shifted.size());
      args.add(buffers.back().get() + 2);
    }
    detail::DeviceBuffer out(static_cast<std::size_t>(rows * cols) * 2 + 16);
    args.add(out.get() + 2);
    kernel.add_scalars(args, shape);
    detail::Stream stream;
    detail::launch(*loaded.kernel, kernel.geometry(config, shape, bf16), args, stream.get());
    stream.synchronize();
    std::vector<unsigned char> result(out.bytes());
    out.download(result.data(), result.size());

    const bool layer = std::string(name) == "layernorm";
    double error = 0, norm = 0;
    for (std::int64_t r = 0; r < rows; ++r) {
      double sum = 0, squares = 0;
      for (std::int64_t c = 0; c < cols; ++c) sum += tuner::element(bf16, inputs[0].data(), r * cols + c);
      const double mean = layer ? sum / static_cast<double>(cols) : 0.0;
      for (std::int64_t c = 0; c < cols; ++c) {
        const double d = tuner::element(bf16, inputs[0].data(), r * cols + c) - mean;
        squares += d * d;
      }
      const double scale = 1.0 / std::sqrt(squares / static_cast<double>(cols) + 1e-5);
      for (std::int64_t c = 0; c < cols; ++c) {
        double expected = (tuner::element(bf16, inputs[0].data(), r * cols + c) - mean) * scale *
                          tuner::element(bf16, inputs[1].data(), c);
        if (layer) expected += tuner::element(bf16, inputs[2].data(), c);
        const double got = tuner::element(bf16, result.data() + 2, r * cols + c);
        error += (got - expected) * (got - expected);
        norm += expected * expected;
      }
    }
    EXPECT_LE(std::sqrt(error / norm), kernel.tolerance(bf16, shape));
  }
}

}  // namespace
}  // namespace gmjit
