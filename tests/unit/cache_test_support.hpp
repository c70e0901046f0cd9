#pragma once
// Helpers the cache tests share: a private directory per test, raw SQLite access independent of
// the Store, file bytes, catching the gmjit::Error an action throws, a measured trial, and
// records of a real kernel that the import rules (cache/rules.hpp) accept.

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <system_error>

#include "cache/keys.hpp"
#include "cache/store.hpp"
#include "gmjit/error.hpp"
#include "templates/registry.hpp"

namespace gmjit::cache_test {

// The names every cache test uses; a test file takes them with `using namespace`.
using cache::DeviceRecord;
using cache::ProblemRecord;
using cache::Store;
using cache::TrialRecord;
using cache::WinnerRecord;
using gmjit::Error;
using gmjit::ErrorKind;

// Returns the gmjit::Error that `f` throws; records a failure when it throws none.
template <class F>
Error capture_error(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "expected a gmjit::Error, nothing was thrown";
  return Error(ErrorKind::driver, 0, "<nothing thrown>");
}

inline std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Raw SQLite access, to look at (or damage) what really is in the file.
class RawDb {
 public:
  explicit RawDb(const std::filesystem::path& path, bool writable = true) {
    const int flags = writable ? (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) : SQLITE_OPEN_READONLY;
    if (sqlite3_open_v2(path.c_str(), &db_, flags, nullptr) != SQLITE_OK) {
      ADD_FAILURE() << "cannot open " << path << ": " << sqlite3_errmsg(db_);
    }
    sqlite3_busy_timeout(db_, 10'000);
  }
  RawDb(const RawDb&) = delete;
  RawDb& operator=(const RawDb&) = delete;
  ~RawDb() { sqlite3_close_v2(db_); }

  void exec(const std::string& sql) {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
      ADD_FAILURE() << sql << ": " << (err ? err : "?");
    }
    sqlite3_free(err);
  }

  std::int64_t integer(const std::string& sql) {
    const auto v = text(sql);
    return v.empty() ? -1 : std::stoll(v);
  }

  std::string text(const std::string& sql) {
    sqlite3_stmt* stmt = nullptr;
    std::string value;
    if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &stmt, nullptr) != SQLITE_OK) {
      ADD_FAILURE() << sql << ": " << sqlite3_errmsg(db_);
    } else if (sqlite3_step(stmt) == SQLITE_ROW) {
      const auto* t = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
      value = t ? t : "";
    } else {
      ADD_FAILURE() << sql << ": no row: " << sqlite3_errmsg(db_);
    }
    sqlite3_finalize(stmt);
    return value;
  }

 private:
  sqlite3* db_ = nullptr;
};

// Rows of each table of a schema-2 cache, by table name.
using RowCounts = std::map<std::string, std::int64_t>;

inline RowCounts row_counts(const std::filesystem::path& path) {
  RawDb raw(path, /*writable=*/false);
  RowCounts counts;
  for (const char* table : {"devices", "kernels", "problems", "trials", "winners", "binaries"}) {
    counts[table] = raw.integer(std::string("SELECT count(*) FROM ") + table);
  }
  return counts;
}

// A fresh directory of mode 0700, as the store requires of its directory, holding the cache file
// path_; removed with everything in it after the test.
class CacheDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::temp_directory_path() / "gmjit-cache-test-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    path_ = dir_ / "gmjit.db";
  }
  void TearDown() override {
    std::error_code ec;
    // Tests may leave directories without write permission; removal needs it back.
    for (auto it = std::filesystem::recursive_directory_iterator(dir_, ec);
         !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
      if (it->is_directory()) ::chmod(it->path().c_str(), 0700);
    }
    ::chmod(dir_.c_str(), 0700);
    std::filesystem::remove_all(dir_, ec);
  }

  std::filesystem::path dir_;
  std::filesystem::path path_;
};

// A trial that passed, with every measured field set.
inline TrialRecord ok_trial(int tile, double median_ms) {
  TrialRecord t;
  t.config_json = R"({"tile":)" + std::to_string(tile) + "}";
  t.status = "ok";
  t.median_ms = median_ms;
  t.spread = 0.01;
  t.repetitions = 50;
  t.verify_error = 1e-3;
  t.compile_ms = 812.5;
  t.registers = 128;
  t.shared_bytes = 49152;
  return t;
}

// A vector_add problem of n elements as a sweep records it: the template's hash and the problem
// key of its fields.
inline ProblemRecord vector_add_problem(std::int64_t n, const std::string& dtype = "fp32") {
  const Shape shape{{"n", n}};
  const std::string hash = templates::template_hash(templates::find_kernel("vector_add").header);
  return {cache::problem_key("vector_add", hash, dtype, cache::kRowMajor, shape), "vector_add", hash, dtype,
          cache::kRowMajor, R"({"n":)" + std::to_string(n) + "}"};
}

// vector_add's configuration with `block` threads (128, 256, 512 or 1024: its domain), 4 items
// of 16 bytes.
inline std::string vector_add_config(std::int64_t block) {
  return R"({"block":)" + std::to_string(block) + R"(,"items":4,"vec_bytes":16})";
}

// ok_trial, with a vector_add configuration.
inline TrialRecord vector_add_trial(std::int64_t block, double median_ms) {
  TrialRecord t = ok_trial(0, median_ms);
  t.config_json = vector_add_config(block);
  return t;
}

}  // namespace gmjit::cache_test
