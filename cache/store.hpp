#pragma once
/// @file store.hpp
/// The tuning cache: one SQLite file holding devices, kernels, problems, every measured trial and
/// the winning configuration of each (device, problem).

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

// Forward declarations keep sqlite3.h out of every file that includes this header.
struct sqlite3;
struct sqlite3_stmt;

namespace gmjit::cache {

/// Where the cache lives unless the caller names a file: $GMJIT_CACHE, else
/// $XDG_CACHE_HOME/gmjit/gmjit.db, else $HOME/.cache/gmjit/gmjit.db (HOME taken from the
/// password database when unset).
/// @throws gmjit::Error (cache) when none of them gives a location.
std::filesystem::path default_path();

/// A device as identified by its fingerprint (see DESIGN.md, Keys).
struct DeviceRecord {
  std::string key;               ///< hash of the fingerprint; identifies the device
  std::string name;              ///< e.g. "NVIDIA H200"
  std::string arch;              ///< target arch used, e.g. "sm_90a"
  std::string fingerprint_json;  ///< the whole fingerprint, as a JSON document
};

/// One problem: a kernel template instantiated for a dtype, layout and shape.
struct ProblemRecord {
  std::string key;  ///< hash of kernel + template hash + dtype + layout + shape
  std::string kernel;
  std::string template_hash;
  std::string dtype;
  std::string layout;
  std::string shape_json;  ///< JSON document
};

/// One measured (or rejected) configuration.
struct TrialRecord {
  std::string config_json;  ///< JSON document
  /// ok | compile_failed | invalid | launch_failed | crashed | timeout | wrong_result
  std::string status;
  double median_ms = 0;
  double spread = 0;
  int repetitions = 0;
  double verify_error = 0;
  double compile_ms = 0;
  int registers = 0;
  int spill_bytes = 0;
  int shared_bytes = 0;
  std::string detail;  ///< error text for failures
};

/// The best configuration known for a (device, problem).
struct WinnerRecord {
  std::string device_key;
  std::string device_name;
  std::string problem_key;
  std::string kernel;
  std::string dtype;
  std::string shape_json;
  std::string config_json;
  double median_ms = 0;
  int trial_count = 0;        ///< trials measured in the tuning run that chose this winner
  std::int64_t tuned_at = 0;  ///< seconds since the Unix epoch
  std::string library_version;
  /// Only set by Store::nearest_winner: the Euclidean distance between the log2 of the requested
  /// shape's dimensions and this winner's (0 for an exact match).
  double distance = 0;
};

/// A compiled kernel kept so that a later process launches it without NVRTC.
struct BinaryRecord {
  std::string compile_key;  ///< identifies the source, options and toolkit that produced it
  std::string kernel;
  std::string arch;
  std::vector<char> cubin;
  std::string ptx;
  std::string resources_json;
  std::string checksum;        ///< hex XXH3-64 of cubin; computed by Store::put_binary
  std::int64_t last_used = 0;  ///< milliseconds since the Unix epoch
};

/// What Store::gc did.
struct GcResult {
  std::size_t evicted = 0;
  std::int64_t bytes_before = 0;
  std::int64_t bytes_after = 0;
};

/// What Store::verify found; ok when problems is empty.
struct VerifyReport {
  bool ok = true;
  std::vector<std::string> problems;
};

/// How a Store opens its file.
struct StoreOptions {
  /// How long a write waits for another process's write transaction before failing with
  /// Error(cache) "database is locked". Longer than any single write of a tuning run, so
  /// concurrent tuners queue instead of failing.
  int busy_timeout_ms = 10'000;
  /// Granularity of a binary's last use, which gc evicts by: a hit within it of the recorded use
  /// writes nothing, so warm starts leave the file unchanged (and skip the next open's check).
  std::int64_t last_use_resolution_ms = 60'000;
};

/// Hex XXH3-64 of `data`, as stored in BinaryRecord::checksum.
std::string binary_checksum(const std::vector<char>& data);

/// An open SQLite connection; closes on destruction.
class Connection {
 public:
  enum class Access { read_write, read_only };

  /// Opens an existing file; never creates one (the Store creates it with mode 0600). Read-write
  /// access is refused when SQLite could only open the file read-only.
  /// @throws gmjit::Error (cache)
  explicit Connection(const std::filesystem::path& path, Access access = Access::read_write,
                      int busy_timeout_ms = StoreOptions{}.busy_timeout_ms);
  Connection(Connection&& other) noexcept;
  Connection& operator=(Connection&& other) noexcept;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection();

  /// Runs one or more statements that return no rows the caller needs.
  /// @throws gmjit::Error (cache)
  void exec(const char* sql);
  sqlite3* handle() const noexcept { return db_; }

 private:
  sqlite3* db_ = nullptr;
};

/// A prepared statement, reused across calls: reset() makes it ready for the next binding.
class Statement {
 public:
  /// @throws gmjit::Error (cache) when the SQL does not compile
  Statement(sqlite3* db, std::string_view sql);
  Statement(Statement&& other) noexcept;
  Statement& operator=(Statement&& other) noexcept;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  ~Statement();

  /// Parameter indices start at 1, as in SQLite.
  void bind(int index, std::string_view value);
  void bind(int index, double value);  ///< NaN is stored as NULL and read back as NaN
  void bind(int index, std::int64_t value);
  void bind(int index, int value);
  void bind_blob(int index, const std::vector<char>& value);

  /// @return true when a row is available, false when the statement is done
  /// @throws gmjit::Error (cache) on any other result
  bool step();

  std::string column_text(int index) const;
  double column_double(int index) const;
  std::int64_t column_int64(int index) const;
  int column_int(int index) const;
  std::vector<char> column_blob(int index) const;
  bool column_is_null(int index) const;

  /// Ends the current execution and clears all bindings; never throws (an error of the last
  /// step has already been reported by step()).
  void reset() noexcept;

 private:
  sqlite3* db_ = nullptr;
  sqlite3_stmt* stmt_ = nullptr;
};

/// Binds a trial's measured fields to parameters 3..13 of an INSERT INTO trials, in the column
/// order both the store and an import use.
void bind_trial(Statement& statement, const TrialRecord& trial);

/// BEGIN IMMEDIATE on construction; rolls back on destruction unless commit() succeeded.
class Transaction {
 public:
  /// @throws gmjit::Error (cache), e.g. when another writer holds the lock past the busy timeout
  explicit Transaction(Connection& connection);
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  ~Transaction();

  /// @throws gmjit::Error (cache); the destructor then rolls back
  void commit();

 private:
  Connection& connection_;
  bool committed_ = false;
};

/// The tuning cache. Several processes may share one file; one Store must not be used from
/// several threads at once (open one per thread instead). Movable, not copyable.
class Store {
 public:
  static constexpr int kSchemaVersion = 2;
  /// PRAGMA application_id of every gmjit cache ("GMJT"); a file with another id is refused.
  static constexpr std::int32_t kApplicationId = 0x474D4A54;

  /// Opens the cache at `path`, creating it (and missing parent directories, mode 0700; the file
  /// mode 0600) when absent, and migrating its schema to kSchemaVersion.
  ///
  /// A file that is not a SQLite database, is truncated, or fails PRAGMA quick_check is renamed
  /// to `<path>.corrupt-<UTC YYYYmmddTHHMMSS>` (with its -wal and -shm), a warning names both
  /// files, and a fresh cache is created at `path`; quarantined() then says where it went. A
  /// zero-length file is not corrupt: SQLite treats it as an empty database, so it becomes a fresh
  /// cache in place. quick_check reads the whole file, so opening costs time proportional to the
  /// cache's size (binaries included; Store::gc bounds it).
  /// @throws gmjit::Error (cache) when the location cannot be created or written, when the file
  ///   or its directory is owned by another user or writable by group or others, when the file is
  ///   another application's SQLite database, or when its schema is newer than this library (in
  ///   those two cases the file is not touched).
  explicit Store(const std::filesystem::path& path, const StoreOptions& options = {});
  Store(Store&&) noexcept;
  Store& operator=(Store&&) noexcept;
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;
  ~Store();

  /// In one transaction: upserts the device and the problem, appends every trial, and replaces
  /// the winner of (device, problem) with trials[*winner] when winner is set. Nothing is written
  /// if anything throws.
  /// @throws gmjit::Error (usage) for a winner index out of range or a winner whose status is not
  ///   "ok", or a field that must be JSON and is not; (cache) for anything SQLite rejects, such as
  ///   an unknown trial status.
  /// `run_trials` is the winner's trial count when the run recorded its trials in earlier calls
  /// (a sweep commits each trial as it ends); by default, trials.size().
  void record_tuning(const DeviceRecord& device, const ProblemRecord& problem,
                     const std::vector<TrialRecord>& trials, std::optional<std::size_t> winner,
                     const std::string& library_version, std::optional<std::size_t> run_trials = std::nullopt);

  /// The winner of (device, problem), if one was recorded.
  std::optional<WinnerRecord> find_winner(const std::string& device_key,
                                          const std::string& problem_key);

  /// Every winner, or those of one kernel, ordered by kernel, dtype, shape (numerically where the
  /// shapes are JSON numbers), then device.
  std::vector<WinnerRecord> winners(const std::string& kernel_filter = {});

  /// Every trial recorded for (device, problem), oldest first.
  std::vector<TrialRecord> trials(const std::string& device_key, const std::string& problem_key);

  /// Nearest tuned shape: among the winners of the same device, kernel and dtype whose shape has
  /// the same keys as `shape_json` (the same member names for a JSON object, the same length for
  /// an array), the one minimizing the Euclidean distance between the log2 of the dimensions,
  /// sqrt(sum_i (log2 a_i - log2 b_i)^2), so that doubling any one dimension counts 1 whatever
  /// its size. An exact match has distance 0. Winners whose shape has a non-positive or
  /// non-numeric dimension are skipped; ties go to the smaller problem key.
  /// @throws gmjit::Error (usage) when shape_json is not a JSON object or array of positive numbers
  std::optional<WinnerRecord> nearest_winner(const std::string& device_key,
                                             const std::string& kernel, const std::string& dtype,
                                             const std::string& shape_json);

  /// Stores (or replaces) the binary of binary.compile_key; its checksum and size are computed
  /// here, binary.checksum and binary.last_used are ignored.
  /// @throws gmjit::Error (usage) for an empty compile key; (cache) when SQLite fails
  void put_binary(const BinaryRecord& binary);

  /// The binary of `compile_key`, with its checksum verified. A binary whose checksum fails is
  /// deleted, a warning names its key, and nullopt is returned: a bad binary is never served. A
  /// hit updates last_used; should that write fail (e.g. another writer holds the lock past the
  /// busy timeout) the verified binary is still returned, with a warning.
  std::optional<BinaryRecord> get_binary(const std::string& compile_key);

  /// Forgets a binary, e.g. one the driver refused to load. No-op when absent.
  void remove_binary(const std::string& compile_key);

  /// In one transaction, evicts least recently used binaries until their bytes (cubin + ptx) sum
  /// to at most max_bytes.
  /// @throws gmjit::Error (usage) for a negative max_bytes
  GcResult gc(std::int64_t max_bytes);

  /// Sum of cubin + ptx bytes of every cached binary.
  std::int64_t binaries_bytes();

  /// Full PRAGMA integrity_check, foreign keys, winners whose trial is missing (or belongs to
  /// another device or problem), binaries whose checksum fails. Reports only; changes nothing.
  VerifyReport verify();

  /// Where a corrupt file found at open was moved; nullopt when the file was sound.
  const std::optional<std::filesystem::path>& quarantined() const;

  const std::filesystem::path& path() const;

 private:
  friend struct StoreAccess;  // cache/exchange.cpp applies imports inside one transaction

  Statement& statement(const char* sql);
  void open_checked();
  int check_compatible();  // returns the file's schema version
  void check_quick();
  std::string enable_wal();  // returns the journal mode in effect
  void migrate();

  std::filesystem::path path_;
  StoreOptions options_;
  std::optional<std::filesystem::path> quarantined_;
  // Declared before the statements so that they are finalized before the connection closes.
  Connection connection_;
  std::unordered_map<std::string, Statement> statements_;
};

}  // namespace gmjit::cache
