// One NVRTC compile per template instantiation: a problem size that no template argument depends
// on stays out of the generated source, so a new size reuses the compile, the binary row and the
// dumped .cu of every size before it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "cache/binaries.hpp"
#include "cache/store.hpp"
#include "cli_runner.hpp"
#include "codegen/compiler.hpp"
#include "nvrtc/compile_support.hpp"
#include "temp_dir.hpp"
#include "templates/registry.hpp"

namespace gmjit {
namespace {

namespace fs = std::filesystem;
using testing::kArch;

class OneCompile : public testing::TempDirTest {
 protected:
  OneCompile() : TempDirTest("gmjit-one-compile") {}
};

TEST_F(OneCompile, TwoSizesOneConfigurationCompileOnceAndStoreOneBinary) {
  const auto& kernel = templates::find_kernel("vector_add");
  const auto at_1023 = codegen::specialize(kernel, {{"n", 1023}}, "fp32", kernel.default_config);
  const auto at_1024 = codegen::specialize(kernel, {{"n", 1024}}, "fp32", kernel.default_config);
  EXPECT_EQ(at_1023.source, at_1024.source);
  EXPECT_EQ(codegen::compile_key(at_1023, kArch), codegen::compile_key(at_1024, kArch));

  codegen::Compiler compiler;
  const auto first = compiler.compile(at_1023, kArch);
  const auto second = compiler.compile(at_1024, kArch);
  EXPECT_FALSE(first.memory_hit);
  EXPECT_TRUE(second.memory_hit) << "the second size ran NVRTC again";
  EXPECT_EQ(compiler.module_count(), 1u);

  cache::Store store(dir_ / "cache.db");
  cache::store_binary(store, *first.module);
  cache::store_binary(store, *second.module);
  EXPECT_EQ(store.binary_count(), 1u);
}

TEST_F(OneCompile, ASizeThatATemplateArgumentReadsStillCompilesApart) {
  // sgemm's EvenTiles argument is derived from the shape: a size that changes it is a different
  // instantiation, and must not share the other's cubin.
  const auto& kernel = templates::find_kernel("sgemm");
  const auto even = codegen::specialize(kernel, {{"m", 256}, {"n", 256}, {"k", 256}}, "fp32", kernel.default_config);
  const auto ragged = codegen::specialize(kernel, {{"m", 250}, {"n", 256}, {"k", 256}}, "fp32", kernel.default_config);
  ASSERT_NE(even.name_expression, ragged.name_expression);
  EXPECT_NE(codegen::compile_key(even, kArch), codegen::compile_key(ragged, kArch));
}

TEST_F(OneCompile, SweepOfTwoSizesStoresEachInstantiationOnce) {
  const auto& kernel = templates::find_kernel("vector_add");
  std::set<std::string> instantiations;
  std::size_t per_size = 0;
  for (const std::int64_t n : {1023, 1024}) {
    const auto configs = templates::valid_configs(kernel, {{"n", n}});
    per_size += configs.size();
    for (const auto& config : configs) {
      instantiations.insert(codegen::compile_key(codegen::specialize(kernel, {{"n", n}}, "fp32", config), kArch));
    }
  }
  ASSERT_LT(instantiations.size(), per_size) << "the two sizes share no instantiation; the test proves nothing";

  const fs::path shapes = dir_ / "shapes.json";
  std::ofstream(shapes) << R"({"sweeps": [{"kernel": "vector_add", "dtype": "fp32", "shapes": [{"n": 1023}, {"n": 1024}]}]})";
  const fs::path db = dir_ / "cache.db";
  const auto result = testing::run_gmtune(
      "sweep --strategy exhaustive --shapes " + shapes.string() + " --db " + db.string(), "GMJIT_SIMULATED_DEVICE=1");
  ASSERT_EQ(result.status, 0) << result.err;
  EXPECT_NE(result.out.find("2 tuned"), std::string::npos) << result.out;
  EXPECT_EQ(cache::Store(db).binary_count(), instantiations.size());
}

TEST_F(OneCompile, CompileOfTwoRuntimeSizesWritesTheSameSource) {
  std::string sources[2];
  int index = 0;
  for (const char* n : {"1023", "1024"}) {
    const fs::path out = dir_ / n;
    const auto result = testing::run_gmtune(std::string("compile vector_add --shape n=") + n +
                                            " --config block=256,items=4,vec_bytes=16 --arch sm_90a --out " +
                                            out.string());
    ASSERT_EQ(result.status, 0) << result.err;
    for (const auto& entry : fs::directory_iterator(out)) {
      if (entry.path().extension() == ".cu") sources[index] = testing::read_text(entry.path());
    }
    ASSERT_FALSE(sources[index].empty()) << "no .cu in " << out;
    ++index;
  }
  EXPECT_EQ(sources[0], sources[1]);
}

}  // namespace
}  // namespace gmjit
