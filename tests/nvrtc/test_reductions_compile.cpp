// vector_sum and histogram through NVRTC for sm_90a: every valid configuration at the benchmark
// shapes and at odd sizes compiles, streams x with 16-byte loads, and keeps everything in
// registers (a spill would go through the DRAM these kernels are bound by).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "nvrtc/compile_support.hpp"
#include "templates/registry.hpp"

namespace gmjit {
namespace {

// `ptx_needs`: text every configuration's PTX must contain (the 16-byte streaming load).
testing::CompileOutcome compile_all(const std::string& name, const std::string& dtype, const std::vector<Shape>& shapes,
                                    const std::vector<std::string>& ptx_needs) {
  const auto& kernel = templates::find_kernel(name);
  codegen::Compiler compiler;
  return testing::compile_each(
      compiler, kernel, testing::every_valid_config(kernel, {dtype}, shapes),
      [&](const testing::CompileItem& item, const codegen::CompiledModule& module) -> std::string {
        const auto& r = module.resources;
        const auto expected_shared = kernel.work(item.config, item.shape, templates::dtype_info(dtype)).shared_bytes;
        if (auto spills = testing::spills_beyond(r, 0); !spills.empty()) return spills;
        if (r.registers <= 0 || r.registers > 65536 / item.config.at("block")) {
          return fmt::format("{} registers", r.registers);
        }
        if (r.shared_bytes < expected_shared || r.shared_bytes > expected_shared + 64) {
          return fmt::format("{} B shared, the descriptor models {} B", r.shared_bytes, expected_shared);
        }
        for (const auto& needed : ptx_needs) {
          if (module.ptx.find(needed) == std::string::npos) return "no " + needed + " in the PTX";
        }
        return {};
      });
}

TEST(ReductionsCompile, EveryVectorSumConfigCompilesWithoutSpills) {
  const auto outcome = compile_all("vector_sum", "fp32",
                                   {Shape{{"n", 52428800}}, Shape{{"n", 1000003}}, Shape{{"n", 127}}, Shape{{"n", 1}}},
                                   {"ld.global.cs.v4.f32", "atom.global.add.u32"});
  EXPECT_GE(outcome.compiled, 60u + 12u + 12u);
}

TEST(ReductionsCompile, EveryHistogramConfigCompilesWithoutSpills) {
  const auto outcome = compile_all("histogram", "u8",
                                   {Shape{{"n", 10485760}, {"contention", 10}}, Shape{{"n", 1000003}, {"contention", 90}},
                                    Shape{{"n", 1}, {"contention", 0}}},
                                   {"ld.global.cs.v4.u32", "atom.shared.add.u32", "atom.global.exch.b32"});
  EXPECT_GE(outcome.compiled, 96u + 27u);
  // The i64 counts of the same kernel: each count widened and stored as 64 bits.
  const auto wide = compile_all("histogram", "u8", {Shape{{"n", 1000003}, {"contention", 90}, {"i64_counts", 1}}},
                                {"atom.shared.add.u32", "atom.global.exch.b32", "st.global.u64"});
  EXPECT_GE(wide.compiled, 27u);
}

}  // namespace
}  // namespace gmjit
