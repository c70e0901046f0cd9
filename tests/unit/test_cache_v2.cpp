// Schema 2 of the tuning cache: binaries, nearest shapes, quarantine of corrupt files, verify,
// export/import/merge, and the multi-process guarantees (concurrent writers, kill -9).
#include <gtest/gtest.h>
#include <signal.h>
#include <spdlog/sinks/ostream_sink.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "cache/exchange.hpp"
#include "cache/store.hpp"
#include "cache_test_support.hpp"
#include "gmjit/error.hpp"
#include "core/log.hpp"

namespace {

namespace fs = std::filesystem;

// Problems of the kill -9 test: more than 25 short-lived writers get through, so that most kills
// land mid-write, few enough that the final writer finishes in seconds.
constexpr int kCrashProblems = 8000;

using namespace gmjit::cache_test;
using gmjit::cache::BinaryRecord;
using gmjit::cache::CacheRows;
using gmjit::cache::ImportOptions;
using gmjit::cache::ImportResult;
using gmjit::cache::StoreOptions;

void write_bytes(const fs::path& path, const std::string& bytes) {
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  ::chmod(path.c_str(), 0600);
}

std::string random_bytes(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::string bytes(n, '\0');
  for (char& c : bytes) c = static_cast<char>(rng() & 0xff);
  return bytes;
}

// Collects what the library logs while it lives.
class LogCapture {
 public:
  LogCapture() : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(out_)) {
    gmjit::detail::logger().sinks().push_back(sink_);
  }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;
  ~LogCapture() {
    auto& sinks = gmjit::detail::logger().sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  }
  std::string text() const { return out_.str(); }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
};

DeviceRecord device(const std::string& key = "dev-h200") {
  return {key, "NVIDIA H200", "sm_90a", R"({"name":"NVIDIA H200","sms":132})"};
}

ProblemRecord problem(const std::string& key, const std::string& kernel = "gemm",
                      const std::string& dtype = "f16",
                      const std::string& shape = R"({"k":4096,"m":4096,"n":4096})") {
  return {key, kernel, "tmplhash01", dtype, "rcr", shape};
}

TrialRecord failed_trial(const std::string& status) {
  TrialRecord t;
  t.config_json = vector_add_config(512);
  t.status = status;
  t.median_ms = std::nan("");
  t.detail = "failed: " + status;
  return t;
}

BinaryRecord binary(const std::string& key, std::size_t cubin_bytes, unsigned seed = 1) {
  BinaryRecord b;
  b.compile_key = key;
  b.kernel = "gemm";
  b.arch = "sm_90a";
  const std::string bytes = random_bytes(cubin_bytes, seed);
  b.cubin.assign(bytes.begin(), bytes.end());
  b.ptx = ".version 8.0\n.target sm_90a\n";
  b.resources_json = R"({"registers":128})";
  return b;
}

std::vector<fs::path> files_containing(const fs::path& dir, const std::string& part) {
  std::vector<fs::path> found;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().filename().string().find(part) != std::string::npos) {
      found.push_back(entry.path());
    }
  }
  return found;
}

class CacheV2 : public CacheDirTest {};

// ---------------------------------------------------------------------------------------------
// Schema migration

class CacheMigration : public CacheV2 {};

// Turns a current cache back into what schema 1 wrote, with two identical trials, which schema 2
// must keep as occurrence 0 and 1.
void downgrade_to_v1(const fs::path& path) {
  RawDb raw(path);
  raw.exec("DROP TABLE problem_failures;");
  raw.exec("DROP INDEX trials_identity; DROP INDEX binaries_by_last_used; DROP TABLE binaries;");
  raw.exec("ALTER TABLE trials DROP COLUMN occurrence");
  raw.exec(
      "INSERT INTO trials (device_id, problem_id, config_json, status, median_ms, spread, "
      "repetitions, verify_error, compile_ms, registers, spill_bytes, shared_bytes, detail, "
      "tuned_at, library_version) SELECT device_id, problem_id, config_json, status, median_ms, "
      "spread, repetitions, verify_error, compile_ms, registers, spill_bytes, shared_bytes, "
      "detail, tuned_at, library_version FROM trials WHERE id = 1");
  raw.exec("PRAGMA user_version = 1");
}

TEST_F(CacheMigration, V1FileIsUpgradedKeepingItsData) {
  {
    Store store(path_);
    store.record_tuning(device(), problem("p1"), {ok_trial(64, 2.0), ok_trial(128, 1.0)}, 1, "v1");
  }
  downgrade_to_v1(path_);
  {
    RawDb raw(path_);
    ASSERT_EQ(raw.integer("PRAGMA user_version"), 1);
    ASSERT_EQ(raw.integer("SELECT count(*) FROM trials"), 3);
  }
  Store store(path_);
  EXPECT_FALSE(store.quarantined().has_value());
  const auto w = store.find_winner("dev-h200", "p1");
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->config_json, R"({"tile":128})");
  EXPECT_EQ(store.trials("dev-h200", "p1").size(), 3u);
  store.put_binary(binary("ck", 100));
  EXPECT_TRUE(store.get_binary("ck").has_value());
  RawDb raw(path_);
  EXPECT_EQ(raw.integer("PRAGMA user_version"), Store::kSchemaVersion);
  EXPECT_EQ(raw.integer("SELECT count(*) FROM trials WHERE occurrence = 1"), 1);
  EXPECT_EQ(raw.text("PRAGMA integrity_check"), "ok");
}

TEST_F(CacheMigration, IdenticalTrialsOfOneRunAreAllKept) {
  Store store(path_);
  const TrialRecord t = ok_trial(64, 1.0);
  store.record_tuning(device(), problem("p1"), {t, t, t}, 0, "v");
  store.record_tuning(device(), problem("p1"), {t}, 0, "v");
  EXPECT_EQ(store.trials("dev-h200", "p1").size(), 4u);
  TrialRecord nan = failed_trial("timeout");
  store.record_tuning(device(), problem("p1"), {nan, nan}, std::nullopt, "v");
  EXPECT_EQ(store.trials("dev-h200", "p1").size(), 6u);
}

// ---------------------------------------------------------------------------------------------
// Binaries

class CacheBinaries : public CacheV2 {};

TEST_F(CacheBinaries, RoundTripReplaceAndRemove) {
  Store store(path_);
  EXPECT_FALSE(store.get_binary("missing").has_value());
  const BinaryRecord b = binary("ck-1", 4000);
  store.put_binary(b);
  auto got = store.get_binary("ck-1");
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->compile_key, "ck-1");
  EXPECT_EQ(got->kernel, "gemm");
  EXPECT_EQ(got->arch, "sm_90a");
  EXPECT_EQ(got->cubin, b.cubin);
  EXPECT_EQ(got->ptx, b.ptx);
  EXPECT_EQ(got->resources_json, b.resources_json);
  EXPECT_EQ(got->checksum, gmjit::cache::binary_checksum(b.cubin));
  EXPECT_EQ(got->checksum.size(), 16u);
  EXPECT_GT(got->last_used, 0);
  EXPECT_EQ(store.binaries_bytes(), static_cast<std::int64_t>(4000 + b.ptx.size()));

  const BinaryRecord replacement = binary("ck-1", 10, 7);
  store.put_binary(replacement);
  got = store.get_binary("ck-1");
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->cubin, replacement.cubin);
  EXPECT_EQ(store.binaries_bytes(), static_cast<std::int64_t>(10 + b.ptx.size()));

  BinaryRecord empty = binary("ck-empty", 0);
  store.put_binary(empty);
  got = store.get_binary("ck-empty");
  ASSERT_TRUE(got.has_value());
  EXPECT_TRUE(got->cubin.empty());

  store.remove_binary("ck-1");
  EXPECT_FALSE(store.get_binary("ck-1").has_value());
  EXPECT_TRUE(store.get_binary("ck-empty").has_value());
  EXPECT_NO_THROW(store.remove_binary("never-there"));
  EXPECT_EQ(capture_error([&] { store.put_binary(binary("", 1)); }).kind(), ErrorKind::usage);
}

TEST_F(CacheBinaries, CorruptCubinIsDeletedAndNeverServed) {
  Store store(path_);
  store.put_binary(binary("ck-bad", 2000));
  store.put_binary(binary("ck-good", 2000, 3));
  {
    RawDb raw(path_);
    raw.exec("UPDATE binaries SET cubin = randomblob(2000) WHERE compile_key = 'ck-bad'");
  }
  // verify reports and keeps; get deletes.
  const auto report = store.verify();
  EXPECT_FALSE(report.ok);
  ASSERT_EQ(report.problems.size(), 1u);
  EXPECT_NE(report.problems[0].find("ck-bad"), std::string::npos) << report.problems[0];
  {
    RawDb raw(path_);
    EXPECT_EQ(raw.integer("SELECT count(*) FROM binaries"), 2);
  }
  LogCapture log;
  EXPECT_FALSE(store.get_binary("ck-bad").has_value());
  EXPECT_NE(log.text().find("ck-bad"), std::string::npos) << log.text();
  EXPECT_FALSE(store.get_binary("ck-bad").has_value());
  EXPECT_TRUE(store.get_binary("ck-good").has_value());
  RawDb raw(path_);
  EXPECT_EQ(raw.integer("SELECT count(*) FROM binaries WHERE compile_key = 'ck-bad'"), 0);
  EXPECT_TRUE(store.verify().ok);
}

TEST_F(CacheBinaries, HitsWithinTheResolutionDoNotWrite) {
  Store store(path_);
  store.put_binary(binary("k", 1000));
  const auto first = store.get_binary("k");
  ASSERT_TRUE(first.has_value());
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const auto second = store.get_binary("k");
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->last_used, first->last_used);
}

TEST_F(CacheBinaries, GcHonoursCapAndEvictsLeastRecentlyUsedFirst) {
  StoreOptions every_hit;
  every_hit.last_use_resolution_ms = 0;
  Store store(path_, every_hit);
  for (const char* key : {"a", "b", "c", "d"}) {
    BinaryRecord b = binary(key, 1000);
    b.ptx.clear();
    store.put_binary(b);
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
  }
  ASSERT_TRUE(store.get_binary("a").has_value());  // a becomes the most recently used
  EXPECT_EQ(store.binaries_bytes(), 4000);

  auto r = store.gc(2500);
  EXPECT_EQ(r.evicted, 2u);
  EXPECT_EQ(r.bytes_before, 4000);
  EXPECT_EQ(r.bytes_after, 2000);
  EXPECT_EQ(store.binaries_bytes(), 2000);
  EXPECT_FALSE(store.get_binary("b").has_value());
  EXPECT_FALSE(store.get_binary("c").has_value());
  EXPECT_TRUE(store.get_binary("d").has_value());  // now d is more recent than a
  std::this_thread::sleep_for(std::chrono::milliseconds(3));
  EXPECT_TRUE(store.get_binary("a").has_value());

  r = store.gc(2000);
  EXPECT_EQ(r.evicted, 0u);
  r = store.gc(1999);
  EXPECT_EQ(r.evicted, 1u);
  EXPECT_FALSE(store.get_binary("d").has_value());
  EXPECT_TRUE(store.get_binary("a").has_value());
  r = store.gc(0);
  EXPECT_EQ(r.evicted, 1u);
  EXPECT_EQ(r.bytes_after, 0);
  EXPECT_EQ(store.binaries_bytes(), 0);
  EXPECT_EQ(capture_error([&] { store.gc(-1); }).kind(), ErrorKind::usage);
}

// Speed is bench_cache's to report; here: repeated warm fetches return the same bytes.
TEST_F(CacheBinaries, RepeatedWarmFetchesReturnTheSameCubin) {
  Store store(path_);
  for (int i = 0; i < 20; ++i) store.put_binary(binary("other-" + std::to_string(i), 100'000, i));
  const BinaryRecord hot = binary("hot", 100 * 1024);
  store.put_binary(hot);
  for (int i = 0; i < 50; ++i) {
    const auto b = store.get_binary("hot");
    ASSERT_TRUE(b.has_value());
    ASSERT_EQ(b->cubin, hot.cubin);
  }
}

// ---------------------------------------------------------------------------------------------
// Nearest shape and key exactness

class CacheNearest : public CacheV2 {};

TEST_F(CacheNearest, PicksSmallestLog2DistanceAmongSameKeys) {
  Store store(path_);
  auto record = [&](const std::string& key, const std::string& shape, double ms,
                    const std::string& dev = "dev-h200", const std::string& dtype = "f16") {
    store.record_tuning(device(dev), problem(key, "gemm", dtype, shape), {ok_trial(64, ms)}, 0,
                        "v");
  };
  record("p1024", R"({"m":1024,"n":1024,"k":1024})", 1.0);
  record("p4096", R"({"m":4096,"n":4096,"k":4096})", 2.0);
  record("p256", R"({"m":256,"n":256,"k":256})", 3.0);
  record("p2d", R"({"m":2048,"n":1024})", 4.0);  // other keys: never a candidate
  record("other-dev", R"({"m":2048,"n":1024,"k":1024})", 5.0, "dev-other");
  record("other-dtype", R"({"m":2048,"n":1024,"k":1024})", 6.0, "dev-h200", "f32");

  auto w = store.nearest_winner("dev-h200", "gemm", "f16", R"({"m":2048,"n":1024,"k":1024})");
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->problem_key, "p1024");
  EXPECT_DOUBLE_EQ(w->distance, 1.0);

  w = store.nearest_winner("dev-h200", "gemm", "f16", R"({"m":4096,"n":4096,"k":4096})");
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->problem_key, "p4096");
  EXPECT_DOUBLE_EQ(w->distance, 0.0);

  w = store.nearest_winner("dev-h200", "gemm", "f16", R"({"m":128,"n":128,"k":128})");
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->problem_key, "p256");
  EXPECT_DOUBLE_EQ(w->distance, std::sqrt(3.0));

  w = store.nearest_winner("dev-h200", "gemm", "f16", R"({"m":2048,"n":1024})");
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->problem_key, "p2d");
  EXPECT_DOUBLE_EQ(w->distance, 0.0);

  EXPECT_FALSE(store.nearest_winner("dev-h200", "gemm", "f16", R"({"x":1,"y":2,"z":3})"));
  EXPECT_FALSE(store.nearest_winner("dev-h200", "conv", "f16", R"({"m":1,"n":1,"k":1})"));
  EXPECT_FALSE(store.nearest_winner("dev-none", "gemm", "f16", R"({"m":1,"n":1,"k":1})"));
  EXPECT_EQ(capture_error([&] {
              store.nearest_winner("dev-h200", "gemm", "f16", R"({"m":-1,"n":1,"k":1})");
            }).kind(),
            ErrorKind::usage);
  // A zero is a flag (gemm's trans_b=0), comparable only with another zero.
  EXPECT_FALSE(store.nearest_winner("dev-h200", "gemm", "f16", R"({"m":0,"n":1,"k":1})"));
  EXPECT_EQ(
      capture_error([&] { store.nearest_winner("dev-h200", "gemm", "f16", "not json"); }).kind(),
      ErrorKind::usage);
}

TEST_F(CacheNearest, ArrayShapesCompareByPosition) {
  Store store(path_);
  store.record_tuning(device(), problem("a", "gemm", "f16", "[1024,1024,1024]"),
                      {ok_trial(64, 1.0)}, 0, "v");
  store.record_tuning(device(), problem("b", "gemm", "f16", "[1024,1024]"), {ok_trial(64, 1.0)}, 0,
                      "v");
  const auto w = store.nearest_winner("dev-h200", "gemm", "f16", "[1024,1024,8192]");
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->problem_key, "a");
  EXPECT_DOUBLE_EQ(w->distance, 3.0);
}

// The list an import checks statuses against is the one the schema's CHECK constraint accepts.
TEST_F(CacheV2, EveryListedTrialStatusIsStored) {
  Store store(path_);
  std::vector<TrialRecord> trials;
  for (const std::string_view status : gmjit::cache::kTrialStatuses) {
    TrialRecord t = ok_trial(static_cast<int>(trials.size()), 1.0);
    t.status = std::string(status);
    trials.push_back(t);
  }
  store.record_tuning(device(), problem("every-status"), trials, 0, "v");
  const auto stored = store.trials("dev-h200", "every-status");
  ASSERT_EQ(stored.size(), gmjit::cache::kTrialStatuses.size());
  for (std::size_t i = 0; i < stored.size(); ++i) {
    EXPECT_EQ(stored[i].status, gmjit::cache::kTrialStatuses[i]);
  }
}

// The one distance that nearest_winner ranks by and the tuner's transfer strategy seeds with.
TEST(ShapeDistance, IsTheEuclideanDistanceOfLog2Dimensions) {
  using gmjit::cache::shape_distance;
  EXPECT_EQ(shape_distance(R"({"m":64,"n":32})", R"({"n":32,"m":64})"), 0.0);
  EXPECT_EQ(shape_distance(R"({"m":64,"n":32})", R"({"m":128,"n":32})"), 1.0);
  EXPECT_EQ(shape_distance(R"({"m":128,"n":32})", R"({"m":64,"n":32})"), 1.0);
  EXPECT_EQ(shape_distance("[1024,1024,1024]", "[1024,1024,8192]"), 3.0);
  EXPECT_DOUBLE_EQ(shape_distance(R"({"m":4,"n":4})", R"({"m":8,"n":2})").value(), std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(shape_distance(R"({"m":1000})", R"({"m":3000})").value(), std::log2(3.0));

  EXPECT_FALSE(shape_distance(R"({"m":64,"n":32})", R"({"m":64,"k":32})"));  // other keys
  EXPECT_FALSE(shape_distance(R"({"m":64})", R"({"m":64,"n":32})"));
  EXPECT_FALSE(shape_distance("[64,32]", "[64,32,16]"));
  // A zero is a layout flag (gemm's trans_b=0): it matches another zero only.
  EXPECT_EQ(shape_distance(R"({"m":64,"trans_b":0})", R"({"m":128,"trans_b":0})"), 1.0);
  EXPECT_FALSE(shape_distance(R"({"m":0})", R"({"m":1})"));
  EXPECT_FALSE(shape_distance(R"({"m":64,"trans_b":1})", R"({"m":64,"trans_b":0})"));
  EXPECT_FALSE(shape_distance(R"({"m":1})", R"({"m":-2})"));
  EXPECT_FALSE(shape_distance(R"({"m":"64"})", R"({"m":64})"));
  EXPECT_FALSE(shape_distance("not json", R"({"m":64})"));
  EXPECT_FALSE(shape_distance("64", "64"));
}

class CacheKeys : public CacheV2 {};

TEST_F(CacheKeys, DifferentDeviceOrProblemKeysNeverHitEachOther) {
  Store store(path_);
  store.record_tuning(device("dev-a"), problem("prob-1"), {ok_trial(64, 1.0)}, 0, "v");
  store.record_tuning(device("dev-b"), problem("prob-2"), {ok_trial(128, 2.0)}, 0, "v");
  for (const char* dev : {"dev-A", "dev-a ", "dev-", "dev-b", ""}) {
    SCOPED_TRACE(dev);
    EXPECT_FALSE(store.find_winner(dev, "prob-1").has_value());
    EXPECT_TRUE(store.trials(dev, "prob-1").empty());
  }
  for (const char* prob : {"prob-2", "prob-1 ", "PROB-1", "prob-", "prob-10"}) {
    SCOPED_TRACE(prob);
    EXPECT_FALSE(store.find_winner("dev-a", prob).has_value());
  }
  EXPECT_EQ(store.find_winner("dev-a", "prob-1")->config_json, R"({"tile":64})");
  EXPECT_EQ(store.find_winner("dev-b", "prob-2")->config_json, R"({"tile":128})");
  // Nearest shape stays within its device too.
  const auto near = store.nearest_winner("dev-b", "gemm", "f16", R"({"k":4096,"m":4096,"n":4096})");
  ASSERT_TRUE(near.has_value());
  EXPECT_EQ(near->problem_key, "prob-2");
  store.put_binary(binary("key-1", 10));
  EXPECT_FALSE(store.get_binary("key-1 ").has_value());
  EXPECT_FALSE(store.get_binary("KEY-1").has_value());
  EXPECT_TRUE(store.get_binary("key-1").has_value());
}

// ---------------------------------------------------------------------------------------------
// verify and locking

class CacheVerify : public CacheV2 {};

TEST_F(CacheVerify, ReportsWinnersWithoutTrialsAndChangesNothing) {
  Store store(path_);
  store.record_tuning(device(), problem("p1"), {ok_trial(64, 1.0)}, 0, "v");
  store.record_tuning(device(), problem("p2"), {ok_trial(64, 1.0)}, 0, "v");
  EXPECT_TRUE(store.verify().ok);
  {
    RawDb raw(path_);  // foreign keys are off on a raw connection, as in a damaged file
    raw.exec("DELETE FROM trials WHERE problem_id = (SELECT id FROM problems WHERE key = 'p2')");
  }
  const auto report = store.verify();
  EXPECT_FALSE(report.ok);
  bool named = false;
  for (const auto& p : report.problems) named = named || p.find("p2") != std::string::npos;
  EXPECT_TRUE(named) << ::testing::PrintToString(report.problems);
  RawDb raw(path_);
  EXPECT_EQ(raw.integer("SELECT count(*) FROM winners"), 2);
}

class CacheLocking : public CacheV2 {};

TEST_F(CacheLocking, WriteFailsWithLockedErrorPastBusyTimeout) {
  { Store create(path_); }
  RawDb holder(path_);
  holder.exec("BEGIN IMMEDIATE");
  StoreOptions options;
  options.busy_timeout_ms = 50;
  Store store(path_, options);
  const auto start = std::chrono::steady_clock::now();
  Error e = capture_error(
      [&] { store.record_tuning(device(), problem("p1"), {ok_trial(64, 1.0)}, 0, "v"); });
  EXPECT_EQ(e.kind(), ErrorKind::cache);
  EXPECT_NE(e.message().find("database is locked"), std::string::npos) << e.what();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  e = capture_error([&] { store.put_binary(binary("ck", 10)); });
  EXPECT_EQ(e.kind(), ErrorKind::cache);
  EXPECT_NE(e.message().find("database is locked"), std::string::npos) << e.what();
  holder.exec("ROLLBACK");
  EXPECT_EQ(holder.integer("SELECT count(*) FROM trials"), 0);
  EXPECT_EQ(holder.integer("SELECT count(*) FROM binaries"), 0);
  // Once the lock is gone the same store writes.
  store.record_tuning(device(), problem("p1"), {ok_trial(64, 1.0)}, 0, "v");
  EXPECT_EQ(holder.integer("SELECT count(*) FROM trials"), 1);
}

// ---------------------------------------------------------------------------------------------
// Corruption at open

class CacheCorruption : public CacheV2 {
 protected:
  // A real cache of several pages, closed so that everything is in the main file.
  std::string real_cache_bytes() {
    const fs::path source = dir_ / "source.db";
    {
      Store store(source);
      for (int i = 0; i < 40; ++i) {
        store.record_tuning(device(), problem("p" + std::to_string(i)),
                            {ok_trial(64, 1.0 + i), failed_trial("crashed")}, 0, "v");
      }
      store.put_binary(binary("ck", 30'000));
    }
    EXPECT_FALSE(fs::exists(dir_ / "source.db-wal"));
    std::string bytes = read_bytes(source);
    fs::remove(source);
    return bytes;
  }

  // Opens path_ expecting a quarantine of `bytes`; checks the fresh cache and the warning.
  void expect_quarantined(const std::string& bytes) {
    LogCapture log;
    std::optional<fs::path> moved;
    {
      Store store(path_);
      ASSERT_TRUE(store.quarantined().has_value());
      moved = store.quarantined();
      store.record_tuning(device(), problem("fresh"), {ok_trial(64, 1.0)}, 0, "v");
      EXPECT_TRUE(store.find_winner("dev-h200", "fresh").has_value());
      EXPECT_TRUE(store.verify().ok);
    }
    const std::string name = moved->filename().string();
    const std::string prefix = path_.filename().string() + ".corrupt-";
    ASSERT_EQ(name.rfind(prefix, 0), 0u) << name;
    const std::string stamp = name.substr(prefix.size(), 15);
    EXPECT_EQ(stamp.size(), 15u);
    EXPECT_EQ(stamp[8], 'T') << name;
    EXPECT_TRUE(std::all_of(stamp.begin(), stamp.begin() + 8, ::isdigit)) << name;
    EXPECT_EQ(moved->parent_path(), path_.parent_path());
    EXPECT_TRUE(read_bytes(*moved) == bytes) << "the corrupt file is moved, not changed";
    EXPECT_NE(log.text().find(path_.string()), std::string::npos) << log.text();
    EXPECT_NE(log.text().find(moved->string()), std::string::npos) << log.text();
    RawDb raw(path_);
    EXPECT_EQ(raw.integer("SELECT count(*) FROM winners"), 1);
    EXPECT_EQ(raw.integer("PRAGMA user_version"), Store::kSchemaVersion);
  }

  void clean() {
    for (const auto& entry : fs::directory_iterator(dir_)) fs::remove(entry.path());
  }
};

TEST_F(CacheCorruption, RandomBytesAreQuarantined) {
  const std::string bytes = random_bytes(16 * 1024, 42);
  write_bytes(path_, bytes);
  expect_quarantined(bytes);
}

TEST_F(CacheCorruption, TruncationAtSeveralOffsetsIsQuarantined) {
  const std::string bytes = real_cache_bytes();
  ASSERT_GE(bytes.size(), 16u * 4096);
  ASSERT_EQ(bytes.size() % 4096, 0u);
  {
    write_bytes(path_, bytes);  // control: the intact file opens as it is
    Store store(path_);
    EXPECT_FALSE(store.quarantined().has_value());
    EXPECT_EQ(store.winners().size(), 40u);
  }
  clean();
  const std::size_t half = bytes.size() / 2 / 4096 * 4096;
  for (const std::size_t offset : {std::size_t{50}, std::size_t{100}, std::size_t{4096},
                                   std::size_t{8192}, half, bytes.size() - 4096}) {
    SCOPED_TRACE(offset);
    const std::string truncated = bytes.substr(0, offset);
    write_bytes(path_, truncated);
    expect_quarantined(truncated);
    clean();
  }
}

TEST_F(CacheCorruption, DamagedPageFailingQuickCheckIsQuarantined) {
  std::string bytes = real_cache_bytes();
  // Page 2 is the root of the devices table: an intact header and schema, a broken b-tree.
  bytes.replace(4096, 4096, random_bytes(4096, 7));
  write_bytes(path_, bytes);
  expect_quarantined(bytes);
}

// Opens skip quick_check for a file unchanged since its last clean check; damage written after
// that check must still be found.
TEST_F(CacheCorruption, DamageAfterARecordedCleanCheckIsStillQuarantined) {
  {
    Store store(path_);
    store.record_tuning(device(), problem("p1"), {ok_trial(64, 1.0)}, 0, "v");
  }
  { Store store(path_); }  // the steady state: checked clean, marker matches
  { Store store(path_); }
  const fs::path marker = path_.string() + ".checked";
  ASSERT_TRUE(fs::exists(marker));
  std::string bytes = read_bytes(path_);
  ASSERT_GE(bytes.size(), 8192u);
  bytes.replace(4096, 4096, random_bytes(4096, 11));
  write_bytes(path_, bytes);
  Store store(path_);
  EXPECT_TRUE(store.quarantined().has_value());
  EXPECT_FALSE(store.find_winner("dev-h200", "p1").has_value()) << "a fresh cache replaced the damaged one";
}

TEST_F(CacheCorruption, WalAndShmTravelWithTheCorruptFile) {
  const std::string bytes = random_bytes(8192, 3);
  const std::string wal = random_bytes(5000, 4);
  write_bytes(path_, bytes);
  write_bytes(fs::path(path_.string() + "-wal"), wal);
  Store store(path_);
  ASSERT_TRUE(store.quarantined().has_value());
  // EXPECT_TRUE: a failure would print kilobytes of random bytes.
  EXPECT_TRUE(read_bytes(fs::path(store.quarantined()->string() + "-wal")) == wal);
  EXPECT_TRUE(read_bytes(fs::path(path_.string() + "-wal")) != wal);
  EXPECT_TRUE(read_bytes(*store.quarantined()) == bytes);
}

TEST_F(CacheCorruption, ZeroLengthFileBecomesAFreshCacheInPlace) {
  write_bytes(path_, "");
  {
    Store store(path_);
    EXPECT_FALSE(store.quarantined().has_value());
    store.record_tuning(device(), problem("p1"), {ok_trial(64, 1.0)}, 0, "v");
  }
  EXPECT_TRUE(files_containing(dir_, ".corrupt-").empty());
  Store store(path_);
  EXPECT_TRUE(store.find_winner("dev-h200", "p1").has_value());
}

TEST_F(CacheCorruption, FutureSchemaAndForeignDatabasesAreRefusedNotQuarantined) {
  {
    RawDb raw(path_);
    raw.exec("CREATE TABLE future (x INTEGER);");
    raw.exec("PRAGMA application_id = " + std::to_string(Store::kApplicationId));
    raw.exec("PRAGMA user_version = " + std::to_string(Store::kSchemaVersion + 1));
  }
  ::chmod(path_.c_str(), 0600);
  const std::string future = read_bytes(path_);
  Error e = capture_error([&] { Store store(path_); });
  EXPECT_EQ(e.kind(), ErrorKind::cache);
  EXPECT_NE(e.message().find("newer"), std::string::npos) << e.what();
  EXPECT_TRUE(read_bytes(path_) == future);

  const fs::path foreign = dir_ / "foreign.db";
  {
    RawDb raw(foreign);
    raw.exec("CREATE TABLE notes (body TEXT); PRAGMA application_id = 1234;");
  }
  ::chmod(foreign.c_str(), 0600);
  const std::string foreign_bytes = read_bytes(foreign);
  e = capture_error([&] { Store store(foreign); });
  EXPECT_EQ(e.kind(), ErrorKind::cache);
  EXPECT_NE(e.message().find("not a gmjit cache"), std::string::npos) << e.what();
  EXPECT_TRUE(read_bytes(foreign) == foreign_bytes);
  EXPECT_TRUE(files_containing(dir_, ".corrupt-").empty());
}

// ---------------------------------------------------------------------------------------------
// Export, import, merge

// A passing vector_add trial with the i-th of 16 distinct configurations (i < 16).
TrialRecord va(int i, double median_ms) {
  TrialRecord t = vector_add_trial(128 << (i % 4), median_ms);
  t.config_json = R"({"block":)" + std::to_string(128 << (i % 4)) + R"(,"items":)" + std::to_string(1 << (i / 4)) +
                  R"(,"vec_bytes":16})";
  return t;
}

// The p-th problem of the exchange tests: vector_add of 1024 << p elements.
ProblemRecord prob(int p) { return vector_add_problem(std::int64_t{1024} << p); }

class CacheExchange : public CacheV2 {
 protected:
  // Two devices, three problems, failures and NaN, identical trials, a binary.
  void fill(Store& store) {
    for (const char* dev : {"dev-a", "dev-b"}) {
      for (int p = 0; p < 3; ++p) {
        const TrialRecord same = va(3, 5.0);
        store.record_tuning(device(dev), prob(p),
                            {va(0, 2.0 + p), va(1, 1.0 + p), failed_trial("compile_failed"), same, same}, 1,
                            "0.4.0");
      }
    }
    store.put_binary(binary("ck-exported", 3000));
  }

  static void expect_same_winners(Store& a, Store& b) {
    const auto wa = a.winners();
    const auto wb = b.winners();
    ASSERT_EQ(wa.size(), wb.size());
    for (std::size_t i = 0; i < wa.size(); ++i) {
      SCOPED_TRACE(i);
      EXPECT_EQ(wa[i].device_key, wb[i].device_key);
      EXPECT_EQ(wa[i].problem_key, wb[i].problem_key);
      EXPECT_EQ(wa[i].config_json, wb[i].config_json);
      EXPECT_DOUBLE_EQ(wa[i].median_ms, wb[i].median_ms);
      EXPECT_EQ(wa[i].trial_count, wb[i].trial_count);
      EXPECT_EQ(wa[i].tuned_at, wb[i].tuned_at);
      EXPECT_EQ(wa[i].library_version, wb[i].library_version);
      EXPECT_EQ(a.trials(wa[i].device_key, wa[i].problem_key).size(),
                b.trials(wb[i].device_key, wb[i].problem_key).size());
    }
  }
};

TEST_F(CacheExchange, ExportThenImportReproducesWinnersAndTwiceChangesNothing) {
  const fs::path source_path = dir_ / "source.db";
  const fs::path out = dir_ / "export.json";
  Store source(source_path);
  fill(source);
  gmjit::cache::export_json(source, out, /*with_binaries=*/false);
  const auto doc = nlohmann::json::parse(read_bytes(out));
  EXPECT_EQ(doc.at("format"), "gmjit-cache-export");
  EXPECT_EQ(doc.at("version"), 1);
  EXPECT_EQ(doc.at("trials").size(), 30u);
  EXPECT_EQ(doc.at("winners").size(), 6u);
  EXPECT_FALSE(doc.contains("binaries"));
  EXPECT_EQ(files_containing(dir_, ".tmp-").size(), 0u);

  Store target(path_);
  ImportResult r = gmjit::cache::import_json(target, out, {});
  EXPECT_EQ(r.trials_added, 30u);
  EXPECT_EQ(r.winners_changed, 6u);
  EXPECT_EQ(r.binaries_added + r.binaries_ignored, 0u);
  expect_same_winners(source, target);
  const auto trials = target.trials("dev-a", prob(1).key);
  ASSERT_EQ(trials.size(), 5u);
  EXPECT_TRUE(std::isnan(trials[2].median_ms));
  EXPECT_EQ(trials[2].status, "compile_failed");

  const auto before = row_counts(path_);
  r = gmjit::cache::import_json(target, out, {});
  EXPECT_EQ(r.trials_added, 0u);
  EXPECT_EQ(r.winners_changed, 0u);
  EXPECT_EQ(row_counts(path_), before);
  // Exporting the imported cache and importing that into the source adds nothing either.
  const fs::path back = dir_ / "back.json";
  gmjit::cache::export_json(target, back, false);
  r = gmjit::cache::import_json(source, back, {});
  EXPECT_EQ(r.trials_added, 0u);
  EXPECT_EQ(r.winners_changed, 0u);
}

// Trusted binaries that are kept are the nvrtc tier's (tests/nvrtc/test_import_binaries.cpp):
// keeping one compiles it. Refusals that need no compile are checked here.
TEST_F(CacheExchange, ImportedBinariesIgnoredUnlessTrustedAndRefusedWithAReason) {
  const fs::path out = dir_ / "export.json";
  {
    Store source(dir_ / "source.db");
    fill(source);
    gmjit::cache::export_json(source, out, /*with_binaries=*/true);
  }
  Store target(path_);
  LogCapture log;
  ImportResult r = gmjit::cache::import_json(target, out, {});
  EXPECT_EQ(r.binaries_ignored, 1u);
  EXPECT_EQ(r.binaries_added, 0u);
  EXPECT_TRUE(r.binaries_refused.empty()) << "untrusted binaries are ignored, not examined";
  EXPECT_EQ(target.binaries_bytes(), 0);
  EXPECT_FALSE(target.get_binary("ck-exported").has_value());
  EXPECT_NE(log.text().find("ignored 1"), std::string::npos) << log.text();

  // The fixture's binary claims nothing this library could compile.
  ImportOptions trusted;
  trusted.trust_binaries = true;
  r = gmjit::cache::import_json(target, out, trusted);
  EXPECT_EQ(r.binaries_ignored, 1u);
  ASSERT_EQ(r.binaries_refused.size(), 1u);
  EXPECT_NE(r.binaries_refused[0].find("ck-exported"), std::string::npos) << r.binaries_refused[0];
  EXPECT_NE(r.binaries_refused[0].find("resources_json does not name"), std::string::npos) << r.binaries_refused[0];
  EXPECT_FALSE(target.get_binary("ck-exported").has_value());

  // A cubin altered in transit fails its checksum before anything else is looked at.
  auto doc = nlohmann::json::parse(read_bytes(out));
  std::string& cubin = doc["binaries"][0]["cubin_base64"].get_ref<std::string&>();
  cubin[10] = cubin[10] == 'A' ? 'B' : 'A';
  const fs::path altered = dir_ / "altered.json";
  write_bytes(altered, doc.dump());
  r = gmjit::cache::import_json(target, altered, trusted);
  EXPECT_EQ(r.binaries_ignored, 1u);
  ASSERT_EQ(r.binaries_refused.size(), 1u);
  EXPECT_NE(r.binaries_refused[0].find("fails its checksum"), std::string::npos) << r.binaries_refused[0];
  EXPECT_FALSE(target.get_binary("ck-exported").has_value());
}

TEST_F(CacheExchange, BadFilesThrowUsageAndLeaveTheCacheUntouched) {
  const fs::path good = dir_ / "good.json";
  {
    Store source(dir_ / "source.db");
    fill(source);
    source.record_tuning(device("dev-c"), problem("conv-1", "conv"), {ok_trial(8, 1.0)}, 0, "v");
    // The kernels table lists conv after vector_add, so every other case fails first.
    gmjit::cache::export_json(source, good, true);
  }
  const std::string text = read_bytes(good);
  auto doc = nlohmann::json::parse(text);
  Store target(path_);
  target.record_tuning(device("dev-a"), prob(0), {va(0, 9.0)}, 0, "mine");

  struct Case {
    std::string name;
    std::string content;
    std::string expected;  // part of the message
  };
  std::vector<Case> cases;
  cases.push_back({"malformed", "{\"format\": \"gmjit-cache-export\", \"version\": 1, ]", "JSON"});
  cases.push_back({"truncated", text.substr(0, text.size() / 2), "JSON"});
  cases.push_back({"empty", "", "JSON"});
  auto with = [&](auto change) {
    auto copy = doc;
    change(copy);
    return copy.dump();
  };
  cases.push_back({"wrong version", with([](auto& d) { d["version"] = 2; }), "version"});
  cases.push_back({"wrong format", with([](auto& d) { d["format"] = "other"; }), "format"});
  cases.push_back({"missing field", with([](auto& d) { d["trials"][3].erase("median_ms"); }),
                   "trials[3]: missing median_ms"});
  cases.push_back({"mistyped field", with([](auto& d) { d["trials"][1]["status"] = 3; }),
                   "trials[1].status: expected a string"});
  cases.push_back({"bad winner index", with([](auto& d) { d["winners"][0]["trial"] = 100000; }),
                   "winners[0].trial"});
  cases.push_back({"bad base64", with([](auto& d) { d["binaries"][0]["cubin_base64"] = "@@@@"; }),
                   "binaries[0].cubin_base64"});
  cases.push_back({"unknown kernel", text, R"(kernels[1] (name "conv"): unknown kernel "conv")"});

  const std::string db_before = read_bytes(path_);
  const std::string wal_before = read_bytes(fs::path(path_.string() + "-wal"));
  const auto counts_before = row_counts(path_);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const fs::path in = dir_ / "bad.json";
    write_bytes(in, c.content);
    const Error e = capture_error([&] { gmjit::cache::import_json(target, in, {}); });
    EXPECT_EQ(e.kind(), ErrorKind::usage);
    EXPECT_NE(e.message().find(c.expected), std::string::npos) << e.message();
    EXPECT_EQ(e.message().find('\n'), std::string::npos) << e.message();
    EXPECT_TRUE(read_bytes(path_) == db_before);
    EXPECT_TRUE(read_bytes(fs::path(path_.string() + "-wal")) == wal_before);
  }
  EXPECT_EQ(row_counts(path_), counts_before);
  EXPECT_DOUBLE_EQ(target.find_winner("dev-a", prob(0).key)->median_ms, 9.0);
}

TEST_F(CacheExchange, MergeKeepsFasterWinnerAndEveryTrial) {
  const fs::path a_path = dir_ / "a.db";
  const fs::path b_path = dir_ / "b.db";
  {
    Store a(a_path);
    a.record_tuning(device(), prob(0), {va(1, 2.0), va(2, 3.0)}, 0, "a");
    a.record_tuning(device(), prob(1), {va(1, 1.0)}, 0, "a");
    Store b(b_path);
    b.record_tuning(device(), prob(0), {va(3, 1.5)}, 0, "b");
    b.record_tuning(device(), prob(1), {va(4, 3.0), failed_trial("invalid")}, 0, "b");
    b.record_tuning(device(), prob(2), {va(5, 7.0)}, 0, "b");
    b.put_binary(binary("ck-b", 100));
  }
  const std::string P = prob(0).key, Q = prob(1).key, R = prob(2).key;
  Store target(path_);
  ImportResult r = gmjit::cache::merge_into(target, {a_path, b_path}, {});
  EXPECT_EQ(r.trials_added, 3u + 4u);
  EXPECT_EQ(r.winners_changed, 2u + 2u);  // P, Q from a; then P and R from b
  EXPECT_EQ(r.binaries_ignored, 1u);
  EXPECT_EQ(target.find_winner("dev-h200", P)->config_json, va(3, 0).config_json);
  EXPECT_EQ(target.find_winner("dev-h200", Q)->config_json, va(1, 0).config_json);
  EXPECT_EQ(target.find_winner("dev-h200", R)->config_json, va(5, 0).config_json);
  EXPECT_EQ(target.trials("dev-h200", P).size(), 3u);
  EXPECT_EQ(target.trials("dev-h200", Q).size(), 3u);
  EXPECT_FALSE(target.get_binary("ck-b").has_value());

  // Again: nothing changes; and the sources were only read.
  const auto counts = row_counts(path_);
  r = gmjit::cache::merge_into(target, {b_path, a_path}, {});
  EXPECT_EQ(r.trials_added + r.winners_changed, 0u);
  EXPECT_EQ(row_counts(path_), counts);

  // Into a itself: P improves, Q stays, R arrives.
  Store a(a_path);
  r = gmjit::cache::merge_into(a, {b_path}, {});
  EXPECT_EQ(r.winners_changed, 2u);
  EXPECT_DOUBLE_EQ(a.find_winner("dev-h200", P)->median_ms, 1.5);
  EXPECT_DOUBLE_EQ(a.find_winner("dev-h200", Q)->median_ms, 1.0);
}

TEST_F(CacheExchange, StoreRowsMergeIntoAnotherStoreAndAFailedMergeWritesNothing) {
  Store source(dir_ / "source.db");
  fill(source);
  const CacheRows rows = source.read_rows(/*with_binaries=*/true);
  EXPECT_EQ(rows.devices.size(), 2u);
  EXPECT_EQ(rows.kernels.size(), 1u);
  EXPECT_EQ(rows.problems.size(), 3u);
  ASSERT_EQ(rows.trials.size(), 30u);
  EXPECT_EQ(rows.trials[4].occurrence, 1);  // the second of two identical trials
  ASSERT_EQ(rows.winners.size(), 6u);
  ASSERT_EQ(rows.binaries.size(), 1u);
  EXPECT_TRUE(source.read_rows(/*with_binaries=*/false).binaries.empty());
  EXPECT_EQ(source.binary_count(), 1u);

  Store target(path_);
  ImportResult r = target.merge({rows});
  EXPECT_EQ(r.trials_added, 30u);
  EXPECT_EQ(r.winners_changed, 6u);
  EXPECT_EQ(r.binaries_added, 1u);
  expect_same_winners(source, target);
  ASSERT_TRUE(target.get_binary("ck-exported").has_value());
  r = target.merge({rows, rows});
  EXPECT_EQ(r.trials_added + r.winners_changed + r.binaries_added, 0u);
  EXPECT_EQ(r.binaries_ignored, 2u);

  // A winner whose trial did not pass is refused after the devices, kernels and problems of the
  // same rows were written: the transaction takes them back.
  Store other(dir_ / "other.db");
  other.record_tuning(device("dev-c"), problem("prob-c"), {ok_trial(8, 1.0)}, 0, "v");
  const auto counts = row_counts(dir_ / "other.db");
  CacheRows bad = rows;
  bad.winners.back().trial = 2;  // compile_failed, on dev-a prob-0
  const Error e = capture_error([&] { other.merge({rows, bad}); });
  EXPECT_EQ(e.kind(), ErrorKind::usage);
  EXPECT_EQ(row_counts(dir_ / "other.db"), counts);
  EXPECT_FALSE(other.find_winner("dev-a", prob(0).key).has_value());
}

TEST_F(CacheExchange, MergeRefusesForeignFilesAndReadsV1SourcesWithoutUpgrading) {
  Store target(path_);
  target.record_tuning(device(), problem("mine"), {ok_trial(1, 1.0)}, 0, "v");
  const auto counts = row_counts(path_);

  const fs::path foreign = dir_ / "foreign.db";
  {
    RawDb raw(foreign);
    raw.exec("CREATE TABLE notes (body TEXT)");
  }
  const fs::path garbage = dir_ / "garbage.db";
  write_bytes(garbage, random_bytes(8192, 9));
  for (const fs::path& bad : {foreign, garbage, dir_ / "missing.db"}) {
    SCOPED_TRACE(bad.string());
    const Error e = capture_error([&] { gmjit::cache::merge_into(target, {bad}, {}); });
    EXPECT_EQ(e.kind(), ErrorKind::cache);
    EXPECT_NE(e.message().find(bad.string()), std::string::npos) << e.message();
  }
  EXPECT_TRUE(read_bytes(garbage) == random_bytes(8192, 9));
  EXPECT_EQ(row_counts(path_), counts);

  const fs::path v1 = dir_ / "v1.db";
  {
    Store old(v1);
    old.record_tuning(device(), prob(3), {va(1, 2.0), va(2, 1.0)}, 1, "v1");
  }
  downgrade_to_v1(v1);
  const ImportResult r = gmjit::cache::merge_into(target, {v1}, {});
  EXPECT_EQ(r.trials_added, 3u);  // the two identical trials stay two
  EXPECT_EQ(r.winners_changed, 1u);
  EXPECT_EQ(target.find_winner("dev-h200", prob(3).key)->config_json, va(2, 0).config_json);
  RawDb raw(v1);
  EXPECT_EQ(raw.integer("PRAGMA user_version"), 1);
}

// ---------------------------------------------------------------------------------------------
// Several processes

// Runs `body` in a child process; the child's exit code is 0 when body returned, 1 when it threw.
pid_t spawn(const std::function<void()>& body) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  int code = 0;
  try {
    body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "child %d: %s\n", static_cast<int>(::getpid()), e.what());
    code = 1;
  }
  ::_exit(code);
}

int exit_code(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

std::string fmt_key(int process, int run) {
  return "proc" + std::to_string(process) + "-run" + std::to_string(run);
}

class CacheProcesses : public CacheV2 {};

TEST_F(CacheProcesses, SixteenWritersAtOnceLoseNothing) {
  constexpr int kProcesses = 16;
  constexpr int kRuns = 50;
  constexpr int kTrials = 10;
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    children.push_back(spawn([&, p] {
      // Every child holds the write end until it closes it; the read returns at EOF, once
      // the parent has closed its copy too.
      ::close(go[1]);
      char c;
      while (::read(go[0], &c, 1) < 0 && errno == EINTR) {
      }
      Store store(path_);
      for (int r = 0; r < kRuns; ++r) {
        std::vector<TrialRecord> trials;
        for (int t = 0; t < kTrials; ++t) trials.push_back(ok_trial(t, 1.0 + t + r));
        store.record_tuning(device(), problem(fmt_key(p, r)), trials, r % kTrials, "v");
      }
    }));
    ASSERT_GT(children.back(), 0);
  }
  ::close(go[0]);
  ::close(go[1]);  // every child starts now
  for (int p = 0; p < kProcesses; ++p) EXPECT_EQ(exit_code(children[p]), 0) << "child " << p;

  RawDb raw(path_);
  EXPECT_EQ(raw.text("PRAGMA integrity_check"), "ok");
  EXPECT_EQ(raw.integer("SELECT count(*) FROM trials"), kProcesses * kRuns * kTrials);
  EXPECT_EQ(raw.integer("SELECT count(*) FROM winners"), kProcesses * kRuns);
  EXPECT_EQ(raw.integer("SELECT count(*) FROM problems"), kProcesses * kRuns);
  Store store(path_);
  for (int p = 0; p < kProcesses; ++p) {
    for (int r = 0; r < kRuns; r += 7) {
      const auto w = store.find_winner("dev-h200", fmt_key(p, r));
      ASSERT_TRUE(w.has_value()) << fmt_key(p, r);
      EXPECT_EQ(w->config_json, R"({"tile":)" + std::to_string(r % kTrials) + "}");
      EXPECT_EQ(store.trials("dev-h200", fmt_key(p, r)).size(), std::size_t{kTrials});
    }
  }
}

TEST_F(CacheProcesses, KillNineDuringWritesLeavesAConsistentCache) {
  constexpr int kProblems = kCrashProblems;
  constexpr int kKills = 25;
  constexpr int kTrials = 10;
  // Resumes where the last writer stopped: a problem with a winner is done.
  auto writer = [&] {
    Store store(path_);
    for (int i = 0; i < kProblems; ++i) {
      const std::string key = "p" + std::to_string(i);
      if (store.find_winner("dev-h200", key)) continue;
      std::vector<TrialRecord> trials;
      for (int t = 0; t < kTrials; ++t) trials.push_back(ok_trial(t, 1.0 + t));
      store.record_tuning(device(), problem(key), trials, i % kTrials, "v");
    }
  };
  { Store create(path_); }
  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> delay_ms(0, 200);
  SCOPED_TRACE("seed " + std::to_string(seed));
  int interrupted = 0;
  for (int k = 0; k < kKills; ++k) {
    SCOPED_TRACE(k);
    const pid_t pid = spawn(writer);
    ASSERT_GT(pid, 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms(rng)));
    ::kill(pid, SIGKILL);
    const int code = exit_code(pid);
    EXPECT_TRUE(code == 0 || code == 128 + SIGKILL) << code;
    interrupted += code != 0;
    RawDb raw(path_);
    ASSERT_EQ(raw.text("PRAGMA integrity_check"), "ok");
    EXPECT_EQ(raw.integer("SELECT count(*) FROM winners w LEFT JOIN trials t ON t.id = w.trial_id "
                          "WHERE t.id IS NULL"),
              0);
    // record_tuning is one transaction: a problem has all its trials and its winner, or nothing.
    EXPECT_EQ(raw.integer("SELECT count(*) FROM (SELECT problem_id FROM trials GROUP BY problem_id "
                          "HAVING count(*) != " +
                          std::to_string(kTrials) + ")"),
              0);
    EXPECT_EQ(raw.integer("SELECT count(*) FROM problems p WHERE NOT EXISTS (SELECT 1 FROM winners "
                          "w WHERE w.problem_id = p.id)"),
              0);
  }
  std::printf("kill -9 runs: %d of %d interrupted a writer\n", interrupted, kKills);
  EXPECT_GT(interrupted, kKills / 2) << "too few kills landed while the writer was busy";
  const pid_t pid = spawn(writer);
  EXPECT_EQ(exit_code(pid), 0);
  RawDb raw(path_);
  EXPECT_EQ(raw.text("PRAGMA integrity_check"), "ok");
  EXPECT_EQ(raw.integer("SELECT count(*) FROM winners"), kProblems);
  EXPECT_EQ(raw.integer("SELECT count(*) FROM trials"), kProblems * kTrials);
}

}  // namespace
