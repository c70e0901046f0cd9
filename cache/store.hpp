#pragma once
/// @file store.hpp
/// The tuning cache: one SQLite file holding devices, kernels, problems, every measured trial and
/// the winning configuration of each (device, problem).

#include <array>
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

/// A device as identified by its fingerprint (see docs/ARCHITECTURE.md, Keys).
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

/// The statuses a trial may have; the schema refuses any other.
inline constexpr std::array<std::string_view, 7> kTrialStatuses = {
    "ok", "compile_failed", "invalid", "launch_failed", "crashed", "timeout", "wrong_result"};

/// One measured (or rejected) configuration.
struct TrialRecord {
  std::string config_json;  ///< JSON document
  std::string status;  ///< one of kTrialStatuses
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

/// Why a sweep could not tune a (device, problem) at all.
struct ProblemFailureRecord {
  std::string reason;
  std::int64_t failed_at = 0;  ///< seconds since the epoch
  std::string library_version;
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
  std::string device_arch;  ///< the arch its cubins are compiled for, e.g. sm_90a
  /// Only set by Store::nearest_winner: shape_distance from the requested shape (0 for an exact
  /// match).
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

/// What a launch needs of a cached binary (Store::get_cubin).
struct CubinRecord {
  std::vector<char> cubin;   ///< checksum verified
  std::string lowered_name;  ///< from resources_json; empty when the description names none
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

/// Every row of a cache, keyed as an export document keys them: what Store::read_rows returns and
/// Store::merge applies. Devices and problems are named by key, a winner's trial by its index in
/// `trials`; row ids never leave the store.
struct CacheRows {
  struct Device {
    DeviceRecord record;
    std::int64_t first_seen = 0;  ///< seconds since the Unix epoch
    std::int64_t last_seen = 0;
  };
  struct Kernel {
    std::string name;
    std::string template_hash;
  };
  struct Trial {
    std::string device_key;
    std::string problem_key;
    TrialRecord record;
    std::int64_t tuned_at = 0;  ///< seconds since the Unix epoch
    std::string library_version;
    /// How many identical trials (same device, problem, config, status, median, tuned_at and
    /// library version) precede this one; with those fields, the trial's identity.
    std::int64_t occurrence = 0;
  };
  struct Winner {
    std::string device_key;
    std::string problem_key;
    std::size_t trial = 0;  ///< index into trials
    std::int64_t trial_count = 0;
    std::int64_t tuned_at = 0;
    std::string library_version;
  };
  struct Binary {
    BinaryRecord record;          ///< checksum as stored
    std::int64_t created_at = 0;  ///< milliseconds since the Unix epoch
  };

  std::vector<Device> devices;
  std::vector<Kernel> kernels;
  std::vector<ProblemRecord> problems;
  std::vector<Trial> trials;
  std::vector<Winner> winners;
  std::vector<Binary> binaries;
};

/// What an import or merge changed.
struct ImportResult {
  std::size_t trials_added = 0;
  std::size_t winners_changed = 0;  ///< winners added, or replaced by a faster one
  std::size_t binaries_added = 0;
  /// Untrusted, present already, or refused (failing their checksum or check_imported_binary).
  std::size_t binaries_ignored = 0;
  /// One line per refused binary: its compile key, kernel and arch, and why.
  std::vector<std::string> binaries_refused;
};

/// The nearest-shape distance between two shapes (JSON objects or arrays of dimensions): the
/// Euclidean distance between the log2 of their dimensions, sqrt(sum_i (log2 a_i - log2 b_i)^2),
/// so that doubling any one dimension counts 1 whatever its size; 0 for equal shapes. nullopt
/// when the shapes do not have the same keys (the same member names for objects, the same length
/// for arrays), or when either is not JSON or has a dimension that is negative or not a number.
/// A zero dimension is a layout flag (gemm's trans_b=0): it counts 0 against another zero and
/// makes the shapes incomparable (nullopt) against a positive value.
std::optional<double> shape_distance(const std::string& a_json, const std::string& b_json);

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
  /// immutable: read-only, taking no locks and creating no -wal or -shm beside the file; only
  /// for a file no writer has open.
  enum class Access { read_write, read_only, immutable };

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

/// The tuning cache. Several processes may share one file; one Store must not be used from
/// several threads at once (open one per thread instead). Movable, not copyable.
class Store {
 public:
  static constexpr int kSchemaVersion = 3;
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

  /// Records that a sweep could not tune (device, problem) at all: the worker refused the
  /// problem or died setting it up, so no trial says why. Upserts the device and the problem;
  /// replaces an earlier failure of the pair. A winner recorded later (record_tuning, merge)
  /// removes it. Failures stay in this file: export and merge carry trials and winners only.
  /// @throws gmjit::Error (usage) for an empty key or a field that must be JSON and is not;
  ///   (cache) when SQLite fails
  void record_problem_failure(const DeviceRecord& device, const ProblemRecord& problem,
                              const std::string& reason, const std::string& library_version);

  /// The failure recorded for (device, problem) by record_problem_failure, if any.
  std::optional<ProblemFailureRecord> find_problem_failure(const std::string& device_key,
                                                          const std::string& problem_key);

  /// The winner of (device, problem), if one was recorded.
  std::optional<WinnerRecord> find_winner(const std::string& device_key,
                                          const std::string& problem_key);

  /// Every winner, or those of one kernel, ordered by kernel, dtype, shape (numerically where the
  /// shapes are JSON numbers), then device.
  std::vector<WinnerRecord> winners(const std::string& kernel_filter = {});

  /// Every trial recorded for (device, problem), oldest first.
  std::vector<TrialRecord> trials(const std::string& device_key, const std::string& problem_key);

  /// Nearest tuned shape: among the winners of the same device, kernel and dtype whose shape has
  /// the same keys as `shape_json`, the one at the smallest shape_distance from it. Winners whose
  /// shape has a negative or non-numeric dimension, or a zero (flag) where `shape_json` has a
  /// positive value or the reverse, are skipped; ties go to the smaller problem key.
  /// @throws gmjit::Error (usage) when shape_json is not a JSON object or array of non-negative
  /// numbers
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

  /// get_binary for a launch: the cubin (its checksum verified, and a failing one deleted, the
  /// same way) and the kernel's lowered name, read without the PTX or the rest of the
  /// description. Records the use as get_binary does.
  std::optional<CubinRecord> get_cubin(const std::string& compile_key);

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

  /// Opens another cache only to read its rows (a merge source, a dry run): read-only, schema 1
  /// or newer up to kSchemaVersion. Never creates, migrates, quarantines or otherwise writes the
  /// file. A file without a -wal beside it, which no writer has open, is read as immutable, so
  /// that no -wal or -shm appears beside it either (a writer that opens it during the read could
  /// make that read fail, never the file).
  /// @throws gmjit::Error (cache) when the file cannot be opened or read, is not a gmjit cache, or
  ///   has a newer schema; `role` names the file in those messages.
  static Store open_read_only(const std::filesystem::path& path, std::string_view role = "cache");

  /// Every row, read in one snapshot, so that they agree while tuners keep writing. Devices,
  /// kernels, problems and trials in the order they were added, winners by device and problem
  /// key, binaries (only when with_binaries) by compile key. A winner whose trial is missing, which
  /// only a damaged cache holds (verify reports it), is skipped with a warning.
  CacheRows read_rows(bool with_binaries);

  /// How many binaries the cache holds; a schema-1 file has none.
  std::size_t binary_count();

  /// Applies each of `sources` in turn, all in one transaction: devices are upserted (first and
  /// last seen widened to cover both), kernels and problems are added when absent (a problem key
  /// covers every field of its problem), trials not already present are added (a trial's identity
  /// is its device, problem, config_json, status, median_ms, tuned_at, library_version and
  /// occurrence; a UNIQUE index enforces it, so applying the same rows twice adds nothing), per
  /// (device, problem) the winner with the smaller median_ms among the current and the applied one
  /// is kept (the current one on a tie, unless its trial did not pass), and binaries whose compile
  /// key is absent are added, with their checksum computed here; a present one counts as ignored.
  /// Nothing is written if anything throws.
  /// @throws gmjit::Error (usage) for a trial or winner that names a device, problem or trial its
  ///   rows lack; (cache) for anything SQLite rejects
  ImportResult merge(const std::vector<CacheRows>& sources);

  /// Where a corrupt file found at open was moved; nullopt when the file was sound.
  const std::optional<std::filesystem::path>& quarantined() const;

  /// The corrupt files moved aside from `path` by this or an earlier open that are still there
  /// (`<path>.corrupt-*`, without their -wal and -shm), oldest first. Opens nothing.
  static std::vector<std::filesystem::path> quarantined_copies(const std::filesystem::path& path);

  const std::filesystem::path& path() const;

 private:
  // What every cache records in its header, read in one statement.
  struct Header {
    std::int64_t application_id = 0;
    std::int64_t version = 0;
    std::int64_t objects = 0;  // rows of sqlite_master: 0 for a file nothing has written yet
  };

  Store(std::filesystem::path path, Connection connection, int schema_version);
  Statement& statement(const char* sql);
  Header read_header();
  void open_checked();
  int check_compatible();  // returns the file's schema version
  void check_quick();
  std::string enable_wal();  // returns the journal mode in effect
  void migrate();

  // What an insert does with a row of the same key: a tuning run replaces it with what it has
  // just measured; an import keeps it.
  enum class OnConflict { replace, keep };
  std::int64_t add_device(const DeviceRecord& device, std::int64_t first_seen,
                          std::int64_t last_seen, OnConflict on_conflict);
  std::int64_t add_kernel(const std::string& name, const std::string& template_hash);
  std::int64_t add_problem(const ProblemRecord& problem, std::int64_t kernel_id,
                           OnConflict on_conflict);
  // nullopt when an identical trial is already present.
  std::optional<std::int64_t> add_trial(std::int64_t device_id, std::int64_t problem_id,
                                        const TrialRecord& trial, std::int64_t tuned_at,
                                        const std::string& library_version,
                                        std::optional<std::int64_t> occurrence);
  void put_winner(std::int64_t device_id, std::int64_t problem_id, std::int64_t trial_id,
                  std::int64_t trial_count, std::int64_t tuned_at,
                  const std::string& library_version);
  // false when a binary of the same compile key was kept
  bool add_binary(const BinaryRecord& binary, std::int64_t created_at, std::int64_t last_used,
                  OnConflict on_conflict);
  void merge_rows(const CacheRows& rows, ImportResult& result);
  // false (after deleting the row read, with a warning) when the cubin fails its checksum.
  bool checksum_holds(const std::string& compile_key, const std::vector<char>& cubin,
                      const std::string& checksum);
  // Records a hit on a binary last used at `last_used` (to last_use_resolution_ms); returns the
  // last use now recorded.
  std::int64_t note_use(const std::string& compile_key, std::int64_t last_used);

  std::filesystem::path path_;
  StoreOptions options_;
  std::optional<std::filesystem::path> quarantined_;
  int schema_version_ = kSchemaVersion;  // below it only for a file opened read-only
  // Declared before the statements so that they are finalized before the connection closes.
  Connection connection_;
  std::unordered_map<std::string, Statement> statements_;
};

}  // namespace gmjit::cache
