#pragma once
// The nvrtc tier's compile sweeps: many specializations of one kernel compiled for sm_90a on
// every core, each module checked, and the problems gathered into one failure that names every
// offending specialization rather than stopping at the first.

#include <gtest/gtest.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "codegen/compiler.hpp"
#include "gmjit/error.hpp"
#include "templates/registry.hpp"

namespace gmjit::testing {

inline constexpr const char* kArch = "sm_90a";

struct CompileItem {
  std::string dtype;
  Shape shape;
  Config config;
};

struct CompileOutcome {
  std::size_t compiled = 0;
  int most_registers = 0;
  std::vector<std::string> problems;
};

// What one module got wrong, in a few words; empty when it is right.
using ModuleCheck = std::function<std::string(const CompileItem&, const codegen::CompiledModule&)>;

// Every valid configuration of `kernel` at each shape, in each dtype. A shape without one would
// leave the sweep nothing to prove there.
inline std::vector<CompileItem> every_valid_config(const templates::KernelDescriptor& kernel,
                                                   const std::vector<std::string>& dtypes,
                                                   const std::vector<Shape>& shapes) {
  std::vector<CompileItem> items;
  for (const auto& dtype : dtypes) {
    for (const auto& shape : shapes) {
      const auto configs = templates::valid_configs(kernel, shape);
      EXPECT_FALSE(configs.empty()) << format_assignments(shape);
      for (const auto& config : configs) items.push_back({dtype, shape, config});
    }
  }
  return items;
}

// A memory-bound kernel that spills moves its registers through local memory, i.e. through the
// same DRAM and L2 it is bound by; `limit` is the bytes of stack ptxas may choose to park anyway.
inline std::string spills_beyond(const ResourceUsage& r, int limit) {
  if (!r.spills_known) return "no ptxas report";
  if (r.spill_store_bytes > limit || r.spill_load_bytes > limit || r.stack_bytes > limit) {
    return fmt::format("{} B spill stores, {} B spill loads, {} B stack", r.spill_store_bytes, r.spill_load_bytes,
                       r.stack_bytes);
  }
  return {};
}

// How a test changes a generated source before compiling it (gemm's skinny kernels compile
// against their own header while gemm.cuh is elsewhere).
using SourceEdit = std::function<void(codegen::GeneratedSource&)>;

// Compiles every item through `compiler` for `arch` on all cores (NVRTC is thread-safe) and
// checks each module; a failed compile is a problem too, reported with NVRTC's whole log. Expects
// every item compiled without a problem.
inline CompileOutcome compile_each(codegen::Compiler& compiler, const templates::KernelDescriptor& kernel,
                                   const std::vector<CompileItem>& items, const ModuleCheck& check,
                                   const std::string& arch = kArch, const SourceEdit& edit = {}) {
  std::atomic<std::size_t> next{0};
  std::mutex mutex;
  CompileOutcome outcome;
  auto work = [&] {
    for (std::size_t i = next++; i < items.size(); i = next++) {
      auto source = codegen::specialize(kernel, items[i].shape, items[i].dtype, items[i].config);
      if (edit) edit(source);
      std::string problem;
      int registers = 0;
      try {
        const auto module = compiler.compile(source, arch).module;
        registers = module->resources.registers;
        problem = check(items[i], *module);
      } catch (const Error& e) {
        problem = std::string(e.what()) + "\n" + e.log();
      }
      std::lock_guard<std::mutex> lock(mutex);
      ++outcome.compiled;
      outcome.most_registers = std::max(outcome.most_registers, registers);
      if (!problem.empty()) {
        outcome.problems.push_back(fmt::format("{} {} {}: {}", source.name_expression, items[i].dtype,
                                               format_assignments(items[i].shape), problem));
      }
    }
  };
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < std::max(2u, std::thread::hardware_concurrency()); ++t) threads.emplace_back(work);
  for (auto& t : threads) t.join();
  EXPECT_EQ(outcome.compiled, items.size());
  EXPECT_TRUE(outcome.problems.empty()) << outcome.problems.size() << " of " << items.size() << ":\n"
                                        << fmt::format("{}", fmt::join(outcome.problems, "\n"));
  std::printf("[ compiled ] %zu %s kernels for %s, at most %d registers\n", items.size(), kernel.name.c_str(),
              arch.c_str(), outcome.most_registers);
  return outcome;
}

}  // namespace gmjit::testing
