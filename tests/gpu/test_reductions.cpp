// vector_sum and histogram on the GPU. Every valid configuration goes through tuner::Harness,
// which zeroes the workspace once, launches twice and checks the second launch (so a kernel that
// leaves its completion counter or accumulator dirty fails) on a NaN-poisoned, guarded output.
// Direct launches then cover what the harness's aligned buffers cannot: inputs that start off a
// 16-byte boundary, and one workspace shared by kernels of different grids.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "codegen/compiler.hpp"
#include "core/device.hpp"
#include "core/module.hpp"
#include "core/workspace.hpp"
#include "gpu_test_support.hpp"
#include "require_gpu.hpp"
#include "templates/registry.hpp"
#include "tuner/harness.hpp"

namespace gmjit {
namespace {

// Inputs seeded from every dimension: histogram shapes share n and differ in contention.
std::uint64_t seed_of(const Shape& shape) {
  std::uint64_t seed = 17;
  for (const auto& [key, value] : shape) seed = seed * 1000003 + static_cast<std::uint64_t>(value);
  return seed;
}

class VectorSum : public ::testing::TestWithParam<std::int64_t> {};

TEST_P(VectorSum, EveryConfigMatchesTheHostReference) {
  GMJIT_REQUIRE_SM90_OR_COMPILE_ONLY();
  const Shape shape{{"n", GetParam()}};
  gpu_test::verify_every_config("vector_sum", "fp32", shape, seed_of(shape));
}

INSTANTIATE_TEST_SUITE_P(SM90, VectorSum, ::testing::Values(1, 127, 1000003, 52428800),
                         [](const ::testing::TestParamInfo<std::int64_t>& info) { return "n" + std::to_string(info.param); });

using HistCase = std::pair<std::int64_t, std::int64_t>;  // n, contention

class Histogram : public ::testing::TestWithParam<HistCase> {};

TEST_P(Histogram, EveryConfigCountsExactly) {
  GMJIT_REQUIRE_SM90_OR_COMPILE_ONLY();
  const Shape shape{{"n", GetParam().first}, {"contention", GetParam().second}};
  gpu_test::verify_every_config("histogram", "u8", shape, seed_of(shape));
}

// i64_counts=1: the same kernel writes torch's int64 counts; the harness's 0xFF poison reads as -1
// there, so an unwritten count cannot pass.
TEST(SM90_HistogramI64, EveryConfigCountsExactlyInInt64) {
  GMJIT_REQUIRE_SM90_OR_COMPILE_ONLY();
  for (const std::int64_t n : {15, 1000003}) {
    const Shape shape{{"n", n}, {"contention", 90}, {"i64_counts", 1}};
    gpu_test::verify_every_config("histogram", "u8", shape, seed_of(shape));
  }
}

std::vector<HistCase> histogram_cases() {
  std::vector<HistCase> cases;
  for (const std::int64_t contention : {0, 10, 90, 100}) {
    for (const std::int64_t n : {1, 15, 127, 1000003, 10485760}) cases.emplace_back(n, contention);
  }
  cases.emplace_back(1310720, 10);
  cases.emplace_back(2621440, 90);
  return cases;
}

INSTANTIATE_TEST_SUITE_P(SM90, Histogram, ::testing::ValuesIn(histogram_cases()),
                         [](const ::testing::TestParamInfo<HistCase>& info) {
                           return "n" + std::to_string(info.param.first) + "_c" + std::to_string(info.param.second);
                         });

Shape offset_shape(const std::string& name, std::int64_t n) {
  return name == "histogram" ? Shape{{"n", n}, {"contention", 1}} : Shape{{"n", n}};
}

// Each of `configs` at each of `sizes`, compiled on every core while at_every_offset() runs.
gpu_test::CompileAhead compile_every_size(const std::string& name, const std::string& dtype,
                                          const std::vector<std::int64_t>& sizes, const std::vector<Config>& configs) {
  std::vector<codegen::GeneratedSource> sources;
  for (const std::int64_t n : sizes) {
    for (const auto& config : configs) {
      sources.push_back(codegen::specialize(templates::find_kernel(name), offset_shape(name, n), dtype, config));
    }
  }
  return gpu_test::CompileAhead(sources, gpu_test::device0().arch);
}

// One input buffer, launched at every byte offset in [0, 16) so the head peel and the tail both
// take every length; one workspace for all launches and configurations, zeroed once.
template <typename Check>
void at_every_offset(const std::string& name, const std::string& dtype, std::int64_t n,
                     const std::vector<unsigned char>& host, std::int64_t element_bytes, std::int64_t output_bytes,
                     const std::vector<Config>& configs, Check check) {
  const auto& kernel = templates::find_kernel(name);
  const DeviceInfo device = gpu_test::device0();
  detail::Context context(0);
  detail::Stream stream;
  const Shape shape = offset_shape(name, n);
  detail::DeviceBuffer x(host.size() + 16);
  detail::DeviceBuffer out(static_cast<std::size_t>(output_bytes));
  const auto need = kernel.workspace(shape);
  detail::Workspace workspace;
  const CUdeviceptr scratch = workspace.prepare(static_cast<std::size_t>(need.bytes), need.layout, stream.get());
  std::vector<cache::LoadedBinary> kernels;
  for (const auto& config : configs) {
    kernels.push_back(gpu_test::load(codegen::specialize(kernel, shape, dtype, config), device.arch));
  }
  for (std::int64_t offset = 0; offset < 16; offset += element_bytes) {
    std::vector<unsigned char> shifted(host.size() + 16, 0xAB);
    std::memcpy(shifted.data() + offset, host.data(), static_cast<std::size_t>(n * element_bytes));
    x.upload(shifted.data(), shifted.size());
    for (std::size_t k = 0; k < configs.size(); ++k) {
      SCOPED_TRACE(name + " n=" + std::to_string(n) + " offset=" + std::to_string(offset) + " " +
                   format_assignments(configs[k]));
      out.fill_bytes(0xFF, stream.get());
      detail::KernelArgs args;
      args.add(x.get() + static_cast<CUdeviceptr>(offset)).add(out.get()).add(scratch).add(static_cast<long long>(n));
      detail::launch(*kernels[k].kernel, kernel.geometry(configs[k], shape, templates::dtype_info(dtype)), args,
                     stream.get());
      stream.synchronize();
      std::vector<unsigned char> result(static_cast<std::size_t>(output_bytes));
      out.download(result.data(), result.size());
      check(result);
    }
  }
}

TEST(SM90_VectorSum, UnalignedInputsAndASharedWorkspace) {
  GMJIT_REQUIRE_SM90();
  const auto& kernel = templates::find_kernel("vector_sum");
  const std::vector<std::int64_t> sizes = {1, 2, 3, 4, 5, 7, 127, 4099, 1000003};
  // Different grids and block sizes in turn on one workspace: each must leave it clean.
  const std::vector<Config> configs = {kernel.default_config,
                                       {{"block", 256}, {"unroll", 1}, {"blocks", 2112}},
                                       {{"block", 512}, {"unroll", 8}, {"blocks", 264}}};
  const auto ahead = compile_every_size("vector_sum", "fp32", sizes, configs);
  for (const std::int64_t n : sizes) {
    std::mt19937 rng(static_cast<unsigned>(n));
    std::uniform_real_distribution<float> dist(-1.0f, 3.0f);
    std::vector<float> values(static_cast<std::size_t>(n));
    double expected = 0;
    for (auto& v : values) {
      v = dist(rng);
      expected += v;
    }
    std::vector<unsigned char> host(values.size() * 4);
    std::memcpy(host.data(), values.data(), host.size());
    at_every_offset("vector_sum", "fp32", n, host, 4, 4, configs, [&](const std::vector<unsigned char>& out) {
      float got = 0;
      std::memcpy(&got, out.data(), 4);
      EXPECT_NEAR(got, expected, 1e-5 * std::abs(expected) + 1e-6);
    });
  }
}

TEST(SM90_VectorSum, RepeatedLaunchesAgreeBitForBit) {
  GMJIT_REQUIRE_SM90();
  const auto& kernel = templates::find_kernel("vector_sum");
  const Shape shape{{"n", 52428800}};
  const DeviceInfo device = gpu_test::device0();
  detail::Context context(0);
  detail::Stream stream;
  const auto inputs = tuner::random_inputs(kernel, shape, templates::dtype_info("fp32"), 5);
  detail::DeviceBuffer x(inputs.at(0).size());
  x.upload(inputs[0].data(), inputs[0].size());
  detail::DeviceBuffer y(4);
  const auto need = kernel.workspace(shape);
  detail::Workspace workspace;
  const CUdeviceptr scratch = workspace.prepare(static_cast<std::size_t>(need.bytes), need.layout, stream.get());
  const Config config{{"block", 256}, {"unroll", 4}, {"blocks", 2112}};
  const auto loaded = gpu_test::load(codegen::specialize(kernel, shape, "fp32", config), device.arch);
  const auto geometry = kernel.geometry(config, shape, templates::dtype_info("fp32"));
  std::uint32_t first = 0;
  for (int launch = 0; launch < 20; ++launch) {
    detail::KernelArgs args;
    args.add(x.get()).add(y.get()).add(scratch).add(static_cast<long long>(52428800));
    detail::launch(*loaded.kernel, geometry, args, stream.get());
    stream.synchronize();
    std::uint32_t bits = 0;
    y.download(&bits, 4);
    if (launch == 0) first = bits;
    EXPECT_EQ(bits, first) << "launch " << launch << ": the partials are added in a fixed order";
  }
}

TEST(SM90_Histogram, UnalignedInputsAndASharedWorkspace) {
  GMJIT_REQUIRE_SM90();
  const std::vector<std::int64_t> sizes = {1, 15, 16, 17, 31, 33, 127, 4099, 1000003};
  const std::vector<Config> configs = {{{"block", 1024}, {"stripes", 32}, {"unroll", 2}, {"blocks", 132}},
                                       {{"block", 256}, {"stripes", 1}, {"unroll", 1}, {"blocks", 1056}},
                                       {{"block", 512}, {"stripes", 8}, {"unroll", 4}, {"blocks", 264}}};
  const auto ahead = compile_every_size("histogram", "u8", sizes, configs);
  for (const std::int64_t n : sizes) {
    std::mt19937 rng(static_cast<unsigned>(n));
    std::vector<unsigned char> host(static_cast<std::size_t>(n));
    std::vector<std::uint32_t> expected(256, 0);
    for (auto& b : host) {
      b = static_cast<unsigned char>(rng() % 3 == 0 ? 7 : rng() & 0xff);
      ++expected[b];
    }
    at_every_offset("histogram", "u8", n, host, 1, 1024, configs, [&](const std::vector<unsigned char>& out) {
      std::vector<std::uint32_t> counts(256);
      std::memcpy(counts.data(), out.data(), 1024);
      EXPECT_EQ(counts, expected);
    });
  }
}

}  // namespace
}  // namespace gmjit
