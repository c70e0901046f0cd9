// tests/data/wrong_tail: vector_add with its last 12 elements zeroed, a fault whose relative L2
// error passes the tolerance. It compiles here for the gpu tier's test (tests/gpu/test_verify.cpp),
// and the simulated device, verifying on the host, rejects it by the per-element bound.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "codegen/compiler.hpp"
#include "gmjit/compile.hpp"
#include "gmjit/kernels.hpp"
#include "gmjit/tune.hpp"
#include "templates/registry.hpp"
#include "tuner/harness.hpp"
#include "wrong_tail_check.hpp"

namespace gmjit {
namespace {

const std::string kDir = std::string(GMJIT_SOURCE_DIR) + "/tests/data/wrong_tail/";

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(WrongTail, CompilesAtEveryTailAndDtype) {
  const std::string name = register_kernel_file(kDir + "wrong_tail.json");
  const Shape shape{{"n", std::int64_t{1} << 24}};
  for (const std::string dtype : {"fp16", "fp32"}) {
    for (const std::int64_t tail : {0, 12}) {
      SCOPED_TRACE(dtype + " tail=" + std::to_string(tail));
      const CompileResult r = compile({name, dtype, shape, {{"tail", tail}, {"block", 256}}, "sm_90a"});
      ASSERT_GE(r.cubin.size(), 4u);
      EXPECT_EQ(std::memcmp(r.cubin.data(), "\x7f" "ELF", 4), 0);
      EXPECT_NE(r.ptx.find(r.lowered_name), std::string::npos);
    }
    const auto reference = codegen::specialize_reference(templates::find_kernel(name), shape, dtype);
    const auto module = codegen::Compiler().compile(reference, "sm_90a").module;
    EXPECT_NE(module->ptx.find(module->lowered_name), std::string::npos);
  }
}

// The device's compare kernel for every dtype an output can have: the gpu tier compiles the same.
TEST(WrongTail, TheCompareKernelCompilesForEveryDtype) {
  for (const std::string dtype : {"fp32", "fp16", "bf16", "u8", "u32"}) {
    SCOPED_TRACE(dtype);
    const auto module =
        codegen::Compiler().compile(tuner::compare_source(templates::dtype_info(dtype)), "sm_90a").module;
    EXPECT_NE(module->ptx.find(module->lowered_name), std::string::npos);
    EXPECT_NE(module->ptx.find(".max.u64"), std::string::npos) << "the first bad element";
  }
}

TEST(WrongTail, TheSimulatedDeviceRejectsItThoughItsL2ErrorPasses) {
  // A host reference instead of the CUDA one, so the simulated device has outputs to verify.
  auto manifest = nlohmann::json::parse(read_text(kDir + "wrong_tail.json"));
  manifest.erase("reference");
  manifest.erase("header_file");
  const std::string name = register_kernel(manifest.dump(), read_text(kDir + "wrong_tail.cuh"),
                                           [](const std::vector<std::vector<double>>& inputs, const Shape&) {
                                             std::vector<double> c(inputs.at(0).size());
                                             for (std::size_t i = 0; i < c.size(); ++i) c[i] = inputs[0][i] + inputs[1][i];
                                             return std::vector<std::vector<double>>{c};
                                           });
  // 2^23 elements: the 12 zeros' relative L2 error is at most sqrt((6.9 / 2442)^2 + (2^-11)^2)
  // = 2.9e-3, below the manifest's 4e-3 (wrong_tail.cuh has the arithmetic for 2^24).
  const std::int64_t n = std::int64_t{1} << 23;
  TuneOptions options;
  options.simulated_device = true;
  options.strategy = "exhaustive";
  const TuneReport report = tune({name, "fp16", {{"n", n}}, "wrong tail"}, options);
  testing::check_wrong_tail_report(report, n, 2.9e-3);
}

}  // namespace
}  // namespace gmjit
