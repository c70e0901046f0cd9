#include <gtest/gtest.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>

#include "cli_runner.hpp"
#include "codegen/compiler.hpp"
#include "codegen/cubin.hpp"
#include "gmjit/error.hpp"
#include "nvrtc/compile_support.hpp"
#include "templates/registry.hpp"

namespace gmjit {
namespace {

using testing::kArch;

struct Case {
  std::string kernel;
  std::string dtype;
  Shape shape;
};

void PrintTo(const Case& c, std::ostream* out) {
  *out << c.kernel << " " << c.dtype << " " << format_assignments(c.shape);
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string name = info.param.kernel + "_" + info.param.dtype;
  for (const auto& [k, v] : info.param.shape) name += "_" + k + std::to_string(v);
  return name;
}

class EveryValidConfig : public ::testing::TestWithParam<Case> {};

TEST_P(EveryValidConfig, CompilesToPtxAndCubinForSm90a) {
  const Case& c = GetParam();
  const auto& kernel = templates::find_kernel(c.kernel);
  const auto items = testing::every_valid_config(kernel, {c.dtype}, {c.shape});
  ASSERT_FALSE(items.empty());
  const auto check = [&c](const testing::CompileItem& item, const codegen::CompiledModule& module) -> std::string {
    if (module.cubin.size() < 4 || std::memcmp(module.cubin.data(), "\x7f" "ELF", 4) != 0) {
      return "cubin is not an ELF image";
    }
    if (module.ptx.find(".target sm_90a") == std::string::npos) return "PTX does not target sm_90a";
    if (module.ptx.find(module.lowered_name) == std::string::npos) {
      return "lowered name " + module.lowered_name + " missing from PTX";
    }
    if (module.resources.registers <= 0) return "no resource report";
    // sgemm's warp tiles keep 64 or 128 accumulators and two fragment buffers in registers; the
    // descriptor admits only tiles that ptxas fits without spilling a tile to local memory.
    // The same ptxas 13.0 does not allocate identically from run to run at the 128-register step:
    // at k=3000, m=127, n=1000, sgemm_warp<64, 128, 8, 32, 8, 8> got 0 B here and 12 B of spills
    // (16 B stack) on a CI machine, and sgemm_warp<128, 64, ...> 16 B of stores and 20 B of loads
    // in a later run here that passed before. So up to 32 B pass (a few registers' worth) and a
    // spilled fragment or tile (hundreds of bytes) does not.
    // Without ptxas's report (an NVRTC that prints none) the cubin's stack size stands in.
    constexpr int kHostDependentSpillBytes = 32;
    if (c.kernel == "sgemm" && item.config.at("wm") != 0) {
      if (!module.resources.spills_known && module.resources.stack_bytes > kHostDependentSpillBytes) {
        return fmt::format("{} B stack", module.resources.stack_bytes);
      }
      if (module.resources.spills_known) {
        if (auto spills = testing::spills_beyond(module.resources, kHostDependentSpillBytes); !spills.empty()) {
          return spills;
        }
      }
    }
    if (!module.resources.spills_known) return {};
    // Where ptxas printed its report, the cubin's own attributes must say the same.
    const ResourceUsage cubin = codegen::read_cubin_resources(module.cubin, module.lowered_name);
    if (cubin.registers != module.resources.registers || cubin.stack_bytes != module.resources.stack_bytes ||
        cubin.shared_bytes != module.resources.shared_bytes) {
      return fmt::format("cubin says {} registers, {} B stack, {} B smem; ptxas says {}, {}, {}", cubin.registers,
                         cubin.stack_bytes, cubin.shared_bytes, module.resources.registers,
                         module.resources.stack_bytes, module.resources.shared_bytes);
    }
    return {};
  };
  codegen::Compiler compiler;
  testing::compile_each(compiler, kernel, items, check);
  EXPECT_EQ(compiler.module_count(), items.size());
}

INSTANTIATE_TEST_SUITE_P(
    Templates, EveryValidConfig,
    ::testing::Values(Case{"vector_add", "fp32", {{"n", 1000003}}}, Case{"vector_add", "fp16", {{"n", 1000003}}},
                      // Even tiles compile the bounds checks out, uneven ones keep them: both variants.
                      Case{"sgemm", "fp32", {{"m", 4096}, {"n", 4096}, {"k", 4096}}},
                      Case{"sgemm", "fp32", {{"m", 127}, {"n", 1000}, {"k", 3000}}},
                      // Grayscale prunes grid-stride variants at sizes one block covers.
                      Case{"grayscale", "fp32", {{"h", 1}, {"w", 127}}},
                      Case{"grayscale", "fp32", {{"h", 127}, {"w", 1000003}}},
                      Case{"grayscale", "fp32", {{"h", 16384}, {"w", 16384}}},
                      Case{"transpose", "fp32", {{"rows", 1}, {"cols", 127}}},
                      Case{"transpose", "fp32", {{"rows", 127}, {"cols", 1000003}}},
                      Case{"transpose", "fp32", {{"rows", 16384}, {"cols", 16384}}},
                      // softmax: 16-byte rows with cached blocks; odd rows (scalar only, every
                      // cached variant); 4- (bf16) and 8-byte (fp32) rows.
                      Case{"softmax", "fp32", {{"rows", 8192}, {"cols", 8192}}},
                      Case{"softmax", "bf16", {{"rows", 8192}, {"cols", 8192}}},
                      Case{"softmax", "fp32", {{"rows", 3}, {"cols", 127}}},
                      Case{"softmax", "bf16", {{"rows", 3}, {"cols", 127}}},
                      Case{"softmax", "fp32", {{"rows", 127}, {"cols", 1002}}},
                      Case{"softmax", "bf16", {{"rows", 127}, {"cols", 1002}}},
                      // rmsnorm, layernorm: the benchmark's 16-byte bf16 rows (cached blocks of
                      // 4096 columns); odd rows; more in test_norms_compile.cpp.
                      Case{"rmsnorm", "bf16", {{"rows", 8192}, {"cols", 4096}}},
                      Case{"rmsnorm", "fp32", {{"rows", 3}, {"cols", 127}}},
                      Case{"layernorm", "bf16", {{"rows", 8192}, {"cols", 4096}}},
                      Case{"layernorm", "fp32", {{"rows", 3}, {"cols", 127}}},
                      Case{"prefix_sum", "fp32", {{"n", 1}}}, Case{"prefix_sum", "fp32", {{"n", 268435456}}}),
    case_name);

TEST(Reference, EveryReferenceKernelCompiles) {
  for (const auto& kernel : templates::catalog()) {
    if (!kernel.reference_expression) continue;  // verified against its host_reference instead
    for (const auto& dtype : kernel.dtypes) {
      Shape shape;
      std::int64_t size = 3;
      for (const auto& key : kernel.problem_keys) shape[key] = size += 2;
      const auto source = codegen::specialize_reference(kernel, shape, dtype);
      EXPECT_NO_THROW(codegen::Compiler().compile(source, kArch)) << source.name_expression;
    }
  }
}

TEST(CompileKey, StableForTheSameInputs) {
  const auto& kernel = templates::find_kernel("vector_add");
  const auto source = codegen::specialize(kernel, {{"n", 100}}, "fp32", kernel.default_config);
  EXPECT_EQ(codegen::compile_key(source, kArch), codegen::compile_key(source, kArch));
  EXPECT_EQ(codegen::compile_key(source, kArch).size(), 32u);
  EXPECT_NE(codegen::compile_key(source, kArch), codegen::compile_key(source, "sm_80"));
  Config other = kernel.default_config;
  other["block"] = 512;
  EXPECT_NE(codegen::compile_key(source, kArch),
            codegen::compile_key(codegen::specialize(kernel, {{"n", 100}}, "fp32", other), kArch));
}

TEST(CompileKey, OneByteOfOneTemplateHeaderChangesIt) {
  const auto& kernel = templates::find_kernel("sgemm");
  const Shape shape{{"m", 64}, {"n", 64}, {"k", 64}};
  const auto source = codegen::specialize(kernel, shape, "fp32", kernel.default_config);
  const std::string original = *templates::find_header(kernel.header);
  const std::string key = codegen::compile_key(source, kArch);
  const std::string hash = templates::template_hash(kernel.header);
  std::string edited = original;
  edited[edited.size() / 2] = edited[edited.size() / 2] == ' ' ? '\t' : ' ';
  templates::register_header(kernel.header, edited);
  const std::string edited_key = codegen::compile_key(source, kArch);
  const std::string edited_hash = templates::template_hash(kernel.header);
  templates::register_header(kernel.header, original);
  EXPECT_NE(edited_key, key);
  EXPECT_NE(edited_hash, hash);
  EXPECT_EQ(codegen::compile_key(source, kArch), key) << "restoring the byte restores the key";
}

TEST(Compiler, RepeatedCompileIsServedFromMemory) {
  const auto& kernel = templates::find_kernel("vector_add");
  const auto source = codegen::specialize(kernel, {{"n", 100}}, "fp16", kernel.default_config);
  codegen::Compiler compiler;
  const auto first = compiler.compile(source, kArch);
  const auto second = compiler.compile(source, kArch);
  EXPECT_FALSE(first.memory_hit);
  EXPECT_TRUE(second.memory_hit);
  EXPECT_EQ(first.module.get(), second.module.get());
  EXPECT_GT(first.module->compile_ms, 0);
}

TEST(Compiler, KeepsItsCompilesOutOfTheDriversJitCache) {
  const auto options = codegen::canonical_options(kArch);
  EXPECT_NE(std::find(options.begin(), options.end(), "-no-cache"), options.end()) << fmt::format("{}", fmt::join(options, " "));
  const auto& kernel = templates::find_kernel("vector_add");
  const auto source = codegen::specialize(kernel, {{"n", 100}}, "fp32", kernel.default_config);
  // NVRTC rejects an option it does not know, and the compile then throws.
  EXPECT_NO_THROW(codegen::Compiler().compile(source, kArch));
}

TEST(Compiler, CompileErrorCarriesTheWholeLogAndOptions) {
  templates::register_header("test/broken.cuh",
                             "template <int N> __global__ void broken(float* x) { x[0] = N + undeclared_name; }\n");
  codegen::GeneratedSource source;
  source.kernel = "broken";
  source.header = "test/broken.cuh";
  source.name_expression = "broken<3>";
  source.file_name = "broken.cu";
  source.source = "#include \"test/broken.cuh\"\n";
  try {
    codegen::Compiler().compile(source, kArch);
    FAIL() << "compiled";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::compile);
    EXPECT_NE(e.log().find("undeclared_name"), std::string::npos) << e.log();
    ASSERT_FALSE(e.options().empty());
    EXPECT_EQ(e.options()[0], "-arch=sm_90a");
    EXPECT_NE(std::string(e.what()).find("broken<3>"), std::string::npos);
  }
}

TEST(Cli, CompileWritesSourcePtxCubinAndResources) {
  const auto out = std::filesystem::temp_directory_path() / ("gmtune-compile-" + std::to_string(::getpid()));
  std::filesystem::remove_all(out);
  const auto result = testing::run_gmtune("compile sgemm --shape m=127,n=1000,k=3000 --config bm=128,bn=64,vec=1 "
                                          "--arch sm_90a --out " + out.string());
  ASSERT_EQ(result.status, 0) << result.err;
  std::size_t cu = 0, ptx = 0, cubin = 0, sass = 0;
  for (const auto& entry : std::filesystem::directory_iterator(out)) {
    const auto ext = entry.path().extension();
    cu += ext == ".cu";
    ptx += ext == ".ptx";
    cubin += ext == ".cubin";
    sass += ext == ".sass";
  }
  EXPECT_EQ(cu, 1u);
  EXPECT_EQ(ptx, 1u);
  EXPECT_EQ(cubin, 1u);
  if (sass == 0) EXPECT_NE(result.err.find("SASS not written"), std::string::npos) << result.err;
  const auto resources = nlohmann::json::parse(testing::read_text(out / "resources.json"));
  EXPECT_GT(resources["resources"]["registers"].get<int>(), 0);
  EXPECT_EQ(resources["arch"], "sm_90a");
  EXPECT_EQ(resources["config"]["bm"], 128);
  EXPECT_EQ(resources["config"]["tm"], 4) << "defaults fill unspecified parameters";
  EXPECT_EQ(resources["compile_key"].get<std::string>().size(), 32u);
  std::filesystem::remove_all(out);
}

}  // namespace
}  // namespace gmjit
