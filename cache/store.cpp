#include "cache/store.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <pwd.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>
#include <tuple>
#include <utility>

#include "cache/fail.hpp"
#include "cache/launch_index.hpp"
#include "core/check.hpp"
#include "core/log.hpp"
#include "gmjit/error.hpp"

#define GMJIT_SQLITE(expr) \
  GMJIT_CHECK_GEN(::gmjit::ErrorKind::cache, expr, SQLITE_OK, sqlite3_errstr)

namespace gmjit::cache {
namespace fs = std::filesystem;

namespace {

// Entry i takes a database from user_version i to i + 1. Append new entries; never edit one that
// has been released, since existing caches have already run it.
constexpr std::array<const char*, Store::kSchemaVersion> kMigrations = {
    // 1: initial schema.
    R"sql(
CREATE TABLE devices (
  id               INTEGER PRIMARY KEY,
  key              TEXT NOT NULL UNIQUE,
  name             TEXT NOT NULL,
  arch             TEXT NOT NULL,
  fingerprint_json TEXT NOT NULL,
  first_seen       INTEGER NOT NULL,
  last_seen        INTEGER NOT NULL
);
CREATE TABLE kernels (
  id            INTEGER PRIMARY KEY,
  name          TEXT NOT NULL,
  template_hash TEXT NOT NULL,
  UNIQUE (name, template_hash)
);
CREATE TABLE problems (
  id         INTEGER PRIMARY KEY,
  key        TEXT NOT NULL UNIQUE,
  kernel_id  INTEGER NOT NULL REFERENCES kernels (id),
  dtype      TEXT NOT NULL,
  layout     TEXT NOT NULL,
  shape_json TEXT NOT NULL
);
CREATE TABLE trials (
  id              INTEGER PRIMARY KEY,
  device_id       INTEGER NOT NULL REFERENCES devices (id),
  problem_id      INTEGER NOT NULL REFERENCES problems (id),
  config_json     TEXT NOT NULL,
  status          TEXT NOT NULL CHECK (status IN ('ok', 'compile_failed', 'invalid',
                    'launch_failed', 'crashed', 'timeout', 'wrong_result')),
  -- REAL columns are NULL only where the tuner reported NaN (SQLite stores NaN as NULL).
  median_ms       REAL,
  spread          REAL,
  repetitions     INTEGER NOT NULL,
  verify_error    REAL,
  compile_ms      REAL,
  registers       INTEGER NOT NULL,
  spill_bytes     INTEGER NOT NULL,
  shared_bytes    INTEGER NOT NULL,
  detail          TEXT NOT NULL,
  tuned_at        INTEGER NOT NULL,
  library_version TEXT NOT NULL
);
CREATE INDEX trials_by_device_problem ON trials (device_id, problem_id);
CREATE TABLE winners (
  device_id       INTEGER NOT NULL REFERENCES devices (id),
  problem_id      INTEGER NOT NULL REFERENCES problems (id),
  trial_id        INTEGER NOT NULL REFERENCES trials (id),
  trial_count     INTEGER NOT NULL,
  tuned_at        INTEGER NOT NULL,
  library_version TEXT NOT NULL,
  PRIMARY KEY (device_id, problem_id)
) WITHOUT ROWID;
)sql",
    // 2: the binary cache, and trial identity so that importing the same export twice adds
    // nothing. occurrence counts identical trials before this one (same second, same timing), so
    // repeated measurements of one tuning run are kept rather than taken for duplicates. NaN
    // medians are stored as NULL, which a UNIQUE index would treat as all distinct; hence ifnull.
    R"sql(
CREATE TABLE binaries (
  compile_key    TEXT PRIMARY KEY,
  kernel         TEXT NOT NULL,
  arch           TEXT NOT NULL,
  -- The small, changing columns come first: a hit rewrites last_used, and SQLite then dirties
  -- only the first page of the row instead of the cubin's overflow pages.
  bytes          INTEGER NOT NULL,
  checksum       TEXT NOT NULL,
  created_at     INTEGER NOT NULL,
  last_used      INTEGER NOT NULL,
  resources_json TEXT NOT NULL,
  ptx            TEXT NOT NULL,
  cubin          BLOB NOT NULL
);
CREATE INDEX binaries_by_last_used ON binaries (last_used);
ALTER TABLE trials ADD COLUMN occurrence INTEGER NOT NULL DEFAULT 0;
WITH numbered AS (
  SELECT id, row_number() OVER (
           PARTITION BY device_id, problem_id, config_json, status, ifnull(median_ms, 'NaN'),
                        tuned_at, library_version
           ORDER BY id) - 1 AS n
  FROM trials)
UPDATE trials SET occurrence = numbered.n FROM numbered
WHERE numbered.id = trials.id AND numbered.n > 0;
CREATE UNIQUE INDEX trials_identity ON trials (device_id, problem_id, config_json, status,
  ifnull(median_ms, 'NaN'), tuned_at, library_version, occurrence);
)sql",
    // 3: problems a sweep could not tune at all (the worker refused the problem or died setting
    // it up), so no trial exists to say why. A winner recorded later removes the row.
    R"sql(
CREATE TABLE problem_failures (
  device_id       INTEGER NOT NULL REFERENCES devices (id),
  problem_id      INTEGER NOT NULL REFERENCES problems (id),
  reason          TEXT NOT NULL,
  failed_at       INTEGER NOT NULL,
  library_version TEXT NOT NULL,
  PRIMARY KEY (device_id, problem_id)
) WITHOUT ROWID;
)sql",
};

constexpr bool all_migrations_present() {
  for (const char* step : kMigrations) {
    if (step == nullptr) return false;
  }
  return true;
}
static_assert(all_migrations_present(), "kSchemaVersion grew without a migration step");

std::string db_file(sqlite3* db) {
  const char* name = db != nullptr ? sqlite3_db_filename(db, "main") : nullptr;
  return name != nullptr ? name : "";
}

std::int64_t now_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::int64_t now_milliseconds() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int primary_code(int code) { return code & 0xff; }

// Thrown inside Store's constructor only, where it becomes a quarantine.
struct CorruptFile {
  std::string reason;
};

struct FileId {
  dev_t dev = 0;
  ino_t ino = 0;
  bool operator==(const FileId& o) const { return dev == o.dev && ino == o.ino; }
  bool operator!=(const FileId& o) const { return !(*this == o); }
};

std::optional<FileId> file_id(const fs::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return FileId{st.st_dev, st.st_ino};
}

std::string utc_stamp() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y%m%dT%H%M%S", &tm);
  return text;
}

fs::path with_suffix(const fs::path& path, std::string_view suffix) {
  fs::path result = path;
  result += std::string(suffix);
  return result;
}

// Moves a corrupt cache (and its -wal and -shm) aside. Returns nullopt when the path no longer
// names the file found corrupt: another process quarantined it first, and renaming again would
// move that process's fresh cache.
std::optional<fs::path> move_aside(const fs::path& path, const std::optional<FileId>& opened) {
  if (!opened || file_id(path) != opened) return std::nullopt;
  const fs::path base = with_suffix(path, ".corrupt-" + utc_stamp());
  fs::path target = base;
  for (int n = 2; fs::exists(target) || fs::exists(with_suffix(target, "-wal")); ++n) {
    target = with_suffix(base, "-" + std::to_string(n));
  }
  if (::rename(path.c_str(), target.c_str()) != 0) {
    const int err = errno;
    GMJIT_CACHE_FAIL(err, "rename",
                     "cache {} is corrupt and cannot be moved to {}: {}; remove it or set "
                     "GMJIT_CACHE to another path",
                     path.string(), target.string(), std::strerror(err));
  }
  // The -wal holds committed transactions of the corrupt file; it travels with it so that the
  // moved file can still be examined as it was.
  for (const char* suffix : {"-wal", "-shm"}) {
    const fs::path companion = with_suffix(path, suffix);
    if (::rename(companion.c_str(), with_suffix(target, suffix).c_str()) != 0 && errno != ENOENT) {
      const int err = errno;
      GMJIT_CACHE_FAIL(err, "rename", "cannot move {} next to quarantined cache {}: {}",
                       companion.string(), target.string(), std::strerror(err));
    }
  }
  return target;
}

class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

// Resets the statement when the caller is done with it, so that a half-read SELECT does not keep
// a read transaction open (which would hold back WAL checkpoints of every other process).
class Query {
 public:
  explicit Query(Statement& statement) : statement_(statement) {}
  Query(const Query&) = delete;
  Query& operator=(const Query&) = delete;
  ~Query() { statement_.reset(); }
  Statement* operator->() const { return &statement_; }
  Statement& operator*() const { return statement_; }

 private:
  Statement& statement_;
};

// Steps a statement that yields exactly one integer (an id from RETURNING, a PRAGMA value).
std::int64_t single_integer(Query& query) {
  if (!query->step()) {
    GMJIT_CACHE_FAIL(SQLITE_INTERNAL, "sqlite3_step", "statement returned no row");
  }
  const std::int64_t value = query->column_int64(0);
  while (query->step()) {
  }
  return value;
}

enum class NodeKind { directory, file };

// Everyone who can write the cache can choose which kernel configurations this user launches, so
// only the user's own, unshared files are trusted.
void require_private(const fs::path& path, NodeKind kind) {
  const bool is_dir = kind == NodeKind::directory;
  const char* noun = is_dir ? "cache directory" : "cache file";
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    GMJIT_CACHE_FAIL(err, "stat", "cannot inspect {} {}: {}", noun, path.string(),
                     std::strerror(err));
  }
  if (is_dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode)) {
    GMJIT_CACHE_FAIL(0, "stat", "{} {} is not a {}; set GMJIT_CACHE to another path", noun,
                     path.string(), is_dir ? "directory" : "regular file");
  }
  const uid_t me = ::geteuid();
  if (st.st_uid != me) {
    GMJIT_CACHE_FAIL(
        0, "stat",
        "{} {} is owned by uid {}, not by you (uid {}); fix with: sudo chown {} {} (or set "
        "GMJIT_CACHE to a path of your own)",
        noun, path.string(), st.st_uid, me, me, path.string());
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    const unsigned mode = st.st_mode & 07777;
    if (is_dir && (st.st_mode & S_ISVTX) != 0) {
      // Shared directories such as /tmp: chmod is the wrong advice, and others could plant the
      // -wal and -shm files next to the cache.
      GMJIT_CACHE_FAIL(0, "stat",
                       "cache directory {} is shared (mode {:04o}); set GMJIT_CACHE to a file in "
                       "a directory of your own",
                       path.string(), mode);
    }
    GMJIT_CACHE_FAIL(0, "stat",
                     "{} {} is writable by group or others (mode {:04o}); fix with: chmod {} {}",
                     noun, path.string(), mode, is_dir ? "700" : "600", path.string());
  }
}

// Creates every missing component with mode 0700; components that exist are left as they are.
void create_directories_private(const fs::path& dir, const fs::path& file) {
  fs::path prefix;
  for (const fs::path& part : dir) {
    prefix /= part;
    struct stat st {};
    if (::stat(prefix.c_str(), &st) == 0) continue;
    int err = errno;
    if (err == ENOENT) {
      if (::mkdir(prefix.c_str(), 0700) == 0) {
        // umask may have removed owner bits; the owner needs all three.
        ::chmod(prefix.c_str(), 0700);
        continue;
      }
      err = errno;
      if (err == EEXIST) continue;  // another process created it meanwhile
    }
    GMJIT_CACHE_FAIL(err, "mkdir",
                     "cannot create directory {} for cache {}: {}; set GMJIT_CACHE to a "
                     "writable location",
                     prefix.string(), file.string(), std::strerror(err));
  }
}

// Creates the file ourselves because SQLite would create it with 0644 & ~umask.
void create_file_private(const fs::path& path) {
  FileDescriptor fd(::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (fd.get() < 0) {
    const int err = errno;
    if (err == EEXIST) return;
    GMJIT_CACHE_FAIL(err, "open",
                     "cannot create cache file {}: {}; set GMJIT_CACHE to a writable location",
                     path.string(), std::strerror(err));
  }
  if (::fchmod(fd.get(), 0600) != 0) {
    const int err = errno;
    GMJIT_CACHE_FAIL(err, "fchmod", "cannot set mode 0600 on cache file {}: {}", path.string(),
                     std::strerror(err));
  }
  // A launch index left by a cache that was here before describes that cache; the new file may
  // even have its inode, by which the index tells caches apart.
  const fs::path stale_index = launch_index_path(path);
  if (::unlink(stale_index.c_str()) == 0) {
    detail::logger().info("removed {}, the launch index of an earlier cache at this path", stale_index.string());
  }
  detail::logger().info("created tuning cache {}", path.string());
}

Connection open_private(const fs::path& path, int busy_timeout_ms) {
  if (path.empty()) GMJIT_USAGE_FAIL("cache path is empty");
  const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
  // A cache that exists (every start after the first) has its directories: a stat per path
  // component and a failing O_EXCL create are saved. The checks below run either way.
  struct stat st {};
  const bool exists = ::stat(path.c_str(), &st) == 0;
  if (!exists) create_directories_private(dir, path);
  require_private(dir, NodeKind::directory);
  if (!exists) create_file_private(path);
  require_private(path, NodeKind::file);
  for (const char* suffix : {"-wal", "-shm"}) {
    fs::path companion = path;
    companion += suffix;
    struct stat st {};
    if (::lstat(companion.c_str(), &st) == 0) require_private(companion, NodeKind::file);
  }
  if (::access(path.c_str(), R_OK | W_OK) != 0) {
    const int err = errno;
    GMJIT_CACHE_FAIL(
        err, "access",
        "cache file {} is not readable and writable by you: {}; fix with: chmod 600 {}",
        path.string(), std::strerror(err), path.string());
  }
  return Connection(path, Connection::Access::read_write, busy_timeout_ms);
}


void require_json(const std::string& text, std::string_view what) {
  if (!nlohmann::json::accept(text)) {
    GMJIT_USAGE_FAIL("{} is not valid JSON: '{}'", what, text);
  }
}

// Shapes compare as JSON values so that [256, ...] sorts before [1024, ...]; text that does not
// parse sorts after, by its characters.
struct WinnerOrder {
  nlohmann::json shape;
  bool parsed;
};

bool winner_less(const std::pair<WinnerOrder, WinnerRecord>& a,
                 const std::pair<WinnerOrder, WinnerRecord>& b) {
  const WinnerRecord& x = a.second;
  const WinnerRecord& y = b.second;
  if (x.kernel != y.kernel) return x.kernel < y.kernel;
  if (x.dtype != y.dtype) return x.dtype < y.dtype;
  if (a.first.parsed != b.first.parsed) return a.first.parsed;
  if (a.first.parsed) {
    if (a.first.shape < b.first.shape) return true;
    if (b.first.shape < a.first.shape) return false;
  }
  return std::tie(x.shape_json, x.device_name, x.device_key, x.problem_key) <
         std::tie(y.shape_json, y.device_name, y.device_key, y.problem_key);
}

// The fields of each record in the order this file's statements list their columns, so that a
// record is bound and read through one list rather than a line per column at every statement.
constexpr auto kDeviceFields = std::make_tuple(&DeviceRecord::key, &DeviceRecord::name,
                                               &DeviceRecord::arch, &DeviceRecord::fingerprint_json);
constexpr auto kProblemFields =
    std::make_tuple(&ProblemRecord::key, &ProblemRecord::kernel, &ProblemRecord::template_hash,
                    &ProblemRecord::dtype, &ProblemRecord::layout, &ProblemRecord::shape_json);
#define GMJIT_TRIAL_COLUMNS                                                                   \
  "config_json, status, median_ms, spread, repetitions, verify_error, compile_ms, registers, " \
  "spill_bytes, shared_bytes, detail"
constexpr auto kTrialFields = std::make_tuple(
    &TrialRecord::config_json, &TrialRecord::status, &TrialRecord::median_ms, &TrialRecord::spread,
    &TrialRecord::repetitions, &TrialRecord::verify_error, &TrialRecord::compile_ms,
    &TrialRecord::registers, &TrialRecord::spill_bytes, &TrialRecord::shared_bytes,
    &TrialRecord::detail);
constexpr auto kWinnerFields = std::make_tuple(
    &WinnerRecord::device_key, &WinnerRecord::device_name, &WinnerRecord::problem_key,
    &WinnerRecord::kernel, &WinnerRecord::dtype, &WinnerRecord::shape_json,
    &WinnerRecord::config_json, &WinnerRecord::median_ms, &WinnerRecord::trial_count,
    &WinnerRecord::tuned_at, &WinnerRecord::library_version, &WinnerRecord::device_arch);
// What a binary's checksum covers, and what identifies it; the checksum and the times follow.
#define GMJIT_BINARY_COLUMNS "compile_key, kernel, arch, cubin, ptx, resources_json"
constexpr auto kBinaryFields =
    std::make_tuple(&BinaryRecord::compile_key, &BinaryRecord::kernel, &BinaryRecord::arch,
                    &BinaryRecord::cubin, &BinaryRecord::ptx, &BinaryRecord::resources_json);

void read_column(const Statement& s, int index, std::string& value) { value = s.column_text(index); }
void read_column(const Statement& s, int index, double& value) { value = s.column_double(index); }
void read_column(const Statement& s, int index, int& value) { value = s.column_int(index); }
void read_column(const Statement& s, int index, std::int64_t& value) {
  value = s.column_int64(index);
}
void read_column(const Statement& s, int index, std::vector<char>& value) {
  value = s.column_blob(index);
}

void bind_column(Statement& s, int index, const std::vector<char>& value) {
  s.bind_blob(index, value);
}
template <class T>
void bind_column(Statement& s, int index, const T& value) {
  s.bind(index, value);
}

// Reads columns first, first + 1, ... into the listed fields of `record`.
template <class Record, class... Types>
void read_fields(const Statement& s, int first, Record& record,
                 const std::tuple<Types Record::*...>& fields) {
  std::apply([&](auto... field) { (read_column(s, first++, record.*field), ...); }, fields);
}

// Binds the listed fields of `record` to parameters first, first + 1, ...
template <class Record, class... Types>
void bind_fields(Statement& s, int first, const Record& record,
                 const std::tuple<Types Record::*...>& fields) {
  std::apply([&](auto... field) { (bind_column(s, first++, record.*field), ...); }, fields);
}

#define GMJIT_WINNER_SELECT                                                                  \
  "SELECT d.key, d.name, p.key, k.name, p.dtype, p.shape_json, t.config_json, t.median_ms, " \
  "w.trial_count, w.tuned_at, w.library_version, d.arch "                                    \
  "FROM winners w "                                                                          \
  "JOIN devices d ON d.id = w.device_id "                                                    \
  "JOIN problems p ON p.id = w.problem_id "                                                  \
  "JOIN kernels k ON k.id = p.kernel_id "                                                    \
  "JOIN trials t ON t.id = w.trial_id "

constexpr const char* kFindWinnerSql = GMJIT_WINNER_SELECT "WHERE d.key = ?1 AND p.key = ?2";
constexpr const char* kWinnersSql = GMJIT_WINNER_SELECT "WHERE ?1 = '' OR k.name = ?1";
constexpr const char* kNearestSql =
    GMJIT_WINNER_SELECT "WHERE d.key = ?1 AND k.name = ?2 AND p.dtype = ?3";
#undef GMJIT_WINNER_SELECT

WinnerRecord read_winner(const Query& q) {
  WinnerRecord w;
  read_fields(*q, 0, w, kWinnerFields);
  return w;
}

// BEGIN IMMEDIATE takes the write lock up front: a deferred transaction that upgrades later can
// fail with SQLITE_BUSY without the busy timeout ever applying. A read is a deferred BEGIN that is
// never committed: it only holds one snapshot for all its statements.
class Transaction {
 public:
  enum class Kind { write, read };

  explicit Transaction(Connection& connection, Kind kind = Kind::write) : connection_(connection) {
    connection_.exec(kind == Kind::write ? "BEGIN IMMEDIATE" : "BEGIN");
  }
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  ~Transaction() {
    sqlite3* db = connection_.handle();
    // Some errors (SQLITE_FULL, SQLITE_IOERR, ...) already rolled back; then nothing is open.
    if (committed_ || db == nullptr || sqlite3_get_autocommit(db) != 0) return;
    const int rc = sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
    if (rc != SQLITE_OK) {
      detail::logger().warn("tuning cache {}: rollback failed: {}", db_file(db),
                            sqlite3_errmsg(db));
    }
  }

  // Throws gmjit::Error (cache); the destructor then rolls back.
  void commit() {
    connection_.exec("COMMIT");
    committed_ = true;
  }

 private:
  Connection& connection_;
  bool committed_ = false;
};

[[noreturn]] void fail_newer_schema(const fs::path& path, std::int64_t version) {
  GMJIT_CACHE_FAIL(0, "PRAGMA user_version",
                   "cache {} has schema version {}, newer than this library's {}; it was written "
                   "by a newer libgmjit and is left untouched (upgrade libgmjit or set "
                   "GMJIT_CACHE to another path)",
                   path.string(), version, Store::kSchemaVersion);
}

bool faster(double candidate, double current) {
  if (std::isnan(candidate)) return false;
  return std::isnan(current) || candidate < current;
}

}  // namespace

fs::path default_path() {
  if (const char* explicit_path = std::getenv("GMJIT_CACHE"); explicit_path && *explicit_path) {
    return fs::path(explicit_path);
  }
  // The XDG Base Directory spec says a relative XDG_CACHE_HOME is invalid and must be ignored.
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg && fs::path(xdg).is_absolute()) {
    return fs::path(xdg) / "gmjit" / "gmjit.db";
  }
  if (const char* home = std::getenv("HOME"); home && *home) {
    return fs::path(home) / ".cache" / "gmjit" / "gmjit.db";
  }
  // Services often run without HOME; the password database still knows the home directory.
  long size = ::sysconf(_SC_GETPW_R_SIZE_MAX);
  std::string buffer(size > 0 ? static_cast<std::size_t>(size) : 16384, '\0');
  struct passwd entry {};
  struct passwd* found = nullptr;
  if (::getpwuid_r(::geteuid(), &entry, buffer.data(), buffer.size(), &found) == 0 && found &&
      found->pw_dir && *found->pw_dir) {
    return fs::path(found->pw_dir) / ".cache" / "gmjit" / "gmjit.db";
  }
  GMJIT_CACHE_FAIL(0, "default_path",
                   "cannot locate the tuning cache: none of GMJIT_CACHE, XDG_CACHE_HOME, HOME is "
                   "set; set GMJIT_CACHE");
}

// ---------------------------------------------------------------------------------------------
// Connection

Connection::Connection(const fs::path& path, Access access, int busy_timeout_ms) {
  sqlite3* db = nullptr;
  const bool read_only = access != Access::read_write;
  std::string name = path.string();
  int flags = read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE;
  if (access == Access::immutable) {
    // A URI names the file: '%', '?' and '#' in the path are escaped so that they stay part of it.
    std::string uri = "file:";
    for (const char c : name) {
      if (c == '%' || c == '?' || c == '#') {
        uri += fmt::format("%{:02X}", static_cast<unsigned char>(c));
      } else {
        uri += c;
      }
    }
    name = uri + "?immutable=1";
    flags |= SQLITE_OPEN_URI;
  }
  const int rc = sqlite3_open_v2(name.c_str(), &db, flags, nullptr);
  db_ = db;  // owned from here on, even when the open failed
  if (rc != SQLITE_OK) {
    const std::string why = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    GMJIT_CACHE_FAIL(rc, "sqlite3_open_v2", "cannot open cache {}: {}", path.string(), why);
  }
  GMJIT_SQLITE(sqlite3_extended_result_codes(db_, 1));
  // SQLite silently falls back to read-only when it cannot write; every later write would then
  // fail with a less helpful message.
  if (!read_only && sqlite3_db_readonly(db_, "main") == 1) {
    GMJIT_CACHE_FAIL(SQLITE_READONLY, "sqlite3_open_v2",
                     "cache {} can only be opened read-only; fix with: chmod 600 {}", path.string(),
                     path.string());
  }
  GMJIT_SQLITE(sqlite3_busy_timeout(db_, busy_timeout_ms));
}

Connection::Connection(Connection&& other) noexcept : db_(std::exchange(other.db_, nullptr)) {}

Connection& Connection::operator=(Connection&& other) noexcept {
  std::swap(db_, other.db_);
  return *this;
}

Connection::~Connection() {
  // close_v2 defers the close until the last statement is finalized, so destruction order
  // between a connection and its statements cannot leak the handle.
  if (db_ != nullptr) sqlite3_close_v2(db_);
}

void Connection::exec(const char* sql) {
  char* raw_error = nullptr;
  const int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &raw_error);
  const std::unique_ptr<char, decltype(&sqlite3_free)> error(raw_error, &sqlite3_free);
  if (rc != SQLITE_OK) {
    throw Error(ErrorKind::cache, rc,
                fmt::format("{} ({})", error ? error.get() : sqlite3_errstr(rc), db_file(db_)), sql,
                __FILE__, __LINE__);
  }
}

// ---------------------------------------------------------------------------------------------
// Statement

Statement::Statement(sqlite3* db, std::string_view sql) : db_(db) {
  const int rc = sqlite3_prepare_v3(db, sql.data(), static_cast<int>(sql.size()),
                                    SQLITE_PREPARE_PERSISTENT, &stmt_, nullptr);
  if (rc != SQLITE_OK) {
    throw Error(ErrorKind::cache, rc, fmt::format("{} ({})", sqlite3_errmsg(db), db_file(db)),
                std::string(sql), __FILE__, __LINE__);
  }
}

Statement::Statement(Statement&& other) noexcept
    : db_(std::exchange(other.db_, nullptr)), stmt_(std::exchange(other.stmt_, nullptr)) {}

Statement& Statement::operator=(Statement&& other) noexcept {
  std::swap(db_, other.db_);
  std::swap(stmt_, other.stmt_);
  return *this;
}

Statement::~Statement() {
  if (stmt_ != nullptr) sqlite3_finalize(stmt_);
}

void Statement::bind(int index, std::string_view value) {
  GMJIT_SQLITE(
      sqlite3_bind_text64(stmt_, index, value.data(), value.size(), SQLITE_TRANSIENT, SQLITE_UTF8));
}

void Statement::bind(int index, double value) {
  GMJIT_SQLITE(sqlite3_bind_double(stmt_, index, value));
}

void Statement::bind(int index, std::int64_t value) {
  GMJIT_SQLITE(sqlite3_bind_int64(stmt_, index, static_cast<sqlite3_int64>(value)));
}

void Statement::bind(int index, int value) { GMJIT_SQLITE(sqlite3_bind_int(stmt_, index, value)); }

void Statement::bind_blob(int index, const std::vector<char>& value) {
  // A null pointer would bind NULL; an empty cubin is an empty blob, not a missing one.
  static const char kEmpty = 0;
  GMJIT_SQLITE(sqlite3_bind_blob64(stmt_, index, value.empty() ? &kEmpty : value.data(),
                                   value.size(), SQLITE_TRANSIENT));
}

bool Statement::step() {
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  throw Error(ErrorKind::cache, rc, fmt::format("{} ({})", sqlite3_errmsg(db_), db_file(db_)),
              sqlite3_sql(stmt_), __FILE__, __LINE__);
}

std::string Statement::column_text(int index) const {
  const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, index));
  if (text == nullptr) return {};
  return std::string(text, static_cast<std::size_t>(sqlite3_column_bytes(stmt_, index)));
}

double Statement::column_double(int index) const {
  if (sqlite3_column_type(stmt_, index) == SQLITE_NULL) {
    return std::numeric_limits<double>::quiet_NaN();
  }
  return sqlite3_column_double(stmt_, index);
}

std::int64_t Statement::column_int64(int index) const { return sqlite3_column_int64(stmt_, index); }

int Statement::column_int(int index) const { return sqlite3_column_int(stmt_, index); }

std::vector<char> Statement::column_blob(int index) const {
  const auto* data = static_cast<const char*>(sqlite3_column_blob(stmt_, index));
  if (data == nullptr) return {};
  return std::vector<char>(data, data + sqlite3_column_bytes(stmt_, index));
}

bool Statement::column_is_null(int index) const {
  return sqlite3_column_type(stmt_, index) == SQLITE_NULL;
}

void Statement::reset() noexcept {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

// ---------------------------------------------------------------------------------------------
// Store

Store::Store(const fs::path& path, const StoreOptions& options)
    : path_(path), options_(options), connection_(open_private(path_, options_.busy_timeout_ms)) {
  const std::optional<FileId> opened = file_id(path_);
  try {
    open_checked();
    return;
  } catch (const CorruptFile& corrupt) {
    statements_.clear();
    // The last connection to close checkpoints the -wal into the database and deletes it; the
    // corrupt file and its -wal must reach quarantine as they were found.
    sqlite3_db_config(connection_.handle(), SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, nullptr);
    { Connection closed = std::move(connection_); }
    quarantined_ = move_aside(path_, opened);
    if (quarantined_) {
      detail::logger().warn(
          "tuning cache {} is corrupt ({}); moved it to {} and started a fresh cache at {}",
          path_.string(), corrupt.reason, quarantined_->string(), path_.string());
    }
  }
  connection_ = open_private(path_, options_.busy_timeout_ms);
  try {
    open_checked();
  } catch (const CorruptFile& corrupt) {
    GMJIT_CACHE_FAIL(SQLITE_CORRUPT, "open",
                     "cache {} is corrupt again after quarantine ({}); set GMJIT_CACHE to another "
                     "path",
                     path_.string(), corrupt.reason);
  }
}

void Store::open_checked() {
  try {
    connection_.exec("PRAGMA foreign_keys = ON");
    // Before anything writes: switching to WAL rewrites the header, and a newer cache must stay
    // byte-identical.
    const int version = check_compatible();
    check_quick();
    {
      const std::string mode = enable_wal();
      if (mode != "wal") {
        // Network file systems lack the shared memory WAL needs; the rollback journal still works.
        detail::logger().warn(
            "tuning cache {}: WAL unavailable (journal mode '{}'); concurrent "
            "readers will block while a tuner writes",
            path_.string(), mode);
      }
    }
    // In WAL mode NORMAL loses at most the last transactions on power loss, never consistency; a
    // cache can afford that.
    connection_.exec("PRAGMA synchronous = NORMAL");
    // Only an old schema takes the write lock, so opening a current cache never waits for a tuner.
    if (version < kSchemaVersion) migrate();
  } catch (const Error& e) {
    const int code = primary_code(e.code());
    if (e.kind() == ErrorKind::cache && (code == SQLITE_CORRUPT || code == SQLITE_NOTADB)) {
      throw CorruptFile{e.message()};
    }
    throw;
  }
}

namespace {

// What a clean quick_check vouches for: the database file and its -wal exactly as they were
// (device, inode, size, modification time; not the change time, which opening a store updates
// when it enforces the file mode). An empty -wal holds nothing, and readers
// recreate it with a new inode on every open, so it counts only by being empty.
std::string content_identity(const fs::path& path) {
  std::string identity;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};
  identity = fmt::format("db {} {} {} {}.{}", st.st_dev, st.st_ino, st.st_size, st.st_mtim.tv_sec,
                         st.st_mtim.tv_nsec);
  const std::string wal = path.string() + "-wal";
  if (::stat(wal.c_str(), &st) == 0 && st.st_size > 0) {
    identity += fmt::format("; wal {} {} {} {}.{}", st.st_dev, st.st_ino, st.st_size, st.st_mtim.tv_sec,
                            st.st_mtim.tv_nsec);
  }
  return identity;
}

fs::path checked_marker(const fs::path& path) { return path.string() + ".checked"; }

std::string read_marker(const fs::path& marker) {
  std::string text(512, '\0');
  const int fd = ::open(marker.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return {};
  const ssize_t n = ::read(fd, text.data(), text.size());
  ::close(fd);
  text.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
  return text;
}

// Best effort: without the marker the next open simply checks again.
void write_marker(const fs::path& marker, const std::string& identity) {
  const std::string temporary = marker.string() + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return;
  const bool written = ::write(fd, identity.data(), identity.size()) == static_cast<ssize_t>(identity.size());
  ::close(fd);
  if (!written || ::rename(temporary.c_str(), marker.c_str()) != 0) ::unlink(temporary.c_str());
}

}  // namespace

// PRAGMA quick_check reads the whole file, which at every process start would cost more than
// the rest of the warm path together (1.3 of 1.4 ms for a 480 KiB cache on the build machine).
// A file unchanged since its last clean check is not checked again; any write, truncation or
// replacement changes its identity and brings the check back.
void Store::check_quick() {
  const fs::path marker = checked_marker(path_);
  const std::string identity = content_identity(path_);
  if (!identity.empty() && read_marker(marker) == identity) return;
  std::string reason;
  int rows = 0;
  {
    Query q(statement("PRAGMA quick_check"));
    while (q->step()) {
      const std::string line = q->column_text(0);
      if (line == "ok") continue;
      // A badly damaged file yields one line per bad page; a few say enough in one warning.
      if (++rows <= 3) reason += (reason.empty() ? "" : "; ") + line;
    }
  }
  if (rows > 0) {
    if (rows > 3) reason += fmt::format("; and {} more", rows - 3);
    ::unlink(marker.c_str());
    throw CorruptFile{"quick_check: " + reason};
  }
  if (!identity.empty()) write_marker(marker, identity);
}

const std::optional<fs::path>& Store::quarantined() const { return quarantined_; }

std::vector<fs::path> Store::quarantined_copies(const fs::path& path) {
  const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
  const std::string prefix = path.filename().string() + ".corrupt-";
  std::vector<fs::path> copies;
  std::error_code error;
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const auto ends_with = [&](std::string_view suffix) {
      return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    if (ends_with("-wal") || ends_with("-shm")) continue;
    copies.push_back(it->path());
  }
  // The UTC stamp in the name sorts by time; a second copy of the same second ends in -2, -3, ...
  std::sort(copies.begin(), copies.end());
  return copies;
}

Store::Store(Store&&) noexcept = default;
Store& Store::operator=(Store&&) noexcept = default;
Store::~Store() = default;

const fs::path& Store::path() const { return path_; }

std::string Store::enable_wal() {
  {
    Query q(statement("PRAGMA journal_mode"));
    if (q->step() && q->column_text(0) == "wal") return "wal";
  }
  // Switching needs an exclusive lock, and SQLite returns SQLITE_BUSY at once instead of calling
  // the busy handler when that could deadlock, e.g. while another process opens the same new
  // cache. So wait here, as long as the busy timeout would have.
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.busy_timeout_ms);
  for (;;) {
    try {
      Query q(statement("PRAGMA journal_mode = WAL"));
      return q->step() ? q->column_text(0) : std::string();
    } catch (const Error& e) {
      if ((e.code() & 0xff) != SQLITE_BUSY || std::chrono::steady_clock::now() > deadline) throw;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

Statement& Store::statement(const char* sql) {
  auto it = statements_.find(sql);
  if (it == statements_.end()) {
    it = statements_.emplace(sql, Statement(connection_.handle(), sql)).first;
  }
  return it->second;
}

// One statement, so one snapshot: read separately, a concurrent first open could commit its
// migration in between and make a fresh gmjit cache look like a foreign database.
Store::Header Store::read_header() {
  Query q(
      statement("SELECT (SELECT application_id FROM pragma_application_id), "
                "(SELECT user_version FROM pragma_user_version), "
                "(SELECT count(*) FROM sqlite_master)"));
  Header header;
  if (q->step()) {
    header.application_id = q->column_int64(0);
    header.version = q->column_int64(1);
    header.objects = q->column_int64(2);
  }
  return header;
}

int Store::check_compatible() {
  Header header;
  try {
    header = read_header();
  } catch (const Error& e) {
    // The first read is where SQLite notices a file that is not a database at all.
    const int code = primary_code(e.code());
    if (code == SQLITE_NOTADB || code == SQLITE_CORRUPT) {
      throw CorruptFile{sqlite3_errstr(e.code())};
    }
    GMJIT_CACHE_FAIL(e.code(), e.call(),
                     "cannot read cache {}: {}; set GMJIT_CACHE to another path (or remove the "
                     "file to start an empty cache)",
                     path_.string(), sqlite3_errstr(e.code()));
  }
  if (header.application_id != kApplicationId &&
      (header.application_id != 0 || header.objects != 0)) {
    GMJIT_CACHE_FAIL(0, "PRAGMA application_id",
                     "{} is a SQLite database but not a gmjit cache (application_id {}); set "
                     "GMJIT_CACHE to another path",
                     path_.string(), header.application_id);
  }
  if (header.version > kSchemaVersion) fail_newer_schema(path_, header.version);
  return static_cast<int>(header.version);
}

Store::Store(fs::path path, Connection connection, int schema_version)
    : path_(std::move(path)), schema_version_(schema_version), connection_(std::move(connection)) {}

Store Store::open_read_only(const fs::path& path, std::string_view role) {
  std::error_code error;
  const bool in_use = fs::exists(with_suffix(path, "-wal"), error) || error;
  Store store(path, Connection(path, in_use ? Connection::Access::read_only : Connection::Access::immutable), 0);
  Header header;
  try {
    header = store.read_header();
  } catch (const Error& e) {
    GMJIT_CACHE_FAIL(e.code(), e.call(), "cannot read {} {}: {}", role, path.string(),
                     sqlite3_errstr(e.code()));
  }
  if (header.application_id != kApplicationId || header.version < 1) {
    GMJIT_CACHE_FAIL(0, "PRAGMA application_id", "{} {} is not a gmjit cache (application_id {})",
                     role, path.string(), header.application_id);
  }
  if (header.version > kSchemaVersion) {
    GMJIT_CACHE_FAIL(0, "PRAGMA user_version",
                     "{} {} has schema version {}, newer than this library's {}", role,
                     path.string(), header.version, kSchemaVersion);
  }
  store.schema_version_ = static_cast<int>(header.version);
  return store;
}

void Store::migrate() {
  Transaction tx(connection_);
  // Read again under the write lock: another process may have migrated since the first look.
  std::int64_t version = 0;
  {
    Query q(statement("PRAGMA user_version"));
    version = single_integer(q);
  }
  if (version == kSchemaVersion) return;  // nothing written; the destructor ends the transaction
  if (version > kSchemaVersion) fail_newer_schema(path_, version);
  for (auto v = static_cast<std::size_t>(version); v < kMigrations.size(); ++v) {
    connection_.exec(kMigrations[v]);
  }
  connection_.exec(fmt::format("PRAGMA user_version = {}", kSchemaVersion).c_str());
  connection_.exec(fmt::format("PRAGMA application_id = {}", kApplicationId).c_str());
  tx.commit();
  detail::logger().debug("tuning cache {}: schema {} -> {}", path_.string(), version,
                         kSchemaVersion);
}

void Store::record_tuning(const DeviceRecord& device, const ProblemRecord& problem,
                          const std::vector<TrialRecord>& trials, std::optional<std::size_t> winner,
                          const std::string& library_version, std::optional<std::size_t> run_trials) {
  if (device.key.empty()) GMJIT_USAGE_FAIL("device key is empty");
  if (problem.key.empty()) GMJIT_USAGE_FAIL("problem key is empty");
  if (winner) {
    if (*winner >= trials.size()) {
      GMJIT_USAGE_FAIL("winner index {} is out of range ({} trials)", *winner, trials.size());
    }
    if (trials[*winner].status != "ok") {
      GMJIT_USAGE_FAIL("winner trial {} has status '{}'; only an 'ok' trial can win", *winner,
                       trials[*winner].status);
    }
  }
  require_json(device.fingerprint_json, "device fingerprint_json");
  require_json(problem.shape_json, "problem shape_json");
  for (std::size_t i = 0; i < trials.size(); ++i) {
    require_json(trials[i].config_json, fmt::format("config_json of trial {}", i));
  }

  const std::int64_t now = now_seconds();
  Transaction tx(connection_);
  const std::int64_t device_id = add_device(device, now, now, OnConflict::replace);
  const std::int64_t problem_id =
      add_problem(problem, add_kernel(problem.kernel, problem.template_hash), OnConflict::replace);
  std::int64_t winner_trial_id = 0;
  for (std::size_t i = 0; i < trials.size(); ++i) {
    try {
      const std::optional<std::int64_t> id =
          add_trial(device_id, problem_id, trials[i], now, library_version, std::nullopt);
      if (winner && *winner == i) winner_trial_id = id.value_or(0);
    } catch (const Error& e) {
      throw Error(
          e.kind(), e.code(),
          fmt::format("trial {} (status '{}') rejected: {}", i, trials[i].status, e.message()),
          e.call(), e.file(), e.line());
    }
  }
  if (winner) {
    put_winner(device_id, problem_id, winner_trial_id,
               static_cast<std::int64_t>(run_trials.value_or(trials.size())), now, library_version);
  }
  tx.commit();
}

// ---------------------------------------------------------------------------------------------
// Rows, as a tuning run and an import write them

namespace {

#define GMJIT_DEVICE_UPSERT                                                                \
  "INSERT INTO devices (key, name, arch, fingerprint_json, first_seen, last_seen) "        \
  "VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (key) DO UPDATE SET "
// A tuning run has just read the device, so its description replaces the stored one; an import
// only widens when the device was seen, and the description it brings is no newer.
constexpr const char* kDeviceReplaceSql = GMJIT_DEVICE_UPSERT
    "name = excluded.name, arch = excluded.arch, fingerprint_json = excluded.fingerprint_json, "
    "last_seen = excluded.last_seen RETURNING id";
constexpr const char* kDeviceKeepSql = GMJIT_DEVICE_UPSERT
    "first_seen = min(first_seen, excluded.first_seen), "
    "last_seen = max(last_seen, excluded.last_seen) RETURNING id";
#undef GMJIT_DEVICE_UPSERT

// DO UPDATE rather than DO NOTHING where the id is wanted: only then does RETURNING yield the
// existing row's. A problem key hashes kernel, template, dtype, layout and shape, so an existing
// row already says what an import brings.
#define GMJIT_PROBLEM_UPSERT                                              \
  "INSERT INTO problems (key, kernel_id, dtype, layout, shape_json) "     \
  "VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (key) DO UPDATE SET "
constexpr const char* kProblemReplaceSql = GMJIT_PROBLEM_UPSERT
    "kernel_id = excluded.kernel_id, dtype = excluded.dtype, layout = excluded.layout, "
    "shape_json = excluded.shape_json RETURNING id";
constexpr const char* kProblemKeepSql = GMJIT_PROBLEM_UPSERT "key = excluded.key RETURNING id";
#undef GMJIT_PROBLEM_UPSERT

#define GMJIT_BINARY_INSERT                                                                   \
  "INSERT INTO binaries (" GMJIT_BINARY_COLUMNS ", checksum, last_used, created_at, bytes) " \
  "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) "
constexpr const char* kBinaryReplaceSql = GMJIT_BINARY_INSERT
    "ON CONFLICT (compile_key) DO UPDATE SET kernel = excluded.kernel, arch = excluded.arch, "
    "bytes = excluded.bytes, checksum = excluded.checksum, created_at = excluded.created_at, "
    "last_used = excluded.last_used, resources_json = excluded.resources_json, "
    "ptx = excluded.ptx, cubin = excluded.cubin RETURNING rowid";
constexpr const char* kBinaryKeepSql = GMJIT_BINARY_INSERT "ON CONFLICT DO NOTHING RETURNING rowid";
#undef GMJIT_BINARY_INSERT

#define GMJIT_TRIAL_JOINS                                    \
  "FROM trials t JOIN devices d ON d.id = t.device_id "      \
  "JOIN problems p ON p.id = t.problem_id "
#define GMJIT_TRIAL_ROWS(occurrence)                                                      \
  "SELECT t.id, d.key, p.key, t.tuned_at, t.library_version, " occurrence ", "            \
  GMJIT_TRIAL_COLUMNS " " GMJIT_TRIAL_JOINS "ORDER BY t.id"
constexpr const char* kTrialRowsSql = GMJIT_TRIAL_ROWS("t.occurrence");
// Schema 1 has no occurrence column; numbering identical trials the way migration 2 does gives
// them the identity they would have after an upgrade.
constexpr const char* kTrialRowsV1Sql = GMJIT_TRIAL_ROWS(
    "row_number() OVER (PARTITION BY t.device_id, t.problem_id, t.config_json, t.status, "
    "ifnull(t.median_ms, 'NaN'), t.tuned_at, t.library_version ORDER BY t.id) - 1");
#undef GMJIT_TRIAL_ROWS

#define GMJIT_BINARY_SELECT "SELECT " GMJIT_BINARY_COLUMNS ", checksum, last_used"

BinaryRecord read_binary(const Query& q) {
  BinaryRecord b;
  read_fields(*q, 0, b, kBinaryFields);
  b.checksum = q->column_text(6);
  b.last_used = q->column_int64(7);
  return b;
}

template <class Ids>
std::int64_t id_of(const Ids& ids, const std::string& key, const char* what) {
  const auto it = ids.find(key);
  if (it == ids.end()) GMJIT_USAGE_FAIL("{} '{}' is not among the rows applied", what, key);
  return it->second;
}

}  // namespace

std::int64_t Store::add_device(const DeviceRecord& device, std::int64_t first_seen,
                               std::int64_t last_seen, OnConflict on_conflict) {
  Query q(statement(on_conflict == OnConflict::replace ? kDeviceReplaceSql : kDeviceKeepSql));
  bind_fields(*q, 1, device, kDeviceFields);
  q->bind(5, first_seen);
  q->bind(6, last_seen);
  return single_integer(q);
}

std::int64_t Store::add_kernel(const std::string& name, const std::string& template_hash) {
  Query q(statement(
      "INSERT INTO kernels (name, template_hash) VALUES (?1, ?2) "
      "ON CONFLICT (name, template_hash) DO UPDATE SET name = excluded.name RETURNING id"));
  q->bind(1, name);
  q->bind(2, template_hash);
  return single_integer(q);
}

std::int64_t Store::add_problem(const ProblemRecord& problem, std::int64_t kernel_id,
                                OnConflict on_conflict) {
  Query q(statement(on_conflict == OnConflict::replace ? kProblemReplaceSql : kProblemKeepSql));
  q->bind(1, problem.key);
  q->bind(2, kernel_id);
  q->bind(3, problem.dtype);
  q->bind(4, problem.layout);
  q->bind(5, problem.shape_json);
  return single_integer(q);
}

std::optional<std::int64_t> Store::add_trial(std::int64_t device_id, std::int64_t problem_id,
                                             const TrialRecord& trial, std::int64_t tuned_at,
                                             const std::string& library_version,
                                             std::optional<std::int64_t> occurrence) {
  // A tuning run leaves ?16 NULL: it numbers identical trials itself, so its insert never
  // conflicts. An import brings each trial's occurrence, and a trial already present is skipped.
  Query q(statement(
      "INSERT INTO trials (device_id, problem_id, " GMJIT_TRIAL_COLUMNS
      ", tuned_at, library_version, occurrence) "
      "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, coalesce(?16, "
      "(SELECT count(*) FROM trials WHERE device_id = ?1 AND problem_id = ?2 AND "
      "config_json = ?3 AND status = ?4 AND ifnull(median_ms, 'NaN') = ifnull(?5, 'NaN') AND "
      "tuned_at = ?14 AND library_version = ?15))) "
      "ON CONFLICT DO NOTHING RETURNING id"));
  q->bind(1, device_id);
  q->bind(2, problem_id);
  bind_fields(*q, 3, trial, kTrialFields);
  q->bind(14, tuned_at);
  q->bind(15, library_version);
  if (occurrence) q->bind(16, *occurrence);
  if (!q->step()) return std::nullopt;
  const std::int64_t id = q->column_int64(0);
  while (q->step()) {
  }
  return id;
}

void Store::put_winner(std::int64_t device_id, std::int64_t problem_id, std::int64_t trial_id,
                       std::int64_t trial_count, std::int64_t tuned_at,
                       const std::string& library_version) {
  Query q(
      statement("INSERT INTO winners (device_id, problem_id, trial_id, trial_count, tuned_at, "
                "library_version) VALUES (?1, ?2, ?3, ?4, ?5, ?6) "
                "ON CONFLICT (device_id, problem_id) DO UPDATE SET trial_id = excluded.trial_id, "
                "trial_count = excluded.trial_count, tuned_at = excluded.tuned_at, "
                "library_version = excluded.library_version"));
  q->bind(1, device_id);
  q->bind(2, problem_id);
  q->bind(3, trial_id);
  q->bind(4, trial_count);
  q->bind(5, tuned_at);
  q->bind(6, library_version);
  while (q->step()) {
  }
  Query cleared(statement("DELETE FROM problem_failures WHERE device_id = ?1 AND problem_id = ?2"));
  cleared->bind(1, device_id);
  cleared->bind(2, problem_id);
  while (cleared->step()) {
  }
}

void Store::record_problem_failure(const DeviceRecord& device, const ProblemRecord& problem,
                                   const std::string& reason, const std::string& library_version) {
  if (device.key.empty()) GMJIT_USAGE_FAIL("device key is empty");
  if (problem.key.empty()) GMJIT_USAGE_FAIL("problem key is empty");
  require_json(device.fingerprint_json, "device fingerprint_json");
  require_json(problem.shape_json, "problem shape_json");
  const std::int64_t now = now_seconds();
  Transaction tx(connection_);
  const std::int64_t device_id = add_device(device, now, now, OnConflict::replace);
  const std::int64_t problem_id =
      add_problem(problem, add_kernel(problem.kernel, problem.template_hash), OnConflict::replace);
  Query q(statement(
      "INSERT INTO problem_failures (device_id, problem_id, reason, failed_at, library_version) "
      "VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (device_id, problem_id) DO UPDATE SET "
      "reason = excluded.reason, failed_at = excluded.failed_at, library_version = excluded.library_version"));
  q->bind(1, device_id);
  q->bind(2, problem_id);
  q->bind(3, reason);
  q->bind(4, now);
  q->bind(5, library_version);
  while (q->step()) {
  }
  tx.commit();
}

std::optional<ProblemFailureRecord> Store::find_problem_failure(const std::string& device_key,
                                                                const std::string& problem_key) {
  Query q(statement(
      "SELECT f.reason, f.failed_at, f.library_version FROM problem_failures f "
      "JOIN devices d ON d.id = f.device_id JOIN problems p ON p.id = f.problem_id "
      "WHERE d.key = ?1 AND p.key = ?2"));
  q->bind(1, device_key);
  q->bind(2, problem_key);
  if (!q->step()) return std::nullopt;
  ProblemFailureRecord failure{q->column_text(0), q->column_int64(1), q->column_text(2)};
  while (q->step()) {
  }
  return failure;
}

bool Store::add_binary(const BinaryRecord& binary, std::int64_t created_at,
                       std::int64_t last_used, OnConflict on_conflict) {
  Query q(statement(on_conflict == OnConflict::replace ? kBinaryReplaceSql : kBinaryKeepSql));
  bind_fields(*q, 1, binary, kBinaryFields);
  q->bind(7, binary_checksum(binary.cubin));
  q->bind(8, last_used);
  q->bind(9, created_at);
  q->bind(10, static_cast<std::int64_t>(binary.cubin.size() + binary.ptx.size()));
  const bool added = q->step();
  while (q->step()) {
  }
  return added;
}

CacheRows Store::read_rows(bool with_binaries) {
  CacheRows rows;
  Transaction snapshot(connection_, Transaction::Kind::read);
  {
    Query q(statement(
        "SELECT key, name, arch, fingerprint_json, first_seen, last_seen FROM devices ORDER BY id"));
    while (q->step()) {
      CacheRows::Device& d = rows.devices.emplace_back();
      read_fields(*q, 0, d.record, kDeviceFields);
      d.first_seen = q->column_int64(4);
      d.last_seen = q->column_int64(5);
    }
  }
  {
    Query q(statement("SELECT name, template_hash FROM kernels ORDER BY id"));
    while (q->step()) rows.kernels.push_back({q->column_text(0), q->column_text(1)});
  }
  {
    Query q(statement(
        "SELECT p.key, k.name, k.template_hash, p.dtype, p.layout, p.shape_json "
        "FROM problems p JOIN kernels k ON k.id = p.kernel_id ORDER BY p.id"));
    while (q->step()) read_fields(*q, 0, rows.problems.emplace_back(), kProblemFields);
  }
  std::unordered_map<std::int64_t, std::size_t> trial_index;
  {
    Query q(statement(schema_version_ >= 2 ? kTrialRowsSql : kTrialRowsV1Sql));
    while (q->step()) {
      trial_index.emplace(q->column_int64(0), rows.trials.size());
      CacheRows::Trial& t = rows.trials.emplace_back();
      t.device_key = q->column_text(1);
      t.problem_key = q->column_text(2);
      t.tuned_at = q->column_int64(3);
      t.library_version = q->column_text(4);
      t.occurrence = q->column_int64(5);
      read_fields(*q, 6, t.record, kTrialFields);
    }
  }
  {
    Query q(statement(
        "SELECT d.key, p.key, w.trial_id, w.trial_count, w.tuned_at, w.library_version "
        "FROM winners w JOIN devices d ON d.id = w.device_id "
        "JOIN problems p ON p.id = w.problem_id ORDER BY d.key, p.key"));
    while (q->step()) {
      const auto it = trial_index.find(q->column_int64(2));
      if (it == trial_index.end()) {
        // Only a damaged cache has such a winner (verify reports it); it cannot travel.
        detail::logger().warn("export: winner of device {} problem {} has no trial; skipped",
                              q->column_text(0), q->column_text(1));
        continue;
      }
      rows.winners.push_back({q->column_text(0), q->column_text(1), it->second,
                              q->column_int64(3), q->column_int64(4), q->column_text(5)});
    }
  }
  if (with_binaries && schema_version_ >= 2) {
    Query q(statement(GMJIT_BINARY_SELECT ", created_at FROM binaries ORDER BY compile_key"));
    while (q->step()) {
      CacheRows::Binary& b = rows.binaries.emplace_back();
      b.record = read_binary(q);
      b.created_at = q->column_int64(8);
    }
  }
  return rows;
}

std::size_t Store::binary_count() {
  if (schema_version_ < 2) return 0;
  Query q(statement("SELECT count(*) FROM binaries"));
  return static_cast<std::size_t>(single_integer(q));
}

ImportResult Store::merge(const std::vector<CacheRows>& sources) {
  ImportResult result;
  Transaction tx(connection_);
  for (const CacheRows& rows : sources) merge_rows(rows, result);
  tx.commit();
  return result;
}

void Store::merge_rows(const CacheRows& rows, ImportResult& result) {
  std::unordered_map<std::string, std::int64_t> device_ids;
  for (const CacheRows::Device& d : rows.devices) {
    device_ids[d.record.key] = add_device(d.record, d.first_seen, d.last_seen, OnConflict::keep);
  }
  for (const CacheRows::Kernel& k : rows.kernels) add_kernel(k.name, k.template_hash);
  std::unordered_map<std::string, std::int64_t> problem_ids;
  for (const ProblemRecord& p : rows.problems) {
    problem_ids[p.key] = add_problem(p, add_kernel(p.kernel, p.template_hash), OnConflict::keep);
  }

  std::vector<bool> winning(rows.trials.size(), false);
  for (const CacheRows::Winner& w : rows.winners) {
    if (w.trial >= rows.trials.size()) {
      GMJIT_USAGE_FAIL("winner trial {} is not an index into trials ({} trials)", w.trial,
                       rows.trials.size());
    }
    const CacheRows::Trial& t = rows.trials[w.trial];
    if (t.record.status != "ok" || t.device_key != w.device_key ||
        t.problem_key != w.problem_key) {
      GMJIT_USAGE_FAIL("winner of device {} problem {}: trial {} did not pass or belongs to "
                       "another device or problem",
                       w.device_key, w.problem_key, w.trial);
    }
    winning[w.trial] = true;
  }
  std::vector<std::int64_t> trial_ids(rows.trials.size(), 0);
  for (std::size_t i = 0; i < rows.trials.size(); ++i) {
    const CacheRows::Trial& t = rows.trials[i];
    const std::int64_t device_id = id_of(device_ids, t.device_key, "device");
    const std::int64_t problem_id = id_of(problem_ids, t.problem_key, "problem");
    if (const auto id = add_trial(device_id, problem_id, t.record, t.tuned_at, t.library_version,
                                  t.occurrence)) {
      trial_ids[i] = *id;
      ++result.trials_added;
      continue;
    }
    if (!winning[i]) continue;
    Query q(statement(
        "SELECT id FROM trials WHERE device_id = ?1 AND problem_id = ?2 AND config_json = ?3 "
        "AND status = ?4 AND ifnull(median_ms, 'NaN') = ifnull(?5, 'NaN') AND tuned_at = ?6 "
        "AND library_version = ?7 AND occurrence = ?8"));
    q->bind(1, device_id);
    q->bind(2, problem_id);
    q->bind(3, t.record.config_json);
    q->bind(4, t.record.status);
    q->bind(5, t.record.median_ms);
    q->bind(6, t.tuned_at);
    q->bind(7, t.library_version);
    q->bind(8, t.occurrence);
    if (q->step()) trial_ids[i] = q->column_int64(0);
  }

  for (const CacheRows::Winner& w : rows.winners) {
    const std::int64_t device_id = id_of(device_ids, w.device_key, "device");
    const std::int64_t problem_id = id_of(problem_ids, w.problem_key, "problem");
    const std::int64_t trial_id = trial_ids[w.trial];
    if (trial_id == 0) {
      GMJIT_CACHE_FAIL(SQLITE_INTERNAL, "import", "imported trial {} not found after insert",
                       w.trial);
    }
    bool replace = true;
    {
      Query q(statement(
          "SELECT w.trial_id, t.median_ms, t.status FROM winners w "
          "JOIN trials t ON t.id = w.trial_id WHERE w.device_id = ?1 AND w.problem_id = ?2"));
      q->bind(1, device_id);
      q->bind(2, problem_id);
      if (q->step()) {
        // A current winner that is not 'ok' could only come from a damaged cache; any verified
        // import beats it.
        const bool current_ok = q->column_text(2) == "ok";
        replace = q->column_int64(0) != trial_id &&
                  (!current_ok || faster(rows.trials[w.trial].record.median_ms, q->column_double(1)));
      }
    }
    if (!replace) continue;
    put_winner(device_id, problem_id, trial_id, w.trial_count, w.tuned_at, w.library_version);
    ++result.winners_changed;
  }

  for (const CacheRows::Binary& b : rows.binaries) {
    if (add_binary(b.record, b.created_at, b.record.last_used, OnConflict::keep)) {
      ++result.binaries_added;
    } else {
      ++result.binaries_ignored;  // the cache already has a binary for this key
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Reads

std::optional<WinnerRecord> Store::find_winner(const std::string& device_key,
                                               const std::string& problem_key) {
  Query q(statement(kFindWinnerSql));
  q->bind(1, device_key);
  q->bind(2, problem_key);
  if (!q->step()) return std::nullopt;
  return read_winner(q);
}

std::vector<WinnerRecord> Store::winners(const std::string& kernel_filter) {
  std::vector<std::pair<WinnerOrder, WinnerRecord>> rows;
  {
    Query q(statement(kWinnersSql));
    q->bind(1, kernel_filter);
    while (q->step()) {
      WinnerRecord w = read_winner(q);
      nlohmann::json shape = nlohmann::json::parse(w.shape_json, nullptr, false);
      const bool parsed = !shape.is_discarded();
      rows.emplace_back(WinnerOrder{std::move(shape), parsed}, std::move(w));
    }
  }
  std::sort(rows.begin(), rows.end(), winner_less);
  std::vector<WinnerRecord> result;
  result.reserve(rows.size());
  for (auto& row : rows) result.push_back(std::move(row.second));
  return result;
}

std::vector<TrialRecord> Store::trials(const std::string& device_key,
                                       const std::string& problem_key) {
  Query q(statement("SELECT " GMJIT_TRIAL_COLUMNS " " GMJIT_TRIAL_JOINS
                    "WHERE d.key = ?1 AND p.key = ?2 ORDER BY t.id"));
  q->bind(1, device_key);
  q->bind(2, problem_key);
  std::vector<TrialRecord> result;
  while (q->step()) read_fields(*q, 0, result.emplace_back(), kTrialFields);
  return result;
}

namespace {

using Log2Dimensions = std::vector<std::pair<std::string, double>>;

// The dimensions of a shape as (key, log2 of the value), in key order; nullopt when a value is
// negative or not a number, for which log2 means nothing. A zero is a layout flag (gemm's
// trans_b=0), kept as -infinity: it matches only another zero.
std::optional<Log2Dimensions> log2_dimensions(const std::string& shape_json) {
  const nlohmann::json shape = nlohmann::json::parse(shape_json, nullptr, false);
  if (!shape.is_object() && !shape.is_array()) return std::nullopt;
  Log2Dimensions dims;
  std::size_t index = 0;
  for (auto it = shape.begin(); it != shape.end(); ++it, ++index) {
    if (!it->is_number()) return std::nullopt;
    const double value = it->get<double>();
    if (!(value >= 0) || !std::isfinite(value)) return std::nullopt;
    dims.emplace_back(shape.is_object() ? it.key() : std::to_string(index),
                      value == 0 ? -std::numeric_limits<double>::infinity() : std::log2(value));
  }
  return dims;
}

// The one computation of the nearest-shape distance; nullopt when the keys differ.
std::optional<double> log2_distance(const Log2Dimensions& a, const Log2Dimensions& b) {
  if (a.size() != b.size()) return std::nullopt;
  double sum = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].first != b[i].first) return std::nullopt;
    const bool a_zero = std::isinf(a[i].second), b_zero = std::isinf(b[i].second);
    if (a_zero != b_zero) return std::nullopt;
    if (a_zero) continue;
    const double d = b[i].second - a[i].second;
    sum += d * d;
  }
  return std::sqrt(sum);
}

}  // namespace

std::optional<double> shape_distance(const std::string& a_json, const std::string& b_json) {
  const auto a = log2_dimensions(a_json);
  const auto b = log2_dimensions(b_json);
  if (!a || !b) return std::nullopt;
  return log2_distance(*a, *b);
}

std::string binary_checksum(const std::vector<char>& data) {
  return fmt::format("{:016x}", XXH3_64bits(data.data(), data.size()));
}

std::optional<WinnerRecord> Store::nearest_winner(const std::string& device_key,
                                                  const std::string& kernel,
                                                  const std::string& dtype,
                                                  const std::string& shape_json) {
  const auto wanted = log2_dimensions(shape_json);
  if (!wanted) {
    GMJIT_USAGE_FAIL("shape '{}' is not a JSON object or array of non-negative numbers", shape_json);
  }
  std::optional<WinnerRecord> best;
  Query q(statement(kNearestSql));
  q->bind(1, device_key);
  q->bind(2, kernel);
  q->bind(3, dtype);
  while (q->step()) {
    WinnerRecord w = read_winner(q);
    const auto dims = log2_dimensions(w.shape_json);
    const auto distance = dims ? log2_distance(*wanted, *dims) : std::nullopt;
    if (!distance) continue;
    w.distance = *distance;
    if (!best || w.distance < best->distance ||
        (w.distance == best->distance && w.problem_key < best->problem_key)) {
      best = std::move(w);
    }
  }
  return best;
}

// ---------------------------------------------------------------------------------------------
// Binaries

void Store::put_binary(const BinaryRecord& binary) {
  if (binary.compile_key.empty()) GMJIT_USAGE_FAIL("binary compile key is empty");
  const std::int64_t now = now_milliseconds();
  add_binary(binary, now, now, OnConflict::replace);
}

std::optional<BinaryRecord> Store::get_binary(const std::string& compile_key) {
  BinaryRecord b;
  {
    Query q(statement(GMJIT_BINARY_SELECT " FROM binaries WHERE compile_key = ?1"));
    q->bind(1, compile_key);
    if (!q->step()) return std::nullopt;
    b = read_binary(q);
  }
  if (!checksum_holds(compile_key, b.cubin, b.checksum)) return std::nullopt;
  b.last_used = note_use(compile_key, b.last_used);
  return b;
}

std::optional<CubinRecord> Store::get_cubin(const std::string& compile_key) {
  CubinRecord c;
  std::string checksum;
  std::int64_t last_used = 0;
  {
    // The cubin last, the PTX and the rest of the description not at all: a launch needs
    // neither, and the PTX is as large as the cubin. json_valid keeps a malformed description a
    // record without a lowered name (which the loader recompiles) rather than an SQL error.
    Query q(statement("SELECT checksum, last_used, CASE WHEN json_valid(resources_json) THEN "
                      "json_extract(resources_json, '$.lowered_name') END, cubin "
                      "FROM binaries WHERE compile_key = ?1"));
    q->bind(1, compile_key);
    if (!q->step()) return std::nullopt;
    checksum = q->column_text(0);
    last_used = q->column_int64(1);
    c.lowered_name = q->column_text(2);
    c.cubin = q->column_blob(3);
  }
  if (!checksum_holds(compile_key, c.cubin, checksum)) return std::nullopt;
  note_use(compile_key, last_used);
  return c;
}

bool Store::checksum_holds(const std::string& compile_key, const std::vector<char>& cubin,
                           const std::string& checksum) {
  const std::string actual = binary_checksum(cubin);
  if (actual == checksum) return true;
  detail::logger().warn(
      "tuning cache {}: binary {} fails its checksum (stored {}, computed {}); deleted it",
      path_.string(), compile_key, checksum, actual);
  try {
    // Only the row that was read: a concurrent put_binary may already have replaced it.
    Query q(statement("DELETE FROM binaries WHERE compile_key = ?1 AND checksum = ?2"));
    q->bind(1, compile_key);
    q->bind(2, checksum);
    while (q->step()) {
    }
  } catch (const Error& e) {
    detail::logger().warn("tuning cache {}: cannot delete binary {}: {}", path_.string(),
                          compile_key, e.message());
  }
  return false;
}

std::int64_t Store::note_use(const std::string& compile_key, std::int64_t last_used) {
  const std::int64_t now = now_milliseconds();
  // gc needs recency to the minute, not the millisecond. Rewriting last_used on every hit would
  // also change the file on every warm start, and a changed file is quick_checked again at its
  // next open (see check_quick).
  if (now - last_used < options_.last_use_resolution_ms) return last_used;
  try {
    Query q(statement("UPDATE binaries SET last_used = ?2 WHERE compile_key = ?1"));
    q->bind(1, compile_key);
    q->bind(2, now);
    while (q->step()) {
    }
    return std::max(last_used, now);
  } catch (const Error& e) {
    // Recency only steers gc; the binary itself is sound, so the caller still gets it.
    detail::logger().warn("tuning cache {}: cannot update last use of binary {}: {}",
                          path_.string(), compile_key, e.message());
  }
  return last_used;
}

void Store::remove_binary(const std::string& compile_key) {
  Query q(statement("DELETE FROM binaries WHERE compile_key = ?1"));
  q->bind(1, compile_key);
  while (q->step()) {
  }
}

std::int64_t Store::binaries_bytes() {
  Query q(statement("SELECT coalesce(sum(bytes), 0) FROM binaries"));
  return single_integer(q);
}

GcResult Store::gc(std::int64_t max_bytes) {
  if (max_bytes < 0) GMJIT_USAGE_FAIL("gc limit {} is negative", max_bytes);
  GcResult result;
  Transaction tx(connection_);
  result.bytes_before = binaries_bytes();
  std::int64_t total = result.bytes_before;
  std::vector<std::int64_t> victims;
  {
    Query q(statement("SELECT rowid, bytes FROM binaries ORDER BY last_used, rowid"));
    while (total > max_bytes && q->step()) {
      victims.push_back(q->column_int64(0));
      total -= q->column_int64(1);
    }
  }
  for (const std::int64_t rowid : victims) {
    Query q(statement("DELETE FROM binaries WHERE rowid = ?1"));
    q->bind(1, rowid);
    while (q->step()) {
    }
  }
  tx.commit();
  result.evicted = victims.size();
  result.bytes_after = total;
  return result;
}

VerifyReport Store::verify() {
  VerifyReport report;
  auto problem = [&](std::string text) { report.problems.push_back(std::move(text)); };
  try {
    Query q(statement("PRAGMA integrity_check"));
    while (q->step()) {
      std::string line = q->column_text(0);
      if (line != "ok") problem("integrity_check: " + line);
    }
  } catch (const Error& e) {
    problem("integrity_check failed: " + e.message());
  }
  try {
    Query q(statement("PRAGMA foreign_key_check"));
    while (q->step()) {
      problem(fmt::format("{} row {} references a missing row of {}", q->column_text(0),
                          q->column_int64(1), q->column_text(2)));
    }
  } catch (const Error& e) {
    problem("foreign_key_check failed: " + e.message());
  }
  try {
    Query q(statement(
        "SELECT ifnull(d.key, w.device_id), ifnull(p.key, w.problem_id), w.trial_id, "
        "t.id IS NULL, t.status FROM winners w "
        "LEFT JOIN devices d ON d.id = w.device_id "
        "LEFT JOIN problems p ON p.id = w.problem_id "
        "LEFT JOIN trials t ON t.id = w.trial_id "
        "WHERE t.id IS NULL OR t.device_id != w.device_id OR t.problem_id != w.problem_id "
        "OR t.status != 'ok'"));
    while (q->step()) {
      problem(fmt::format("winner of device {} problem {}: trial {} {}", q->column_text(0),
                          q->column_text(1), q->column_int64(2),
                          q->column_int(3) != 0 ? "is missing"
                                                : "belongs to another device or problem or did "
                                                  "not pass (status " +
                                                      q->column_text(4) + ")"));
    }
  } catch (const Error& e) {
    problem("winner check failed: " + e.message());
  }
  try {
    Query q(statement("SELECT compile_key, cubin, checksum FROM binaries ORDER BY compile_key"));
    while (q->step()) {
      const std::string actual = binary_checksum(q->column_blob(1));
      if (actual != q->column_text(2)) {
        problem(fmt::format("binary {} fails its checksum (stored {}, computed {})",
                            q->column_text(0), q->column_text(2), actual));
      }
    }
  } catch (const Error& e) {
    problem("binary check failed: " + e.message());
  }
  report.ok = report.problems.empty();
  return report;
}

}  // namespace gmjit::cache
