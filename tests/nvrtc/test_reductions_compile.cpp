// vector_sum and histogram through NVRTC for sm_90a: every valid configuration at the benchmark
// shapes and at odd sizes compiles, streams x with 16-byte loads, and keeps everything in
// registers (a spill would go through the DRAM these kernels are bound by).
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "codegen/compiler.hpp"
#include "gmjit/error.hpp"
#include "templates/registry.hpp"

namespace gmjit {
namespace {

struct Item {
  Shape shape;
  Config config;
};

struct Outcome {
  std::size_t compiled = 0;
  int most_registers = 0;
  std::vector<std::string> problems;
};

// `ptx_needs`: text every configuration's PTX must contain (the 16-byte streaming load).
Outcome compile_all(const std::string& name, const std::string& dtype, const std::vector<Shape>& shapes,
                    const std::vector<std::string>& ptx_needs) {
  const auto& kernel = templates::find_kernel(name);
  std::vector<Item> items;
  for (const auto& shape : shapes) {
    const auto configs = templates::valid_configs(kernel, shape);
    EXPECT_FALSE(configs.empty()) << format_assignments(shape);
    for (const auto& config : configs) items.push_back({shape, config});
  }
  codegen::Compiler compiler;
  std::atomic<std::size_t> next{0};
  std::mutex mutex;
  Outcome outcome;
  auto work = [&] {
    for (std::size_t i = next++; i < items.size(); i = next++) {
      const auto source = codegen::specialize(kernel, items[i].shape, dtype, items[i].config);
      std::string problem;
      int registers = 0;
      try {
        const auto module = compiler.compile(source, "sm_90a").module;
        const auto& r = module->resources;
        registers = r.registers;
        const auto expected_shared = kernel.work(items[i].config, items[i].shape, templates::dtype_info(dtype)).shared_bytes;
        if (!r.spills_known) {
          problem = "no ptxas report";
        } else if (r.spill_store_bytes > 0 || r.spill_load_bytes > 0 || r.stack_bytes > 0) {
          problem = fmt::format("{} B spill stores, {} B spill loads, {} B stack", r.spill_store_bytes,
                                r.spill_load_bytes, r.stack_bytes);
        } else if (r.registers <= 0 || r.registers > 65536 / items[i].config.at("block")) {
          problem = fmt::format("{} registers", r.registers);
        } else if (r.shared_bytes < expected_shared || r.shared_bytes > expected_shared + 64) {
          problem = fmt::format("{} B shared, the descriptor models {} B", r.shared_bytes, expected_shared);
        }
        for (const auto& needed : ptx_needs) {
          if (problem.empty() && module->ptx.find(needed) == std::string::npos) problem = "no " + needed + " in the PTX";
        }
      } catch (const Error& e) {
        problem = std::string(e.what()) + "\n" + e.log();
      }
      std::lock_guard<std::mutex> lock(mutex);
      ++outcome.compiled;
      outcome.most_registers = std::max(outcome.most_registers, registers);
      if (!problem.empty()) outcome.problems.push_back(source.name_expression + " " + format_assignments(items[i].shape) + ": " + problem);
    }
  };
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < std::max(2u, std::thread::hardware_concurrency()); ++t) threads.emplace_back(work);
  for (auto& t : threads) t.join();
  EXPECT_EQ(outcome.compiled, items.size());
  EXPECT_TRUE(outcome.problems.empty()) << outcome.problems.size() << " of " << items.size() << ":\n"
                                        << fmt::format("{}", fmt::join(outcome.problems, "\n"));
  std::printf("[ compiled ] %zu %s kernels, at most %d registers\n", items.size(), name.c_str(), outcome.most_registers);
  return outcome;
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
}

}  // namespace
}  // namespace gmjit
