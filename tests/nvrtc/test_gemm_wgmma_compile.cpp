// gemm's Hopper family (wgmma=1, templates/gmjit/gemm_wgmma.cuh) through its descriptor: the
// descriptor's rules agree with the header's, and every valid configuration compiles with NVRTC
// for sm_90a, in both layouts and dtypes, to code that loads through TMA onto mbarriers, multiplies
// with wgmma, rebalances registers with setmaxnreg, stores through TMA when tma_store=1 and keeps
// nothing in local memory; where a disassembler is installed, each kernel body's SASS holds HGMMA
// and no local-memory access.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "codegen/compiler.hpp"
#include "codegen/toolkit.hpp"
#include "gmjit/device.hpp"
#include "gmjit/error.hpp"
#include "templates/registry.hpp"

namespace gmjit {
namespace {

Shape gemm_shape(std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t trans_b) {
  return {{"m", m}, {"n", n}, {"k", k}, {"trans_b", trans_b}};
}

const templates::KernelDescriptor& gemm() { return templates::find_kernel("gemm"); }

Config wgmma_config(std::int64_t bm, std::int64_t bn, std::int64_t stages, std::int64_t consumers,
                    std::int64_t pingpong = 0, std::int64_t tma_store = 0) {
  Config c = gemm().default_config;
  c["wgmma"] = 1, c["bk"] = 64, c["bm"] = bm, c["bn"] = bn, c["stages"] = stages, c["consumers"] = consumers;
  c["pingpong"] = pingpong, c["tma_store"] = tma_store;
  return c;
}

// The descriptor's verdict on every (bm, bn, stages, consumers, pingpong, tma_store) of a wider domain than its own
// equals the header's constexpr rule function, checked by static_asserts in one compile; a shape
// where nothing else can reject them.
TEST(GemmWgmmaRules, DescriptorAgreesWithTheHeader) {
  const Shape shape = gemm_shape(4096, 4096, 4096, 1);
  std::string asserts;
  std::size_t valid = 0, invalid = 0;
  for (const std::int64_t bm : {64, 128, 192, 256, 384}) {
    for (const std::int64_t bn : {32, 64, 128, 192, 256}) {
      for (const std::int64_t stages : {1, 2, 3, 4, 5, 6, 8, 10, 12}) {
        for (const std::int64_t consumers : {1, 2, 3}) {
          for (const std::int64_t tma_store : {0, 1}) {
            for (const std::int64_t pingpong : {0, 1}) {
              const bool ok =
                  gemm().violation(wgmma_config(bm, bn, stages, consumers, pingpong, tma_store), shape).empty();
              ++(ok ? valid : invalid);
              asserts += fmt::format(
                  "static_assert((gmjit::wgmma_detail::wgmma_config_violation_code({}, {}, {}, {}, {}, 1, {}) == 0) "
                  "== {}, \"{} {} {} {} {} {}\");\n",
                  bm, bn, stages, consumers, pingpong, tma_store, ok, bm, bn, stages, consumers, pingpong, tma_store);
            }
            asserts += fmt::format(
                "static_assert(gmjit::wgmma_detail::wgmma_smem_bytes({}, {}, {}, {}, {}) == {}, \"smem\");\n", bm,
                bn, stages, consumers, tma_store, 1056 + stages * ((bm + bn) * 128 + 16) + tma_store * consumers * 16384);
          }
        }
      }
    }
  }
  EXPECT_GT(valid, 180u);
  EXPECT_GT(invalid, 1200u);
  asserts += "__global__ void gemm_wgmma_rules_probe() {}\n";
  codegen::GeneratedSource source;
  source.kernel = "gemm_wgmma";
  source.header = "gmjit/gemm_kernels.cuh";
  source.name_expression = "gemm_wgmma_rules_probe";
  source.file_name = "gemm_wgmma_rules.cu";
  source.source = "#include \"gmjit/gemm_kernels.cuh\"\n" + asserts;
  codegen::Compiler compiler;
  try {
    compiler.compile(source, "sm_90a");
  } catch (const Error& e) {
    FAIL() << e.what() << "\n" << e.log();
  }
}

TEST(GemmWgmmaRules, LeavesWhatTmaCannotDescribeToTheMmaFamily) {
  const Config c = wgmma_config(128, 128, 4, 2);
  EXPECT_EQ(gemm().violation(c, gemm_shape(512, 512, 512, 1)), "");
  EXPECT_NE(gemm().violation(c, gemm_shape(512, 512, 500, 1)).find("left to wgmma=0"), std::string::npos);
  EXPECT_NE(gemm().violation(c, gemm_shape(512, 509, 512, 0)).find("left to wgmma=0"), std::string::npos);
  // Every shape keeps a valid configuration: the mma family takes the ones above.
  for (const auto& s : {gemm_shape(512, 512, 500, 1), gemm_shape(512, 509, 512, 0)}) {
    EXPECT_EQ(gemm().violation(gemm().default_config, s), "");
  }
}

struct Item {
  Config config;
  Shape shape;
  std::string dtype;
};

std::shared_ptr<const codegen::CompiledModule> compile_for_sm90a(const Item& it) {
  return codegen::Compiler().compile(codegen::specialize(gemm(), it.shape, it.dtype, it.config), "sm_90a").module;
}

// What is wrong with one configuration's sm_90a compile (empty when nothing): TMA onto mbarriers,
// the wgmma of its bn, setmaxnreg, no serialised wgmma, nothing in local memory.
std::vector<std::string> compile_problems(const Item& it, int& registers) {
  std::vector<std::string> wrong;
  try {
    const auto module = compile_for_sm90a(it);
    const auto& ptx = module->ptx;
    const auto& r = module->resources;
    registers = r.registers;
    auto need = [&](const std::string& text) {
      if (ptx.find(text) == std::string::npos) wrong.push_back(fmt::format("PTX lacks '{}'", text));
    };
    need(fmt::format("wgmma.mma_async.sync.aligned.m64n{}k16.f32.{}", it.config.at("bn"),
                     it.dtype == "bf16" ? "bf16.bf16" : "f16.f16"));
    need("cp.async.bulk.tensor.2d");
    need("mbarrier::complete_tx::bytes");
    need("setmaxnreg.dec");
    need("setmaxnreg.inc");
    need("wgmma.wait_group");
    // tma_store=1 stores C's chunks through TMA after fencing the consumers' shared-memory writes
    // into the async proxy; the register epilogue stores nothing through TMA.
    const bool tma_stores = ptx.find("cp.async.bulk.tensor.2d.global.shared::cta") != std::string::npos;
    if (it.config.at("tma_store") != 0) {
      need("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group");
      need("fence.proxy.async.shared::cta");
      need("cp.async.bulk.wait_group.read");
    } else if (tma_stores) {
      wrong.push_back("tma_store=0 stores through TMA");
    }
    // ptxas falls back to issuing the wgmmas one at a time, and says so only in its log, when
    // something other than a wgmma touches the accumulators inside the pipeline (C7520; the
    // fence or wait it injects is reported as C7517 / C7519).
    for (const char* code : {"C7517", "C7519", "C7520"}) {
      if (module->log.find(code) != std::string::npos) wrong.push_back(fmt::format("ptxas {}", code));
    }
    if (!r.spills_known) wrong.push_back("no ptxas report");
    if (r.spill_store_bytes > 0 || r.spill_load_bytes > 0 || r.stack_bytes > 0) {
      wrong.push_back(fmt::format("{} B spill stores, {} B spill loads, {} B stack", r.spill_store_bytes,
                                  r.spill_load_bytes, r.stack_bytes));
    }
  } catch (const Error& e) {
    wrong.push_back(std::string(e.what()) + "\n" + e.log());
  }
  return wrong;
}

// Runs `check` on every item across the cores and fails the test with each item's problems.
void check_on_every_core(const std::vector<Item>& items,
                         const std::function<std::vector<std::string>(const Item&)>& check) {
  std::atomic<std::size_t> next{0};
  std::atomic<std::size_t> checked{0};
  std::mutex mutex;
  std::vector<std::string> problems;
  auto work = [&] {
    for (std::size_t i = next++; i < items.size(); i = next++) {
      const auto wrong = check(items[i]);
      ++checked;
      if (wrong.empty()) continue;
      std::lock_guard<std::mutex> lock(mutex);
      problems.push_back(
          fmt::format("{} {}: {}", format_assignments(items[i].config), items[i].dtype, fmt::join(wrong, "; ")));
    }
  };
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < std::max(2u, std::thread::hardware_concurrency()); ++t) threads.emplace_back(work);
  for (auto& t : threads) t.join();
  EXPECT_EQ(checked.load(), items.size());
  EXPECT_TRUE(problems.empty()) << problems.size() << " of " << items.size() << ":\n"
                                << fmt::format("{}", fmt::join(problems, "\n"));
}

// Compiles the items on every core; fails the test with each item's problems.
void compile_all(const std::vector<Item>& items) {
  std::mutex mutex;
  int most_registers = 0;
  const auto started = std::chrono::steady_clock::now();
  check_on_every_core(items, [&](const Item& it) {
    int registers = 0;
    auto wrong = compile_problems(it, registers);
    std::lock_guard<std::mutex> lock(mutex);
    most_registers = std::max(most_registers, registers);
    return wrong;
  });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::printf("[ compiled ] %zu gemm_wgmma kernels in %.0f s, at most %d registers\n", items.size(), seconds,
              most_registers);
}

// Every valid configuration of the family at a shape where all of them are valid, in each dtype
// and layout (the shape enters the kernel only through trans_b), compiled for sm_90a.
TEST(GemmWgmmaCompile, EveryValidConfigurationForSm90a) {
  std::vector<Item> items;
  for (const char* dtype : {"bf16", "fp16"}) {
    for (const std::int64_t trans_b : {0, 1}) {
      const Shape shape = gemm_shape(4096, 4096, 4096, trans_b);
      for (const auto& c : templates::valid_configs(gemm(), shape)) {
        if (c.at("wgmma") == 1) items.push_back({c, shape, dtype});
      }
    }
  }
  std::printf("[ wgmma    ] %zu valid configurations over 2 dtypes x 2 layouts\n", items.size());
  ASSERT_GT(items.size(), 100u);

  compile_all(items);
}

// What the SASS of one configuration lacks or holds that it should not (empty when nothing): the
// HGMMA of its tile, at least as many a k-tile as its consumer's rows of 64 take, TMA loads, and no
// local memory (LDL/STL), which the PTX and ptxas's report cannot show after ptxas's own choices.
std::vector<std::string> sass_problems(const Item& it) {
  std::vector<std::string> wrong;
  try {
    const auto module = compile_for_sm90a(it);
    std::string why_not;
    const auto sass = codegen::disassemble(module->cubin, why_not);
    if (!sass) return {why_not};
    // fp16 is HGMMA's default type, which nvdisasm leaves unwritten.
    const std::string hgmma =
        fmt::format("HGMMA.64x{}x16.F32{} ", it.config.at("bn"), it.dtype == "bf16" ? ".BF16" : "");
    // B in k x n rows (trans_b=0) is read from shared memory transposed; B^T as it is.
    const bool transposed_b = it.shape.at("trans_b") == 0;
    std::size_t hgmmas = 0, wrong_layout = 0;
    for (auto at = sass->find(hgmma); at != std::string::npos; at = sass->find(hgmma, at + 1)) {
      ++hgmmas;
      const auto operands = sass->substr(at, sass->find(';', at) - at);
      wrong_layout += (operands.find(".tnspB") != std::string::npos) != transposed_b;
    }
    if (wrong_layout > 0) {
      wrong.push_back(fmt::format("{} HGMMA {} .tnspB", wrong_layout, transposed_b ? "without" : "with"));
    }
    // A cooperative tile splits its rows between the consumers; a pingpong consumer takes them all.
    const auto rows_of_64 = it.config.at("bm") / 64 / (it.config.at("pingpong") != 0 ? 1 : it.config.at("consumers"));
    const auto per_k_tile = static_cast<std::size_t>(rows_of_64 * it.config.at("bk") / 16);
    if (hgmmas < per_k_tile) wrong.push_back(fmt::format("{} '{}' where a k-tile takes {}", hgmmas, hgmma, per_k_tile));
    if (sass->find("UTMALDG") == std::string::npos) wrong.push_back("no UTMALDG");
    for (const char* local : {" LDL", " STL"}) {
      if (sass->find(local) != std::string::npos) wrong.push_back(fmt::format("SASS has{}", local));
    }
  } catch (const Error& e) {
    wrong.push_back(std::string(e.what()) + "\n" + e.log());
  }
  return wrong;
}

// One configuration of each kernel body the family generates, read in SASS: every parameter but
// the ring's length and the raster group, which only change loop bounds, at the deepest ring that
// fits; split-K at a decode batch, where it is valid. The layouts and dtypes of gemm.json.
TEST(GemmWgmmaSass, EveryKernelBodyHasHgmmaAndNoLocalMemory) {
  if (!codegen::disassembler_command()) {
    GTEST_SKIP() << "no nvdisasm or cuobjdump on PATH or in the CUDA toolkit (scripts/install-deps.sh installs "
                    "nvdisasm from PyPI)";
  }
  std::map<std::string, Item> deepest;
  for (const auto& [dtype, trans_b] : {std::pair<const char*, std::int64_t>{"bf16", 1}, {"fp16", 0}}) {
    for (const auto& shape : {gemm_shape(4096, 4096, 4096, trans_b), gemm_shape(64, 4096, 4096, trans_b)}) {
      for (const auto& c : templates::valid_configs(gemm(), shape)) {
        if (c.at("wgmma") != 1) continue;
        Config body = c;
        body.erase("stages");
        body.erase("group_m");
        const auto key = fmt::format("{} {}", dtype, format_assignments(body));
        const auto it = deepest.find(key);
        if (it == deepest.end() || it->second.config.at("stages") < c.at("stages")) deepest[key] = {c, shape, dtype};
      }
    }
  }
  ASSERT_GT(deepest.size(), 50u);
  std::vector<Item> items;
  for (auto& [key, item] : deepest) items.push_back(std::move(item));
  check_on_every_core(items, sass_problems);
  std::printf("[ sass     ] %zu gemm_wgmma kernel bodies disassembled\n", items.size());
}

// The family is sm_90a's alone: elsewhere the tuner drops it before compiling, and the header
// still compiles (its body traps) so a catalog compile for another architecture never breaks.
TEST(GemmWgmmaCompile, OtherArchitecturesSkipIt) {
  DeviceInfo ada;
  ada.arch = "sm_89";
  DeviceInfo hopper;
  hopper.arch = "sm_90a";
  const Config c = wgmma_config(128, 256, 4, 2);
  EXPECT_NE(gemm().device_violation(c, ada), "");
  EXPECT_EQ(gemm().device_violation(c, hopper), "");
  EXPECT_EQ(gemm().device_violation(gemm().default_config, ada), "");
  const auto source = codegen::specialize(gemm(), gemm_shape(256, 256, 256, 1), "bf16", c);
  codegen::Compiler compiler;
  try {
    const auto module = compiler.compile(source, "sm_89").module;
    EXPECT_EQ(module->ptx.find("wgmma.mma_async"), std::string::npos);
    EXPECT_NE(module->ptx.find("trap"), std::string::npos);
  } catch (const Error& e) {
    FAIL() << e.what() << "\n" << e.log();
  }
}

}  // namespace
}  // namespace gmjit
