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

// A memory-bound kernel that spills moves its registers through local memory, i.e. through the
// same DRAM and L2 it is bound by. As for softmax, a few bytes of stack are ptxas's choice:
// with ptxas 13.0 streamed layernorm parks up to 40 bytes of loop state (pointers, the running
// moments) even where 128 registers are allowed, once per row against the row's hundreds of
// bytes per thread, so streamed configurations may spill 48 bytes and cached ones, whose slice
// of the row is what would go, 16. Shapes:
// the benchmark's cached blocks of 16-byte accesses (4096 and 8192 columns), odd rows (single
// elements, every cached variant) and 4-byte (bf16) / 8-byte (fp32) rows.
class NormCompile : public ::testing::TestWithParam<std::string> {};

TEST_P(NormCompile, NoConfigurationSpillsItsRow) {
  const auto& kernel = templates::find_kernel(GetParam());
  struct Item {
    std::string dtype;
    Shape shape;
    Config config;
  };
  std::vector<Item> items;
  for (const std::string dtype : {"fp32", "bf16"}) {
    for (const Shape& shape : {Shape{{"rows", 16384}, {"cols", 8192}}, Shape{{"rows", 128}, {"cols", 4096}},
                               Shape{{"rows", 3}, {"cols", 127}}, Shape{{"rows", 127}, {"cols", 1002}}}) {
      for (const auto& config : templates::valid_configs(kernel, shape)) items.push_back({dtype, shape, config});
    }
  }
  codegen::Compiler compiler;
  std::atomic<std::size_t> next{0};
  std::mutex mutex;
  std::vector<std::string> problems;
  int most_registers = 0;
  auto work = [&] {
    for (std::size_t i = next++; i < items.size(); i = next++) {
      const auto source = codegen::specialize(kernel, items[i].shape, items[i].dtype, items[i].config);
      std::string problem;
      int registers = 0;
      try {
        const auto module = compiler.compile(source, "sm_90a").module;
        const auto& r = module->resources;
        registers = r.registers;
        if (!r.spills_known) {
          problem = "no ptxas report";
        } else if (const int limit = items[i].config.at("cached") != 0 ? 16 : 48;
                   r.spill_store_bytes > limit || r.spill_load_bytes > limit || r.stack_bytes > limit) {
          problem = fmt::format("{} B spill stores, {} B spill loads, {} B stack", r.spill_store_bytes,
                                r.spill_load_bytes, r.stack_bytes);
        }
      } catch (const Error& e) {
        problem = std::string(e.what()) + "\n" + e.log();
      }
      std::lock_guard<std::mutex> lock(mutex);
      most_registers = std::max(most_registers, registers);
      if (!problem.empty()) problems.push_back(source.name_expression + ": " + problem);
    }
  };
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < std::max(2u, std::thread::hardware_concurrency()); ++t) threads.emplace_back(work);
  for (auto& t : threads) t.join();
  EXPECT_TRUE(problems.empty()) << problems.size() << " of " << items.size() << ":\n"
                                << fmt::format("{}", fmt::join(problems, "\n"));
  std::printf("[ compiled ] %zu %s kernels, at most %d registers\n", items.size(), GetParam().c_str(), most_registers);
}

INSTANTIATE_TEST_SUITE_P(Templates, NormCompile, ::testing::Values("rmsnorm", "layernorm"));

}  // namespace
}  // namespace gmjit
