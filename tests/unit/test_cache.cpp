#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cache/store.hpp"
#include "cache_test_support.hpp"
#include "gmjit/error.hpp"

namespace {

namespace fs = std::filesystem;
using namespace gmjit::cache_test;

std::int64_t now_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

unsigned mode_of(const fs::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0xFFFFFFFFu;
  return st.st_mode & 07777;
}

// Sets or unsets environment variables for one test and restores the previous values after.
class EnvGuard {
 public:
  explicit EnvGuard(std::vector<std::string> names) {
    for (auto& name : names) {
      const char* value = std::getenv(name.c_str());
      saved_.emplace_back(name, value ? std::optional<std::string>(value) : std::nullopt);
    }
  }
  EnvGuard(const EnvGuard&) = delete;
  EnvGuard& operator=(const EnvGuard&) = delete;
  ~EnvGuard() {
    for (const auto& [name, value] : saved_) {
      if (value) {
        ::setenv(name.c_str(), value->c_str(), 1);
      } else {
        ::unsetenv(name.c_str());
      }
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

class CacheTest : public CacheDirTest {
 protected:
  static DeviceRecord device(const std::string& key = "dev-h200") {
    return {key, "NVIDIA H200", "sm_90a",
            R"({"name":"NVIDIA H200","cc":"9.0","sms":132,"l2":52428800})"};
  }
  static ProblemRecord problem(const std::string& key = "prob-gemm-f16-4096",
                               const std::string& kernel = "gemm", const std::string& dtype = "f16",
                               const std::string& shape = "[4096,4096,4096]") {
    return {key, kernel, "tmplhash01", dtype, "rcr", shape};
  }
  static TrialRecord failed_trial(const std::string& status, const std::string& detail) {
    TrialRecord t;
    t.config_json = R"({"tile":512})";
    t.status = status;
    t.detail = detail;
    return t;
  }
};

void expect_same_trial(const TrialRecord& expected, const TrialRecord& actual) {
  EXPECT_EQ(expected.config_json, actual.config_json);
  EXPECT_EQ(expected.status, actual.status);
  EXPECT_DOUBLE_EQ(expected.median_ms, actual.median_ms);
  EXPECT_DOUBLE_EQ(expected.spread, actual.spread);
  EXPECT_EQ(expected.repetitions, actual.repetitions);
  if (std::isnan(expected.verify_error)) {
    EXPECT_TRUE(std::isnan(actual.verify_error));
  } else {
    EXPECT_DOUBLE_EQ(expected.verify_error, actual.verify_error);
  }
  EXPECT_DOUBLE_EQ(expected.compile_ms, actual.compile_ms);
  EXPECT_EQ(expected.registers, actual.registers);
  EXPECT_EQ(expected.spill_bytes, actual.spill_bytes);
  EXPECT_EQ(expected.shared_bytes, actual.shared_bytes);
  EXPECT_EQ(expected.detail, actual.detail);
}

TEST_F(CacheTest, CreateAndReopenKeepsData) {
  const std::vector<TrialRecord> trials = {ok_trial(64, 1.5), ok_trial(128, 1.25)};
  {
    Store store(path_);
    EXPECT_EQ(store.path(), path_);
    store.record_tuning(device(), problem(), trials, 1, "0.1.0");
  }
  ASSERT_TRUE(fs::exists(path_));
  Store reopened(path_);
  const auto winner = reopened.find_winner("dev-h200", "prob-gemm-f16-4096");
  ASSERT_TRUE(winner.has_value());
  EXPECT_EQ(winner->config_json, R"({"tile":128})");
  const auto stored = reopened.trials("dev-h200", "prob-gemm-f16-4096");
  ASSERT_EQ(stored.size(), 2u);
  expect_same_trial(trials[0], stored[0]);
  expect_same_trial(trials[1], stored[1]);
  RawDb raw(path_, /*writable=*/false);
  EXPECT_EQ(raw.integer("PRAGMA user_version"), Store::kSchemaVersion);
  EXPECT_EQ(raw.integer("PRAGMA application_id"), Store::kApplicationId);
}

TEST_F(CacheTest, RecordThenFindWinnerRoundTrip) {
  Store store(path_);
  TrialRecord nan_verify = ok_trial(32, 3.0);
  nan_verify.verify_error = std::nan("");
  const std::vector<TrialRecord> trials = {
      ok_trial(64, 2.0), failed_trial("compile_failed", "error: too many resources requested"),
      ok_trial(128, 0.75), nan_verify, failed_trial("timeout", "killed after 10 s")};
  const std::int64_t before = now_seconds();
  store.record_tuning(device(), problem(), trials, 2, "0.3.1");
  const std::int64_t after = now_seconds();

  const std::optional<WinnerRecord> w = store.find_winner("dev-h200", "prob-gemm-f16-4096");
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->device_key, "dev-h200");
  EXPECT_EQ(w->device_name, "NVIDIA H200");
  EXPECT_EQ(w->problem_key, "prob-gemm-f16-4096");
  EXPECT_EQ(w->kernel, "gemm");
  EXPECT_EQ(w->dtype, "f16");
  EXPECT_EQ(w->shape_json, "[4096,4096,4096]");
  EXPECT_EQ(w->config_json, R"({"tile":128})");
  EXPECT_DOUBLE_EQ(w->median_ms, 0.75);
  EXPECT_EQ(w->trial_count, 5);
  EXPECT_GE(w->tuned_at, before);
  EXPECT_LE(w->tuned_at, after);
  EXPECT_EQ(w->library_version, "0.3.1");

  const auto stored = store.trials("dev-h200", "prob-gemm-f16-4096");
  ASSERT_EQ(stored.size(), trials.size());
  for (std::size_t i = 0; i < trials.size(); ++i) {
    SCOPED_TRACE(i);
    expect_same_trial(trials[i], stored[i]);
  }

  EXPECT_FALSE(store.find_winner("dev-h200", "other-problem").has_value());
  EXPECT_FALSE(store.find_winner("other-device", "prob-gemm-f16-4096").has_value());
  EXPECT_TRUE(store.trials("other-device", "prob-gemm-f16-4096").empty());
}

TEST_F(CacheTest, SecondRecordReplacesWinnerAndKeepsAllTrials) {
  Store store(path_);
  store.record_tuning(device(), problem(),
                      {ok_trial(64, 2.0), ok_trial(128, 1.0), ok_trial(256, 1.5)}, 1, "0.1.0");
  store.record_tuning(device(), problem(), {ok_trial(96, 0.5), ok_trial(192, 0.9)}, 0, "0.2.0");

  const auto w = store.find_winner("dev-h200", "prob-gemm-f16-4096");
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->config_json, R"({"tile":96})");
  EXPECT_DOUBLE_EQ(w->median_ms, 0.5);
  EXPECT_EQ(w->trial_count, 2);
  EXPECT_EQ(w->library_version, "0.2.0");

  const auto stored = store.trials("dev-h200", "prob-gemm-f16-4096");
  ASSERT_EQ(stored.size(), 5u);
  EXPECT_EQ(stored[0].config_json, R"({"tile":64})");
  EXPECT_EQ(stored[2].config_json, R"({"tile":256})");
  EXPECT_EQ(stored[3].config_json, R"({"tile":96})");
  EXPECT_EQ(stored[4].config_json, R"({"tile":192})");

  EXPECT_EQ(store.winners().size(), 1u);
  EXPECT_EQ(row_counts(path_), (RowCounts{{"devices", 1}, {"kernels", 1}, {"problems", 1},
                                          {"trials", 5}, {"winners", 1}, {"binaries", 0}}));
  RawDb raw(path_, /*writable=*/false);
  EXPECT_EQ(raw.integer("SELECT count(*) FROM trials WHERE library_version = '0.2.0'"), 2);
}

TEST_F(CacheTest, RecordWithoutWinnerKeepsPreviousWinner) {
  Store store(path_);
  store.record_tuning(device(), problem(), {ok_trial(64, 2.0)}, 0, "0.1.0");
  store.record_tuning(device(), problem(), {failed_trial("crashed", "illegal address")},
                      std::nullopt, "0.1.0");
  const auto w = store.find_winner("dev-h200", "prob-gemm-f16-4096");
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->config_json, R"({"tile":64})");
  EXPECT_EQ(store.trials("dev-h200", "prob-gemm-f16-4096").size(), 2u);
}

TEST_F(CacheTest, FailedRecordRollsBackEverything) {
  Store store(path_);
  store.record_tuning(device(), problem(), {ok_trial(64, 2.0)}, 0, "0.1.0");

  // A new device and problem, a valid trial first, then one the CHECK constraint rejects: the
  // device, problem, kernel and first trial were already inserted when the error came.
  const Error e = capture_error([&] {
    store.record_tuning(device("dev-new"), problem("prob-new", "conv", "bf16"),
                        {ok_trial(32, 0.1), failed_trial("exploded", "not a status")}, 0, "0.2.0");
  });
  EXPECT_EQ(e.kind(), ErrorKind::cache);
  EXPECT_NE(e.message().find("trial 1"), std::string::npos) << e.what();
  EXPECT_NE(e.message().find("CHECK constraint failed"), std::string::npos) << e.what();

  EXPECT_FALSE(store.find_winner("dev-new", "prob-new").has_value());
  EXPECT_TRUE(store.trials("dev-new", "prob-new").empty());
  EXPECT_EQ(row_counts(path_), (RowCounts{{"devices", 1}, {"kernels", 1}, {"problems", 1},
                                          {"trials", 1}, {"winners", 1}, {"binaries", 0}}));
  // The failed transaction is over: the same store writes again.
  store.record_tuning(device("dev-new"), problem("prob-new", "conv", "bf16"), {ok_trial(32, 0.1)},
                      0, "0.2.0");
  EXPECT_TRUE(store.find_winner("dev-new", "prob-new").has_value());
}

TEST_F(CacheTest, BadArgumentsAreUsageErrorsAndWriteNothing) {
  Store store(path_);
  const std::vector<TrialRecord> trials = {ok_trial(64, 2.0), failed_trial("invalid", "smem")};
  EXPECT_EQ(capture_error([&] { store.record_tuning(device(), problem(), trials, 2, "v"); }).kind(),
            ErrorKind::usage);
  EXPECT_EQ(capture_error([&] { store.record_tuning(device(), problem(), trials, 1, "v"); }).kind(),
            ErrorKind::usage);
  std::vector<TrialRecord> bad_json = trials;
  bad_json[0].config_json = "{tile: 64";
  EXPECT_EQ(
      capture_error([&] { store.record_tuning(device(), problem(), bad_json, 0, "v"); }).kind(),
      ErrorKind::usage);
  EXPECT_TRUE(store.trials("dev-h200", "prob-gemm-f16-4096").empty());
  EXPECT_TRUE(store.winners().empty());
}

TEST_F(CacheTest, WinnersOrderedByKernelDtypeShapeAndFiltered) {
  Store store(path_);
  auto record = [&](const std::string& key, const std::string& kernel, const std::string& dtype,
                    const std::string& shape) {
    store.record_tuning(device(), problem(key, kernel, dtype, shape), {ok_trial(64, 1.0)}, 0, "v");
  };
  record("p1", "gemm", "f16", "[4096,4096,4096]");
  record("p2", "gemm", "f16", "[256,256,256]");
  record("p3", "conv", "f32", "[1,64,56,56]");
  record("p4", "gemm", "bf16", "[1024,1024,1024]");
  record("p5", "gemm", "f16", "[1024,1024,1024]");

  std::vector<std::string> order;
  for (const auto& w : store.winners()) order.push_back(w.problem_key);
  EXPECT_EQ(order, (std::vector<std::string>{"p3", "p4", "p2", "p5", "p1"}));

  order.clear();
  for (const auto& w : store.winners("gemm")) order.push_back(w.problem_key);
  EXPECT_EQ(order, (std::vector<std::string>{"p4", "p2", "p5", "p1"}));
  EXPECT_TRUE(store.winners("no-such-kernel").empty());
}

TEST_F(CacheTest, NewerSchemaRefusedAndFileLeftByteIdentical) {
  {
    RawDb raw(path_, /*writable=*/true);
    raw.exec("CREATE TABLE future (x INTEGER); INSERT INTO future VALUES (42);");
    raw.exec("PRAGMA application_id = " + std::to_string(Store::kApplicationId));
    raw.exec("PRAGMA user_version = " + std::to_string(Store::kSchemaVersion + 1));
  }
  ASSERT_EQ(::chmod(path_.c_str(), 0600), 0);
  const std::string before = read_bytes(path_);
  ASSERT_FALSE(before.empty());

  const Error e = capture_error([&] { Store store(path_); });
  EXPECT_EQ(e.kind(), ErrorKind::cache);
  EXPECT_NE(e.message().find("newer"), std::string::npos) << e.what();
  EXPECT_NE(e.message().find(path_.string()), std::string::npos) << e.what();
  EXPECT_EQ(read_bytes(path_), before);
  EXPECT_FALSE(fs::exists(fs::path(path_.string() + "-wal")));
  RawDb raw(path_, /*writable=*/false);
  EXPECT_EQ(raw.integer("PRAGMA user_version"), Store::kSchemaVersion + 1);
}

TEST_F(CacheTest, ForeignDatabaseAndNonDatabaseRefused) {
  {
    RawDb raw(path_, /*writable=*/true);
    raw.exec("CREATE TABLE notes (body TEXT);");
  }
  ASSERT_EQ(::chmod(path_.c_str(), 0600), 0);
  const std::string before = read_bytes(path_);
  Error e = capture_error([&] { Store store(path_); });
  EXPECT_EQ(e.kind(), ErrorKind::cache);
  EXPECT_NE(e.message().find("not a gmjit cache"), std::string::npos) << e.what();
  EXPECT_EQ(read_bytes(path_), before);

  const fs::path text = dir_ / "text.db";
  {
    std::ofstream(text) << "this is not a database, just some text long enough to have a header\n";
  }
  ASSERT_EQ(::chmod(text.c_str(), 0600), 0);
  const std::string text_before = read_bytes(text);
  // Not a database at all is corruption, not a foreign database: it is moved aside, bytes intact,
  // and a fresh cache takes its place (see test_cache_v2.cpp for the details).
  Store store(text);
  ASSERT_TRUE(store.quarantined().has_value());
  EXPECT_EQ(read_bytes(*store.quarantined()), text_before);
  EXPECT_TRUE(store.winners().empty());
}

TEST_F(CacheTest, GroupWritableFileRefused) {
  { Store store(path_); }
  ASSERT_EQ(::chmod(path_.c_str(), 0660), 0);
  const Error e = capture_error([&] { Store store(path_); });
  EXPECT_EQ(e.kind(), ErrorKind::cache);
  EXPECT_NE(e.message().find("chmod 600 " + path_.string()), std::string::npos) << e.what();
  EXPECT_EQ(e.message().find('\n'), std::string::npos) << "reason must be one line";
  EXPECT_EQ(mode_of(path_), 0660u) << "the store must not change the mode it refused";

  ASSERT_EQ(::chmod(path_.c_str(), 0600), 0);
  EXPECT_NO_THROW(Store store(path_));
}

TEST_F(CacheTest, WorldWritableDirectoryRefused) {
  const fs::path sub = dir_ / "open";
  ASSERT_EQ(::mkdir(sub.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(sub.c_str(), 0777), 0);
  const Error e = capture_error([&] { Store store(sub / "gmjit.db"); });
  EXPECT_EQ(e.kind(), ErrorKind::cache);
  EXPECT_NE(e.message().find("chmod 700 " + sub.string()), std::string::npos) << e.what();
  EXPECT_FALSE(fs::exists(sub / "gmjit.db")) << "nothing is created in a refused directory";
}

TEST_F(CacheTest, FileOwnedByAnotherUserRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "only root can give a file to another user";
  { Store store(path_); }
  ASSERT_EQ(::chown(path_.c_str(), 65534, 65534), 0);
  const Error e = capture_error([&] { Store store(path_); });
  EXPECT_EQ(e.kind(), ErrorKind::cache);
  EXPECT_NE(e.message().find("owned by uid 65534"), std::string::npos) << e.what();
  EXPECT_NE(e.message().find(path_.string()), std::string::npos) << e.what();
}

TEST_F(CacheTest, CreatesDirectoriesAndFileWithPrivateModes) {
  const fs::path nested = dir_ / "a" / "b" / "gmjit.db";
  // The most permissive umask: the modes must come from the store, not from the umask.
  const mode_t old_umask = ::umask(0);
  std::optional<Error> failure;
  try {
    Store store(nested);
    store.record_tuning(device(), problem(), {ok_trial(64, 1.0)}, 0, "v");
    // SQLite gives -wal and -shm the database's mode; check them while the store holds them open.
    EXPECT_EQ(mode_of(fs::path(nested.string() + "-wal")), 0600u);
    EXPECT_EQ(mode_of(fs::path(nested.string() + "-shm")), 0600u);
  } catch (const Error& e) {
    failure = e;
  }
  ::umask(old_umask);
  ASSERT_FALSE(failure.has_value()) << failure->what();
  EXPECT_EQ(mode_of(dir_ / "a"), 0700u);
  EXPECT_EQ(mode_of(dir_ / "a" / "b"), 0700u);
  EXPECT_EQ(mode_of(nested), 0600u);
  RawDb raw(nested, /*writable=*/false);
  EXPECT_EQ(raw.integer("SELECT count(*) FROM winners"), 1);
}

TEST_F(CacheTest, UsesWalJournal) {
  { Store store(path_); }
  // journal_mode WAL is persistent in the file header (read and write versions 2).
  const std::string header = read_bytes(path_).substr(0, 20);
  ASSERT_EQ(header.size(), 20u);
  EXPECT_EQ(static_cast<int>(header[18]), 2);
  EXPECT_EQ(static_cast<int>(header[19]), 2);
}

TEST_F(CacheTest, UnwritableLocationReportsPath) {
  fs::path target;
  if (::geteuid() == 0) {
    // Permission bits do not stop root; /proc refuses new directories to everyone.
    target = "/proc/gmjit-cache-test/sub/gmjit.db";
  } else {
    const fs::path locked = dir_ / "locked";
    ASSERT_EQ(::mkdir(locked.c_str(), 0500), 0);
    target = locked / "sub" / "gmjit.db";
  }
  const Error e = capture_error([&] { Store store(target); });
  EXPECT_EQ(e.kind(), ErrorKind::cache);
  EXPECT_NE(e.message().find(target.string()), std::string::npos) << e.what();
}

TEST_F(CacheTest, StoreIsMovable) {
  Store first(path_);
  first.record_tuning(device(), problem(), {ok_trial(64, 1.0)}, 0, "v");
  Store second(std::move(first));
  EXPECT_TRUE(second.find_winner("dev-h200", "prob-gemm-f16-4096").has_value());
  Store third(dir_ / "other.db");
  third = std::move(second);
  EXPECT_EQ(third.path(), path_);
  third.record_tuning(device(), problem(), {ok_trial(128, 0.5)}, 0, "v");
  EXPECT_EQ(third.trials("dev-h200", "prob-gemm-f16-4096").size(), 2u);
}

TEST_F(CacheTest, ConcurrentStoresOnOneNewFile) {
  // Every thread opens the not-yet-existing file at once, so creation and the schema migration
  // race too; each write must then wait for the lock instead of failing.
  constexpr int kThreads = 4;
  constexpr int kRuns = 10;
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        Store store(path_);
        for (int r = 0; r < kRuns; ++r) {
          store.record_tuning(device(), problem(), {ok_trial(t, 1.0 + r), ok_trial(100 + t, 2.0)},
                              0, "v");
        }
      } catch (const std::exception& e) {
        errors[t] = e.what();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(errors[t], "") << "thread " << t;
  Store store(path_);
  EXPECT_EQ(store.trials("dev-h200", "prob-gemm-f16-4096").size(),
            static_cast<std::size_t>(2 * kThreads * kRuns));
  EXPECT_EQ(store.winners().size(), 1u);
}

TEST(CacheDefaultPath, HonoursGmjitCacheXdgAndHome) {
  EnvGuard guard({"GMJIT_CACHE", "XDG_CACHE_HOME", "HOME"});
  ::setenv("GMJIT_CACHE", "/srv/tuning/custom.db", 1);
  ::setenv("XDG_CACHE_HOME", "/xdg/cache", 1);
  ::setenv("HOME", "/home/someone", 1);
  EXPECT_EQ(gmjit::cache::default_path(), fs::path("/srv/tuning/custom.db"));

  ::unsetenv("GMJIT_CACHE");
  EXPECT_EQ(gmjit::cache::default_path(), fs::path("/xdg/cache/gmjit/gmjit.db"));

  ::setenv("GMJIT_CACHE", "", 1);  // empty counts as unset
  EXPECT_EQ(gmjit::cache::default_path(), fs::path("/xdg/cache/gmjit/gmjit.db"));

  ::unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(gmjit::cache::default_path(), fs::path("/home/someone/.cache/gmjit/gmjit.db"));

  ::setenv("XDG_CACHE_HOME", "relative/cache", 1);  // the XDG spec says to ignore it
  EXPECT_EQ(gmjit::cache::default_path(), fs::path("/home/someone/.cache/gmjit/gmjit.db"));
}

}  // namespace
