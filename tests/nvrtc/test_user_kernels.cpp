#include <gtest/gtest.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "codegen/compiler.hpp"
#include "gmjit/compile.hpp"
#include "gmjit/error.hpp"
#include "gmjit/kernels.hpp"
#include "templates/registry.hpp"

namespace gmjit {
namespace {

constexpr const char* kArch = "sm_90a";
const std::string kManifest = std::string(GMJIT_SOURCE_DIR) + "/tests/data/broken/broken.json";
const Shape kShape{{"n", 1000003}};

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

CompileRequest request(const Config& config) { return {"broken", "fp32", kShape, config, kArch}; }

// The isolation tests on the GPU rely on this: every broken mode except 1 is a kernel NVRTC
// accepts, and mode 1 is rejected as a compile error, not as any other failure.
TEST(UserKernels, EveryBrokenModeCompilesExceptModeOne) {
  ASSERT_EQ(register_kernel_file(kManifest), "broken");
  const auto configs = templates::all_configs(templates::find_kernel("broken"));
  ASSERT_EQ(configs.size(), 18u);
  std::atomic<std::size_t> next{0};
  std::mutex mutex;
  std::vector<std::string> failures;
  std::size_t compiled = 0, rejected = 0;
  auto work = [&] {
    for (std::size_t i = next++; i < configs.size(); i = next++) {
      const Config& config = configs[i];
      const std::string label = format_assignments(config);
      std::string problem;
      bool ok = false;
      try {
        const CompileResult r = compile(request(config));
        ok = true;
        if (config.at("mode") == 1) {
          problem = "mode 1 compiled";
        } else if (r.cubin.size() < 4 || std::memcmp(r.cubin.data(),
                                                     "\x7f"
                                                     "ELF",
                                                     4) != 0) {
          problem = "cubin is not an ELF image";
        } else if (r.ptx.find(".target sm_90a") == std::string::npos) {
          problem = "PTX does not target sm_90a";
        } else if (r.ptx.find(r.lowered_name) == std::string::npos) {
          problem = "lowered name missing from PTX";
        } else if (r.name_expression !=
                   fmt::format("user::broken<float, {}, {}>", config.at("mode"), config.at("block"))) {
          problem = "name expression " + r.name_expression;
        } else if (config.at("mode") == 4 && r.ptx.find("ld.volatile.global") == std::string::npos) {
          problem = "the spin loop's volatile load was compiled away";
        }
      } catch (const Error& e) {
        if (config.at("mode") != 1) {
          problem = std::string(e.what()) + "\n" + e.log();
        } else if (e.kind() != ErrorKind::compile) {
          problem = std::string("mode 1 failed as ") + to_string(e.kind()) + ", not compile: " + e.what();
        } else if (e.log().find("mode 1 fails to compile on purpose") == std::string::npos) {
          problem = "mode 1's log lacks the static_assert: " + e.log();
        }
      }
      std::lock_guard lock(mutex);
      (ok ? compiled : rejected) += 1;
      if (!problem.empty()) failures.push_back(label + ": " + problem);
    }
  };
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < std::max(2u, std::thread::hardware_concurrency()); ++t) threads.emplace_back(work);
  for (auto& t : threads) t.join();
  EXPECT_TRUE(failures.empty()) << failures.size() << " problems, first: " << failures.front();
  EXPECT_EQ(compiled, 15u);
  EXPECT_EQ(rejected, 3u);
}

TEST(UserKernels, CompileTakesTheBuiltInPath) {
  ASSERT_EQ(register_kernel_file(kManifest), "broken");
  const auto& kernel = templates::find_kernel("broken");
  const Config config{{"mode", 0}, {"block", 256}};
  const CompileResult r = compile(request(config));
  // The generated unit, its key and its identity are the ones codegen gives any descriptor.
  const auto generated = codegen::specialize(kernel, kShape, "fp32", config);
  EXPECT_EQ(r.source, generated.source);
  EXPECT_NE(r.source.find("#include \"user/broken.cuh\""), std::string::npos) << r.source;
  EXPECT_EQ(r.compile_key, codegen::compile_key(generated, kArch));
  EXPECT_EQ(r.template_hash, templates::template_hash("user/broken.cuh"));
  EXPECT_EQ(r.file_name, "broken_fp32_block256_mode0.cu");
  EXPECT_GT(r.resources.registers, 0);
  EXPECT_TRUE(compile(request(config)).memory_cache_hit);
  const auto description = nlohmann::json::parse(resources_json(r));
  EXPECT_EQ(description["kernel"], "broken");
  EXPECT_EQ(description["template_hash"], r.template_hash);
  // Defaults fill in as for a built-in.
  EXPECT_EQ(compile({"broken", "", kShape, {}, kArch}).config, (Config{{"mode", 0}, {"block", 128}}));

  const auto reference = codegen::specialize_reference(kernel, {{"n", 9}}, "fp32");
  EXPECT_EQ(reference.header, "user/broken.cuh");
  const auto module = codegen::Compiler().compile(reference, kArch).module;
  EXPECT_NE(module->ptx.find(module->lowered_name), std::string::npos);
}

TEST(UserKernels, OneByteOfTheHeaderChangesTheCompileKey) {
  ASSERT_EQ(register_kernel_file(kManifest), "broken");
  const std::string manifest = read_text(kManifest);
  const std::string original = templates::find_kernel("broken").header_source;
  const Config config{{"mode", 5}, {"block", 64}};
  const CompileResult before = compile(request(config));

  std::string edited = original;
  const std::size_t at = edited.find("deliberately broken");
  ASSERT_NE(at, std::string::npos);
  edited[at] = 'D';
  ASSERT_EQ(register_kernel(manifest, edited), "broken");
  const CompileResult changed = compile(request(config));
  EXPECT_NE(changed.compile_key, before.compile_key);
  EXPECT_NE(changed.template_hash, before.template_hash);
  EXPECT_FALSE(changed.memory_cache_hit) << "a new key compiles again";
  EXPECT_EQ(changed.source, before.source) << "only the header differs";

  ASSERT_EQ(register_kernel(manifest, original), "broken");
  const CompileResult restored = compile(request(config));
  EXPECT_EQ(restored.compile_key, before.compile_key);
  EXPECT_TRUE(restored.memory_cache_hit);
}

}  // namespace
}  // namespace gmjit
