// The launch index (cache/launch_index.hpp): what a first launch reads instead of SQLite. It must
// serve exactly the cache's winners and the cubins of their compile keys, follow every rewrite,
// and be ignored when damaged, written for another cache file, or writable by others.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cache/launch_index.hpp"
#include "cache_test_support.hpp"
#include "codegen/compiler.hpp"
#include "core/kernel_args.hpp"
#include "templates/registry.hpp"

namespace gmjit {
namespace {

namespace fs = std::filesystem;
using namespace cache_test;
using cache::LaunchIndex;

const DeviceRecord kDevice{"device-key", "Test GPU", "sm_90a", "{}"};

// The compile key of vector_add at n with `block` threads, as the Runtime computes it.
std::string compile_key_of(std::int64_t n, std::int64_t block) {
  const auto& kernel = templates::find_kernel("vector_add");
  const Shape shape{{"n", n}};
  const Config config = nlohmann::json::parse(vector_add_config(block)).get<Config>();
  return codegen::compile_key(codegen::specialize(kernel, shape, "fp32", config), kDevice.arch);
}

cache::BinaryRecord cubin_for(std::int64_t n, std::int64_t block, char fill) {
  cache::BinaryRecord b;
  b.compile_key = compile_key_of(n, block);
  b.kernel = "vector_add";
  b.arch = kDevice.arch;
  b.cubin.assign(5000, fill);
  b.ptx = "ptx";
  b.resources_json = R"({"lowered_name": "_Z10vector_add"})";
  return b;
}

void flip_byte(const fs::path& file, std::uintmax_t offset) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x5a);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

class LaunchIndexTest : public CacheDirTest {
 protected:
  // A cache holding vector_add n=2^20 tuned to 256 threads, its cubin, and the index.
  void SetUp() override {
    CacheDirTest::SetUp();
    Store store(path_);
    store.record_tuning(kDevice, vector_add_problem(1 << 20), {vector_add_trial(256, 1.0)}, 0, "test");
    store.put_binary(cubin_for(1 << 20, 256, 'a'));
    const auto published = cache::publish_launch_index(store);
    EXPECT_EQ(published.winners, 1u);
    EXPECT_EQ(published.cubins, 1u);
    EXPECT_EQ(published.skipped, 0u);
  }
};

// A plan is the launch the Runtime would compute from the descriptor on a hit (tensors, geometry,
// scalars, workspace, the compile key of the cubin listed beside it), for exactly the winner's
// problem: another device, shape or dtype has none. An empty dtype is the kernel's first.
TEST_F(LaunchIndexTest, PlansTheWinnersLaunchAsItsDescriptorWould) {
  const auto index = LaunchIndex::open(path_);
  ASSERT_TRUE(index);
  ASSERT_EQ(index->plan_count(), 1u) << "a test binary has a GNU build-id";
  const Shape shape{{"n", 1 << 20}};
  const auto plan = index->find_plan(kDevice.key, "vector_add", "fp32", shape);
  ASSERT_TRUE(plan);
  const auto& kernel = templates::find_kernel("vector_add");
  const Config config = templates::resolve_config(
      kernel, shape, "fp32", nlohmann::json::parse(vector_add_config(256)).get<Config>());
  EXPECT_EQ(plan->config, config);
  EXPECT_EQ(plan->dtype, "fp32");
  EXPECT_EQ(plan->problem_key, vector_add_problem(1 << 20).key);
  EXPECT_EQ(plan->compile_key, compile_key_of(1 << 20, 256));
  EXPECT_TRUE(index->find_cubin(plan->compile_key));
  std::vector<std::string> names;
  for (const auto& t : kernel.tensors(shape)) names.push_back(t.name);
  EXPECT_EQ(plan->tensor_names, names);
  const LaunchGeometry g = kernel.geometry(config, shape, templates::dtype_info("fp32"));
  for (int a = 0; a < 3; ++a) {
    EXPECT_EQ(plan->geometry.grid[a], g.grid[a]);
    EXPECT_EQ(plan->geometry.block[a], g.block[a]);
    EXPECT_EQ(plan->geometry.cluster[a], g.cluster[a]);
  }
  EXPECT_EQ(plan->geometry.dynamic_shared_bytes, g.dynamic_shared_bytes);
  EXPECT_EQ(plan->has_workspace, static_cast<bool>(kernel.workspace));
  detail::KernelArgs scalars;
  kernel.add_scalars(scalars, shape);
  ASSERT_EQ(plan->scalars.size(), scalars.size());
  void** slots = scalars.pointers();
  for (std::size_t j = 0; j < scalars.size(); ++j) {
    EXPECT_EQ(std::memcmp(plan->scalars[j].data(), slots[j], 16), 0) << "scalar " << j;
  }

  EXPECT_TRUE(index->find_plan(kDevice.key, "vector_add", "", shape)) << "fp32 is vector_add's first dtype";
  EXPECT_TRUE(index->find_plan("", "vector_add", "fp32", shape)) << "any device";
  EXPECT_FALSE(index->find_plan("another-device", "vector_add", "fp32", shape));
  EXPECT_FALSE(index->find_plan(kDevice.key, "vector_add", "fp16", shape));
  EXPECT_FALSE(index->find_plan(kDevice.key, "vector_add", "fp32", Shape{{"n", 1 << 21}}));
  EXPECT_FALSE(index->find_plan(kDevice.key, "vector_add", "fp32", Shape{{"n", 1 << 20}, {"m", 1}}));
  EXPECT_FALSE(index->find_plan(kDevice.key, "vector_sum", "fp32", shape));
}

// With an embedded header replaced, the built-in kernels compile other code than the build that
// wrote the plans: none is served until the original text is back.
TEST_F(LaunchIndexTest, NoPlanWhileAnEmbeddedHeaderIsReplaced) {
  const auto index = LaunchIndex::open(path_);
  ASSERT_TRUE(index);
  const Shape shape{{"n", 1 << 20}};
  const std::string header = templates::find_kernel("vector_add").header;
  const std::string original = *templates::find_header(header);
  templates::register_header(header, original + "\n// another text\n");
  EXPECT_FALSE(index->find_plan(kDevice.key, "vector_add", "fp32", shape));
  templates::register_header(header, original);
  EXPECT_TRUE(index->find_plan(kDevice.key, "vector_add", "fp32", shape));
}

TEST_F(LaunchIndexTest, ServesTheWinnerAndTheCubinOfItsCompileKey) {
  const auto index = LaunchIndex::open(path_);
  ASSERT_TRUE(index);
  const auto winner = index->find_winner(kDevice.key, vector_add_problem(1 << 20).key);
  ASSERT_TRUE(winner);
  EXPECT_EQ(winner->config.at("block"), 256);
  EXPECT_FALSE(index->find_winner("another-device", vector_add_problem(1 << 20).key));
  EXPECT_FALSE(index->find_winner(kDevice.key, vector_add_problem(1 << 21).key));

  const auto cubin = index->find_cubin(compile_key_of(1 << 20, 256));
  ASSERT_TRUE(cubin);
  EXPECT_EQ(cubin->bytes, std::vector<char>(5000, 'a'));
  EXPECT_EQ(cubin->lowered_name, "_Z10vector_add");
  EXPECT_FALSE(index->find_cubin(compile_key_of(1 << 20, 512))) << "no cubin of another configuration";
}

TEST_F(LaunchIndexTest, NearestShapeAsTheCacheFindsIt) {
  const auto index = LaunchIndex::open(path_);
  ASSERT_TRUE(index);
  const auto near = index->nearest_winner(kDevice.key, "vector_add", "fp32", {{"n", 3 << 20}});
  ASSERT_TRUE(near);
  EXPECT_EQ(near->shape, (Shape{{"n", 1 << 20}}));
  EXPECT_NEAR(near->distance, std::log2(3.0), 1e-12);
  EXPECT_FALSE(index->nearest_winner(kDevice.key, "vector_add", "fp16", {{"n", 3 << 20}}));
  // vector_add's shape is not in its source, so the new shape's compile key is the winner's.
  EXPECT_TRUE(index->find_cubin(compile_key_of(3 << 20, 256)));
}

TEST_F(LaunchIndexTest, FollowsAFasterWinnerOnceRepublished) {
  {
    Store store(path_);
    store.record_tuning(kDevice, vector_add_problem(1 << 20), {vector_add_trial(512, 0.5)}, 0, "test");
    store.put_binary(cubin_for(1 << 20, 512, 'b'));
    cache::publish_launch_index(store);
  }
  const auto index = LaunchIndex::open(path_);
  ASSERT_TRUE(index);
  EXPECT_EQ(index->find_winner(kDevice.key, vector_add_problem(1 << 20).key)->config.at("block"), 512);
  EXPECT_EQ(index->find_cubin(compile_key_of(1 << 20, 512))->bytes, std::vector<char>(5000, 'b'));
  EXPECT_FALSE(index->find_cubin(compile_key_of(1 << 20, 256))) << "only the winners' cubins are listed";
}

TEST_F(LaunchIndexTest, IgnoredForAReplacedCache) {
  fs::remove(path_);
  { Store fresh(path_); }
  EXPECT_FALSE(LaunchIndex::open(path_)) << "written for the file that was there before";
  fs::remove(path_);
  EXPECT_FALSE(LaunchIndex::open(path_)) << "no cache, no index";
}

TEST_F(LaunchIndexTest, DamagedTablesOrCubinAreNotServed) {
  const fs::path index_file = cache::launch_index_path(path_);
  const auto size = fs::file_size(index_file);
  flip_byte(index_file, size - 10);  // inside the cubin, the last thing in the file
  {
    const auto index = LaunchIndex::open(path_);
    ASSERT_TRUE(index) << "the tables are intact";
    EXPECT_TRUE(index->find_winner(kDevice.key, vector_add_problem(1 << 20).key));
    EXPECT_FALSE(index->find_cubin(compile_key_of(1 << 20, 256))) << "the cubin fails its checksum";
  }
  flip_byte(index_file, 70);  // inside the tables, just past the 64-byte header
  EXPECT_FALSE(LaunchIndex::open(path_));
  flip_byte(index_file, 70);
  flip_byte(index_file, 3);  // the magic
  EXPECT_FALSE(LaunchIndex::open(path_));
}

TEST_F(LaunchIndexTest, WritableByOthersIsNotTrusted) {
  const fs::path index_file = cache::launch_index_path(path_);
  struct stat st {};
  ASSERT_EQ(::stat(index_file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::chmod(index_file.c_str(), 0620), 0);
  EXPECT_FALSE(LaunchIndex::open(path_));
}

TEST_F(LaunchIndexTest, WinnersOfAnotherTemplateTextAreLeftOut) {
  Store store(path_);
  ProblemRecord old_text = vector_add_problem(1 << 22);
  old_text.template_hash = "0123456789abcdef";
  old_text.key = cache::problem_key("vector_add", old_text.template_hash, "fp32", cache::kRowMajor, {{"n", 1 << 22}});
  store.record_tuning(kDevice, old_text, {vector_add_trial(128, 1.0)}, 0, "test");
  ProblemRecord unknown = vector_add_problem(1 << 23);
  unknown.kernel = "not_registered_here";
  unknown.key = "feedfacefeedface";
  store.record_tuning(kDevice, unknown, {vector_add_trial(128, 1.0)}, 0, "test");
  const auto published = cache::publish_launch_index(store);
  EXPECT_EQ(published.winners, 1u);
  EXPECT_EQ(published.skipped, 2u);
  const auto index = LaunchIndex::open(path_);
  ASSERT_TRUE(index);
  EXPECT_FALSE(index->find_winner(kDevice.key, old_text.key));
  EXPECT_FALSE(index->find_winner(kDevice.key, unknown.key));
}

TEST(BuiltinKernels, DescribedOnceWhateverIsAskedFirst) {
  const templates::KernelDescriptor* first = &templates::find_kernel("transpose");
  EXPECT_EQ(first->name, "transpose");
  EXPECT_FALSE(templates::catalog().empty());
  EXPECT_EQ(&templates::find_kernel("transpose"), first) << "the catalog does not replace the described kernel";
  EXPECT_THROW(templates::find_kernel("no_such_kernel"), Error);
}

}  // namespace
}  // namespace gmjit
