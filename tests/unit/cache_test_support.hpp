#pragma once
// Helpers the cache tests share: raw SQLite access independent of the Store, file bytes, and
// catching the gmjit::Error an action throws.

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "gmjit/error.hpp"

namespace gmjit::cache_test {

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

}  // namespace gmjit::cache_test
