// prefix_sum on the GPU: every valid configuration against the float64 host scan (the harness
// zeroes the workspace once and verifies the second launch, so the look-back state each launch
// leaves behind is tested too), and the scalar path of tiles whose pointers are not 16-byte aligned.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "codegen/compiler.hpp"
#include "core/device.hpp"
#include "core/module.hpp"
#include "core/workspace.hpp"
#include "gpu_test_support.hpp"
#include "require_gpu.hpp"
#include "templates/registry.hpp"

namespace gmjit {
namespace {

class PrefixSum : public ::testing::TestWithParam<std::int64_t> {};

TEST_P(PrefixSum, EveryConfigMatchesTheReference) {
  GMJIT_REQUIRE_SM90_OR_COMPILE_ONLY();
  gpu_test::verify_every_config("prefix_sum", "fp32", {{"n", GetParam()}});
}

// One element, a partial tile, many tiles with a partial last one, and the largest benchmark
// shape (262144 tiles of the smallest size chained through the look-back).
INSTANTIATE_TEST_SUITE_P(SM90, PrefixSum, ::testing::Values(1, 127, 8193, 1000003, 268435456),
                         [](const ::testing::TestParamInfo<std::int64_t>& info) {
                           return "n" + std::to_string(info.param);
                         });

// Pointers one float past a 16-byte boundary take the scalar path in every tile; three launches
// on one workspace, each checked against the host scan.
TEST(SM90_PrefixSum, UnalignedPointersAndRepeatedLaunches) {
  GMJIT_REQUIRE_SM90();
  const std::int64_t n = 1000003;
  const Shape shape{{"n", n}};
  const auto& kernel = templates::find_kernel("prefix_sum");
  const DeviceInfo device = gpu_test::device0();
  detail::Context context(0);
  const Config config{{"block", 256}, {"items", 16}};
  const auto source = codegen::specialize(kernel, shape, "fp32", config);
  const auto loaded = gpu_test::load(source, device.arch);

  std::vector<float> host(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) host[i] = static_cast<float>((i * 7919) % 1001) / 1000.0f - 0.5f;
  detail::DeviceBuffer x((n + 1) * sizeof(float));
  detail::DeviceBuffer y((n + 1) * sizeof(float));
  detail::Stream stream;
  // Sized and zeroed as the Runtime and the tuner do.
  const auto need = kernel.workspace(shape);
  detail::Workspace workspace;
  const CUdeviceptr scratch = workspace.prepare(static_cast<std::size_t>(need.bytes), need.layout, stream.get());
  std::vector<float> shifted(host.size() + 1);
  std::copy(host.begin(), host.end(), shifted.begin() + 1);
  x.upload(shifted.data(), shifted.size() * sizeof(float));
  for (int launch = 0; launch < 3; ++launch) {
    y.fill_bytes(0xFF, stream.get());
    detail::KernelArgs args;
    args.add(x.get() + sizeof(float)).add(y.get() + sizeof(float)).add(scratch).add(static_cast<long long>(n));
    detail::launch(*loaded.kernel, kernel.geometry(config, shape, templates::dtype_info("fp32")), args, stream.get());
    stream.synchronize();
    std::vector<float> out(host.size() + 1);
    y.download(out.data(), out.size() * sizeof(float));
    double running = 0, worst = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      running += host[i];
      worst = std::max(worst, std::abs(static_cast<double>(out[i + 1]) - running));
    }
    EXPECT_TRUE(std::isnan(out[0])) << "wrote before y";
    EXPECT_LE(worst, 1e-5 * std::sqrt(static_cast<double>(n))) << "launch " << launch;
  }
}

}  // namespace
}  // namespace gmjit
