// --trust-binaries keeps a cubin only when it is byte-identical to what this library builds for
// the instantiation it claims: the import compiles that instantiation again with NVRTC.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "cache/binaries.hpp"
#include "cache/exchange.hpp"
#include "cache/store.hpp"
#include "cli_runner.hpp"
#include "codegen/compiler.hpp"
#include "gmjit/tune.hpp"
#include "nvrtc/compile_support.hpp"
#include "templates/registry.hpp"
#include "unit/cache_test_support.hpp"

namespace gmjit {
namespace {

namespace fs = std::filesystem;
using cache::BinaryRecord;
using cache::ImportOptions;
using cache::ImportResult;
using cache::Store;
using cache_test::CacheDirTest;
using cache_test::row_counts;
using testing::kArch;

const Shape kShape{{"n", 1024}};

ImportResult import_trusted(Store& target, const fs::path& file) {
  ImportOptions trusted;
  trusted.trust_binaries = true;
  return cache::import_json(target, file, trusted);
}

std::shared_ptr<const codegen::CompiledModule> compile_vector_add(const Config& config) {
  const auto& kernel = templates::find_kernel("vector_add");
  return codegen::shared_compiler().compile(codegen::specialize(kernel, kShape, "fp32", config), kArch).module;
}

// A kernel of the same name and signature as the built-in vector_add that computes a - b: what
// a poisoned cache would carry under the built-in's key.
constexpr const char* kImpostor = R"(
namespace gmjit {
template <typename T, int kBlock, int kItems, int kVecBytes>
__global__ void __launch_bounds__(kBlock)
    vector_add(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ c, long long n) {
  const long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  if (i < n) c[i] = a[i] - b[i];
}
}  // namespace gmjit
)";

class ImportBinaries : public CacheDirTest {
 protected:
  void SetUp() override {
    CacheDirTest::SetUp();
    const auto& kernel = templates::find_kernel("vector_add");
    genuine_ = compile_vector_add(kernel.default_config);
  }

  // An export of a cache holding one vector_add winner and `binary`, as a fleet machine writes it.
  fs::path export_with(const BinaryRecord& binary, const std::string& name) {
    const fs::path db = dir_ / (name + ".db");
    {
      Store source(db);
      source.record_tuning(cache_test::DeviceRecord{"dev-h200", "NVIDIA H200", "sm_90a", "{}"},
                           cache_test::vector_add_problem(1024), {cache_test::vector_add_trial(256, 0.01)}, 0,
                           "test");
      source.put_binary(binary);
      const fs::path out = dir_ / (name + ".json");
      cache::export_json(source, out, /*with_binaries=*/true);
      return out;
    }
  }

  // Imports `file` trusted into a fresh cache; the binary must be refused for `why`, counted, and
  // the rest of the file imported.
  void expect_refused(const fs::path& file, const std::string& why) {
    const fs::path target_path = dir_ / ("target-" + std::to_string(++targets_) + ".db");
    Store target(target_path);
    const ImportResult r = import_trusted(target, file);
    EXPECT_EQ(r.binaries_added, 0u);
    EXPECT_EQ(r.binaries_ignored, 1u);
    ASSERT_EQ(r.binaries_refused.size(), 1u);
    EXPECT_NE(r.binaries_refused[0].find(genuine_->compile_key), std::string::npos) << r.binaries_refused[0];
    EXPECT_NE(r.binaries_refused[0].find(why), std::string::npos) << r.binaries_refused[0];
    EXPECT_EQ(r.trials_added, 1u) << "a refused binary refuses only itself";
    EXPECT_EQ(r.winners_changed, 1u);
    EXPECT_EQ(target.binary_count(), 0u);
    EXPECT_FALSE(target.get_binary(genuine_->compile_key).has_value());
  }

  std::shared_ptr<const codegen::CompiledModule> genuine_;
  int targets_ = 0;
};

TEST_F(ImportBinaries, AGenuineBinarySurvivesExportAndTrustedImport) {
  const fs::path file = export_with(cache::binary_record(*genuine_), "genuine");
  // The import must compile again rather than find this process's module in memory.
  codegen::shared_compiler().forget_modules();
  Store target(path_);
  const ImportResult r = import_trusted(target, file);
  EXPECT_EQ(r.binaries_added, 1u);
  EXPECT_EQ(r.binaries_ignored, 0u);
  EXPECT_TRUE(r.binaries_refused.empty()) << r.binaries_refused[0];
  const auto kept = target.get_binary(genuine_->compile_key);
  ASSERT_TRUE(kept.has_value());
  EXPECT_EQ(kept->cubin, genuine_->cubin);
  // What is kept is the import's own compile: the same report but for its compile time.
  auto kept_resources = nlohmann::json::parse(kept->resources_json);
  auto genuine_resources = nlohmann::json::parse(codegen::resources_json(*genuine_));
  EXPECT_NE(kept_resources.at("compile_ms"), genuine_resources.at("compile_ms")) << "compiled again at import";
  kept_resources.erase("compile_ms");
  genuine_resources.erase("compile_ms");
  EXPECT_EQ(kept_resources, genuine_resources);

  // Untrusted, the same file brings no binary.
  Store untrusted(dir_ / "untrusted.db");
  const ImportResult u = cache::import_json(untrusted, file, {});
  EXPECT_EQ(u.binaries_added, 0u);
  EXPECT_EQ(u.binaries_ignored, 1u);
  EXPECT_EQ(untrusted.binary_count(), 0u);
}

TEST_F(ImportBinaries, AnotherKernelOfTheSameMangledNameIsRefused) {
  codegen::GeneratedSource impostor_source = codegen::specialize(
      templates::find_kernel("vector_add"), kShape, "fp32", templates::find_kernel("vector_add").default_config);
  impostor_source.source = kImpostor;
  const auto impostor = codegen::shared_compiler().compile(impostor_source, kArch).module;
  ASSERT_EQ(impostor->lowered_name, genuine_->lowered_name) << "the impostor must be launchable under the same name";
  ASSERT_NE(impostor->cubin, genuine_->cubin);

  BinaryRecord planted = cache::binary_record(*genuine_);
  planted.cubin = impostor->cubin;  // put_binary computes a checksum that holds
  expect_refused(export_with(planted, "impostor"), "cubin is not this library's build of gmjit::vector_add<float");

  // A merge meets the same check.
  Store target(dir_ / "merged.db");
  ImportOptions trusted;
  trusted.trust_binaries = true;
  const ImportResult r = cache::merge_into(target, {dir_ / "impostor.db"}, trusted);
  EXPECT_EQ(r.binaries_added, 0u);
  ASSERT_EQ(r.binaries_refused.size(), 1u);
  EXPECT_EQ(target.binary_count(), 0u);
}

TEST_F(ImportBinaries, OneChangedByteWithAChecksumThatHoldsIsRefused) {
  BinaryRecord planted = cache::binary_record(*genuine_);
  const std::size_t at = planted.cubin.size() / 2;
  planted.cubin[at] = static_cast<char>(planted.cubin[at] ^ 0x01);
  expect_refused(export_with(planted, "flipped"), "first difference at byte " + std::to_string(at));
}

TEST_F(ImportBinaries, ABinaryFailingItsChecksumIsRefused) {
  const fs::path file = export_with(cache::binary_record(*genuine_), "checksum");
  auto doc = nlohmann::json::parse(testing::read_text(file));
  std::string& checksum = doc["binaries"][0]["checksum"].get_ref<std::string&>();
  checksum[0] = checksum[0] == '0' ? '1' : '0';
  std::ofstream(file, std::ios::trunc) << doc.dump();
  expect_refused(file, "fails its checksum");
}

// Claims that disagree with the compile key or with each other are refused before any compile.
TEST_F(ImportBinaries, ClaimsThatDoNotMatchTheKeyAreRefused) {
  Config other = templates::find_kernel("vector_add").default_config;
  other["block"] = other.at("block") == 128 ? 256 : 128;
  BinaryRecord another_config = cache::binary_record(*genuine_);
  another_config.resources_json = codegen::resources_json(*compile_vector_add(other));
  expect_refused(export_with(another_config, "config"), "compile key " + genuine_->compile_key + " is not");

  BinaryRecord another_kernel = cache::binary_record(*genuine_);
  another_kernel.kernel = "vector_sum";
  expect_refused(export_with(another_kernel, "kernel"), "resources_json names kernel vector_add, the binary vector_sum");

  BinaryRecord another_arch = cache::binary_record(*genuine_);
  another_arch.arch = "sm_80";
  expect_refused(export_with(another_arch, "arch"), "resources_json names arch \"sm_90a\", the binary sm_80");

  BinaryRecord outside = cache::binary_record(*genuine_);
  auto claims = nlohmann::json::parse(outside.resources_json);
  claims["config"]["block"] = 99999;
  outside.resources_json = claims.dump();
  expect_refused(export_with(outside, "domain"), "outside the domain of block");
}

// gmtune, in another process, rebuilds the cubin of every built-in kernel of the default and
// gpumode presets (the first problem of each, its default configuration) byte for byte, but
// sgemm's, refused as not reproducible; a planted one is listed on stdout with its reason.
TEST_F(ImportBinaries, GmtuneRebuildsEveryBuiltInKernelAndListsRefusals) {
  std::map<std::string, Problem> first;
  for (const char* preset : {"default", "gpumode"}) {
    for (const auto& p : preset_problems(preset)) first.emplace(p.kernel, p);
  }
  const fs::path db = dir_ / "fleet.db";
  std::size_t kernels = 0;
  {
    Store source(db);
    for (const auto& kernel : templates::catalog()) {
      if (templates::is_user_kernel(kernel.name) || first.count(kernel.name) == 0) continue;
      const Problem& p = first.at(kernel.name);
      const std::string dtype = p.dtype.empty() ? kernel.dtypes.front() : p.dtype;
      const Config config = templates::resolve_config(kernel, p.shape, dtype, {});
      const auto compiled =
          codegen::shared_compiler().compile(codegen::specialize(kernel, p.shape, dtype, config), kArch).module;
      cache::store_binary(source, *compiled);
      ++kernels;
    }
  }
  ASSERT_GE(kernels, 10u) << "the presets cover the catalog";
  const fs::path file = dir_ / "fleet.json";
  {
    Store source(db);
    cache::export_json(source, file, /*with_binaries=*/true);
  }
  const auto kept = testing::run_gmtune("import " + file.string() + " --trust-binaries --db " + path_.string());
  ASSERT_EQ(kept.status, 0) << kept.err;
  // sgemm's compiles are not reproducible, so its binary is refused with that reason.
  EXPECT_NE(kept.out.find(std::to_string(kernels - 1) + " binaries added, 1 binaries ignored"), std::string::npos)
      << kept.out;
  EXPECT_NE(kept.out.find("(sgemm sm_90a): sgemm compiles are not reproducible"), std::string::npos) << kept.out;
  EXPECT_EQ(testing::line_count(kept.out), 2) << kept.out;

  BinaryRecord planted = cache::binary_record(*genuine_);
  planted.cubin.back() = static_cast<char>(planted.cubin.back() ^ 0x10);
  const fs::path poisoned = export_with(planted, "poisoned");
  const fs::path other = dir_ / "other.db";
  const auto refused = testing::run_gmtune("import " + poisoned.string() + " --trust-binaries --db " + other.string());
  ASSERT_EQ(refused.status, 0) << refused.err;
  EXPECT_NE(refused.out.find("0 binaries added, 1 binaries ignored"), std::string::npos) << refused.out;
  EXPECT_NE(refused.out.find("refused binary " + genuine_->compile_key + " (vector_add sm_90a): cubin is not"),
            std::string::npos)
      << refused.out;
  EXPECT_EQ(row_counts(other)["binaries"], 0);
}

}  // namespace
}  // namespace gmjit
