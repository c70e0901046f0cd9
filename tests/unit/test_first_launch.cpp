// What a first launch caches and reads lean (issue 15, item 11): the headers a template reaches
// (per process, until a header is registered), the cubin fetched without its PTX, and a cache
// file opened without re-creating what exists. Each must follow the change it caches.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "cache/store.hpp"
#include "cache_test_support.hpp"
#include "templates/registry.hpp"

namespace gmjit {
namespace {

namespace fs = std::filesystem;
using namespace cache_test;
using cache::BinaryRecord;

TEST(ReachableHeaders, RegisteringAnIncludedHeaderChangesItsIncludersKeys) {
  const std::string a = "gmjit_test/first_launch_a.cuh";
  const std::string b = "gmjit_test/first_launch_b.cuh";
  templates::register_header(a, "#include \"gmjit_test/first_launch_b.cuh\"\nint a;\n");
  // b unknown: a toolkit header to the walk, outside the hash.
  EXPECT_EQ(templates::reachable_headers(a), std::vector<std::string>{a});
  const std::string alone = templates::template_hash(a);
  EXPECT_EQ(templates::template_hash(a), alone) << "the same headers, the same hash";

  templates::register_header(b, "int b;\n");
  EXPECT_EQ(templates::reachable_headers(a), (std::vector<std::string>{a, b}));
  const std::string with_b = templates::template_hash(a);
  EXPECT_NE(with_b, alone);

  templates::register_header(b, "int b2;\n");
  const std::string edited = templates::template_hash(a);
  EXPECT_NE(edited, with_b);
  const auto reached = templates::reachable(a);
  ASSERT_EQ(reached->headers.size(), 2u);
  EXPECT_EQ(*reached->headers[1].second, "int b2;\n") << "the text handed out is the registered one";

  templates::register_header(b, "int b;\n");
  EXPECT_EQ(templates::template_hash(a), with_b);
}

BinaryRecord cubin_record(const std::string& key, const std::string& resources_json, char fill = 'c') {
  BinaryRecord b;
  b.compile_key = key;
  b.kernel = "k";
  b.arch = "sm_90a";
  b.cubin.assign(3000, fill);
  b.ptx = std::string(20000, 'p');
  b.resources_json = resources_json;
  return b;
}

class CacheCubin : public CacheDirTest {};

TEST_F(CacheCubin, ServesTheCubinAndTheLoweredNameAlone) {
  Store store(path_);
  EXPECT_FALSE(store.get_cubin("missing").has_value());
  const BinaryRecord b = cubin_record("ck", R"({"kernel":"k","lowered_name":"_Z1kPf","registers":32})");
  store.put_binary(b);
  const auto got = store.get_cubin("ck");
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->cubin, b.cubin);
  EXPECT_EQ(got->lowered_name, "_Z1kPf");
}

TEST_F(CacheCubin, ADescriptionWithoutALoweredNameGivesAnEmptyOneNotAnError) {
  Store store(path_);
  store.put_binary(cubin_record("no-name", R"({"registers":32})"));
  store.put_binary(cubin_record("not-json", "{"));
  for (const char* key : {"no-name", "not-json"}) {
    SCOPED_TRACE(key);
    const auto got = store.get_cubin(key);
    ASSERT_TRUE(got.has_value());
    EXPECT_TRUE(got->lowered_name.empty());
  }
}

TEST_F(CacheCubin, ACorruptCubinIsDeletedAndNeverServed) {
  Store store(path_);
  store.put_binary(cubin_record("bad", R"({"lowered_name":"_Z1kPf"})"));
  store.put_binary(cubin_record("good", R"({"lowered_name":"_Z1kPf"})", 'g'));
  {
    RawDb raw(path_);
    raw.exec("UPDATE binaries SET cubin = randomblob(3000) WHERE compile_key = 'bad'");
  }
  EXPECT_FALSE(store.get_cubin("bad").has_value());
  EXPECT_FALSE(store.get_binary("bad").has_value());
  EXPECT_TRUE(store.get_cubin("good").has_value());
  RawDb raw(path_);
  EXPECT_EQ(raw.integer("SELECT count(*) FROM binaries WHERE compile_key = 'bad'"), 0);
}

TEST_F(CacheCubin, AHitRecordsItsUseAsGetBinaryDoes) {
  cache::StoreOptions every_hit;
  every_hit.last_use_resolution_ms = 0;
  Store store(path_, every_hit);
  store.put_binary(cubin_record("ck", R"({"lowered_name":"_Z1kPf"})"));
  RawDb raw(path_);
  const std::int64_t stored = raw.integer("SELECT last_used FROM binaries");
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(store.get_cubin("ck").has_value());
  EXPECT_GT(raw.integer("SELECT last_used FROM binaries"), stored);
}

class CacheOpen : public CacheDirTest {};

TEST_F(CacheOpen, AFileReplacedOnDiskIsReadAsItIsNow) {
  {
    Store store(path_);
    store.put_binary(cubin_record("ck", R"({"lowered_name":"old"})"));
    ASSERT_EQ(store.get_cubin("ck")->lowered_name, "old");
  }
  const fs::path other = dir_ / "other.db";
  {
    Store store(other);
    store.put_binary(cubin_record("ck", R"({"lowered_name":"new"})", 'n'));
  }
  ASSERT_EQ(std::rename(other.c_str(), path_.c_str()), 0);
  {
    Store store(path_);
    const auto got = store.get_cubin("ck");
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(got->lowered_name, "new");
    EXPECT_EQ(got->cubin, std::vector<char>(3000, 'n'));
  }
  // Replaced by garbage after its clean check was recorded: still found corrupt and moved aside.
  {
    std::FILE* f = std::fopen(path_.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    const std::string junk(8192, 'x');
    std::fwrite(junk.data(), 1, junk.size(), f);
    std::fclose(f);
  }
  Store fresh(path_);
  EXPECT_TRUE(fresh.quarantined().has_value());
  EXPECT_FALSE(fresh.get_cubin("ck").has_value());
}

TEST_F(CacheOpen, AnExistingCacheStillPassesThePrivacyChecks) {
  { Store create(path_); }
  ASSERT_EQ(::chmod(dir_.c_str(), 0770), 0);
  EXPECT_EQ(capture_error([&] { Store store(path_); }).kind(), ErrorKind::cache);
  ASSERT_EQ(::chmod(dir_.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(path_.c_str(), 0660), 0);
  EXPECT_EQ(capture_error([&] { Store store(path_); }).kind(), ErrorKind::cache);
  ASSERT_EQ(::chmod(path_.c_str(), 0600), 0);
  EXPECT_NO_THROW(Store store(path_));
  // Gone again: created again, directories included.
  fs::remove_all(dir_ / "nested");
  EXPECT_NO_THROW(Store store(dir_ / "nested" / "deeper" / "gmjit.db"));
  EXPECT_TRUE(fs::exists(dir_ / "nested" / "deeper" / "gmjit.db"));
}

}  // namespace
}  // namespace gmjit
