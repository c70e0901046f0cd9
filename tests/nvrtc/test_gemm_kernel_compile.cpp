// The mma.sync GEMM template (templates/gmjit/gemm.cuh) before it has a descriptor: its rule
// function agrees with the host mirror a descriptor keeps, and every valid configuration of the
// tuner's domain compiles with NVRTC for sm_80, sm_89 and sm_90a to code that uses the tensor
// cores through ldmatrix and cp.async and keeps its accumulators out of local memory.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "codegen/compiler.hpp"
#include "gmjit/error.hpp"

namespace gmjit {
namespace {

struct MmaConfig {
  int bm, bn, bk, warps_m, warps_n, stages;
};

// The host mirror of gemm_detail::mma_config_violation_code, as a descriptor keeps it; the
// RulesAgreeWithTheHeader test holds the two to the same answers.
int violation_code(const MmaConfig& c) {
  const int warps = c.warps_m * c.warps_n;
  if (c.bk != 32 && c.bk != 64) return 1;
  if (c.bm <= 0 || c.bn <= 0 || c.bm % 64 != 0 || c.bn % 64 != 0) return 2;
  if (c.warps_m < 1 || c.warps_n < 1 || warps < 2 || warps > 8) return 3;
  if (c.bm % (16 * c.warps_m) != 0 || c.bn % (16 * c.warps_n) != 0) return 4;
  if (c.bm / c.warps_m > 64 || c.bn / c.warps_n > 64) return 5;
  if ((c.bm * c.bk / 8) % (warps * 32) != 0 || (c.bn * c.bk / 8) % (warps * 32) != 0) return 6;
  if (c.stages < 2) return 7;
  if (c.stages * (c.bm + c.bn) * c.bk * 2 > 232448) return 8;
  return 0;
}

// The tuner's domain (kGroupM and the split do not enter the rules).
std::vector<MmaConfig> domain() {
  std::vector<MmaConfig> out;
  for (const int bm : {64, 128, 256})
    for (const int bn : {64, 128, 256})
      for (const int bk : {32, 64})
        for (const int wm : {1, 2, 4})
          for (const int wn : {1, 2, 4})
            for (const int stages : {2, 3, 4, 5}) out.push_back({bm, bn, bk, wm, wn, stages});
  return out;
}

std::vector<MmaConfig> valid_domain() {
  std::vector<MmaConfig> out;
  for (const auto& c : domain()) {
    if (violation_code(c) == 0) out.push_back(c);
  }
  return out;
}

codegen::GeneratedSource gemm_source(const std::string& name_expression, const std::string& file_name,
                                     const std::string& extra = {}) {
  codegen::GeneratedSource source;
  source.kernel = "gemm_mma";
  source.header = "gmjit/gemm.cuh";
  source.name_expression = name_expression;
  source.file_name = file_name;
  source.source = "#include \"gmjit/gemm.cuh\"\n" + extra;
  return source;
}

TEST(GemmMmaRules, RulesAgreeWithTheHeader) {
  // The domain plus configurations outside it that reach each code, checked in one compile.
  std::vector<MmaConfig> configs = domain();
  const std::vector<MmaConfig> outside = {
      {128, 128, 16, 2, 2, 3}, {128, 128, 128, 2, 2, 3}, {96, 128, 32, 2, 2, 3}, {128, 32, 32, 2, 2, 3},
      {128, 128, 32, 1, 1, 3}, {128, 128, 32, 0, 2, 3},  {192, 64, 32, 3, 1, 3},  {64, 128, 32, 1, 16, 3},
      {192, 64, 32, 3, 2, 3},  {64, 128, 32, 8, 1, 3},  {128, 128, 32, 2, 2, 1},  {128, 128, 64, 2, 4, 8}, {128, 256, 64, 2, 4, 5}};
  configs.insert(configs.end(), outside.begin(), outside.end());
  std::array<int, 9> seen{};
  std::string asserts;
  for (const auto& c : configs) {
    const int code = violation_code(c);
    ++seen[static_cast<std::size_t>(code)];
    asserts += fmt::format(
        "static_assert(gmjit::gemm_detail::mma_config_violation_code({}, {}, {}, {}, {}, {}) == {}, \"{} {} {} {} {} {}\");\n",
        c.bm, c.bn, c.bk, c.warps_m, c.warps_n, c.stages, code, c.bm, c.bn, c.bk, c.warps_m, c.warps_n, c.stages);
    asserts += fmt::format("static_assert(gmjit::gemm_detail::mma_smem_bytes({}, {}, {}, {}) == {}, \"smem\");\n", c.bm,
                           c.bn, c.bk, c.stages, c.stages * (c.bm + c.bn) * c.bk * 2);
  }
  for (int code = 0; code <= 8; ++code) EXPECT_GT(seen[static_cast<std::size_t>(code)], 0) << "no case of code " << code;
  asserts += "__global__ void gemm_rules_probe() {}\n";
  codegen::Compiler compiler;
  try {
    compiler.compile(gemm_source("gemm_rules_probe", "gemm_rules.cu", asserts), "sm_80");
  } catch (const Error& e) {
    FAIL() << e.what() << "\n" << e.log();
  }
}

TEST(GemmMmaRules, EachViolationIsAStaticAssert) {
  // One configuration per code: the template refuses it with the code's message rather than
  // compiling something wrong.
  const std::vector<std::pair<MmaConfig, int>> cases = {
      {{128, 128, 16, 2, 2, 3}, 1}, {{96, 128, 32, 2, 2, 3}, 2}, {{128, 128, 32, 4, 4, 3}, 3},
      {{64, 128, 32, 8, 1, 3}, 4},  {{128, 128, 32, 1, 2, 3}, 5},  {{192, 64, 32, 3, 1, 3}, 6},
      {{128, 128, 32, 2, 2, 1}, 7}, {{128, 256, 64, 2, 4, 5}, 8}};
  codegen::Compiler compiler;
  for (const auto& [c, code] : cases) {
    ASSERT_EQ(violation_code(c), code);
    const auto expression = fmt::format("gmjit::gemm_mma<__nv_bfloat16, false, {}, {}, {}, {}, {}, {}, 1, true>", c.bm,
                                        c.bn, c.bk, c.warps_m, c.warps_n, c.stages);
    try {
      compiler.compile(gemm_source(expression, fmt::format("gemm_bad_{}.cu", code)), "sm_80");
      ADD_FAILURE() << expression << " compiled; expected violation " << code;
    } catch (const Error& e) {
      EXPECT_NE(e.log().find(fmt::format("(violation {})", code)), std::string::npos) << expression << "\n" << e.log();
    }
  }
}

// Every valid configuration, compiled once for each architecture; the variants that do not enter
// the rules (dtype, B's layout, the aligned path, kGroupM) rotate with the configuration
// and the architecture, so each is compiled many times over and with many tile shapes.
TEST(GemmMmaCompile, EveryValidConfigurationForEachArchitecture) {
  struct Item {
    MmaConfig c;
    std::string arch;
    std::string dtype;
    bool trans_b;
    bool aligned;
    int group_m;
  };
  const std::array<const char*, 3> archs = {"sm_80", "sm_89", "sm_90a"};
  std::vector<Item> items;
  const auto configs = valid_domain();
  for (std::size_t i = 0; i < configs.size(); ++i) {
    for (std::size_t a = 0; a < archs.size(); ++a) {
      const std::size_t variant = (i * archs.size() + a) % 8;  // walks all 8 (dtype, trans_b, aligned)
      items.push_back({configs[i], archs[a], (variant & 1) ? "__half" : "__nv_bfloat16", (variant & 2) != 0,
                       (variant & 4) == 0, ((i + a) / 2) % 2 ? 8 : 1});
    }
  }
  std::printf("[ gemm_mma ] %zu valid configurations, %zu compiles\n", configs.size(), items.size());

  std::atomic<std::size_t> next{0};
  std::mutex mutex;
  std::vector<std::string> problems;
  std::size_t compiled = 0;
  int most_registers = 0;
  const auto started = std::chrono::steady_clock::now();
  auto work = [&] {
    for (std::size_t i = next++; i < items.size(); i = next++) {
      const auto& it = items[i];
      const auto& c = it.c;
      const auto expression = fmt::format("gmjit::gemm_mma<{}, {}, {}, {}, {}, {}, {}, {}, {}, {}>", it.dtype,
                                          it.trans_b, c.bm, c.bn, c.bk, c.warps_m, c.warps_n, c.stages, it.group_m,
                                          it.aligned);
      std::vector<std::string> wrong;
      int registers = 0;
      try {
        // A compiler per item: nothing is compiled twice, so keeping every module in memory
        // would only grow the process.
        codegen::Compiler compiler;
        const auto module = compiler.compile(gemm_source(expression, fmt::format("gemm_{}.cu", i)), it.arch).module;
        const auto& ptx = module->ptx;
        const auto& r = module->resources;
        registers = r.registers;
        auto need = [&](const char* text, bool present) {
          if ((ptx.find(text) != std::string::npos) != present) {
            wrong.push_back(fmt::format("PTX {} '{}'", present ? "lacks" : "has", text));
          }
        };
        need(it.dtype == "__half" ? "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
                                  : "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
             true);
        need("ldmatrix.sync.aligned.m8n8.x4.shared.b16", true);
        need("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16", !it.trans_b);
        // The unaligned path gathers elements itself; the ring's commit/wait groups stay.
        need("cp.async.cg.shared.global", it.aligned);
        need("cp.async.wait_group", true);
        need(".global.add.f32", true);  // red or atom: the split-K partials (the split is the grid's z)
        if (!r.spills_known) wrong.push_back("no ptxas report");
        // The aligned path keeps nothing in local memory. The element-wise path (correctness over
        // speed) may park a few bytes: with ptxas 13.0, sm_80, fp16 x @ W^T configurations of 8
        // warps with 32 x 64 warp tiles spilled 8 bytes to stay at the 128-register step (two
        // blocks an SM).
        const int allowed = it.aligned ? 0 : 16;
        if (r.spill_store_bytes > allowed || r.spill_load_bytes > allowed || r.stack_bytes > allowed) {
          wrong.push_back(fmt::format("{} B spill stores, {} B spill loads, {} B stack", r.spill_store_bytes,
                                      r.spill_load_bytes, r.stack_bytes));
        }
        if (r.shared_bytes != 0) wrong.push_back(fmt::format("{} B static shared memory", r.shared_bytes));
      } catch (const Error& e) {
        wrong.push_back(std::string(e.what()) + "\n" + e.log());
      }
      std::lock_guard<std::mutex> lock(mutex);
      ++compiled;
      most_registers = std::max(most_registers, registers);
      if (!wrong.empty()) problems.push_back(fmt::format("{} {}: {}", expression, it.arch, fmt::join(wrong, "; ")));
    }
  };
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < std::max(2u, std::thread::hardware_concurrency()); ++t) threads.emplace_back(work);
  for (auto& t : threads) t.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  EXPECT_EQ(compiled, items.size());
  EXPECT_TRUE(problems.empty()) << problems.size() << " of " << items.size() << ":\n"
                                << fmt::format("{}", fmt::join(problems, "\n"));
  std::printf("[ compiled ] %zu gemm_mma kernels in %.0f s, at most %d registers\n", compiled, seconds, most_registers);
}

}  // namespace
}  // namespace gmjit
