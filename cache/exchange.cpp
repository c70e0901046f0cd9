#include "cache/exchange.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>
#include <utility>

#include "gmjit/error.hpp"
#include "core/log.hpp"

#define GMJIT_EXCHANGE_USAGE(...)                                                            \
  throw ::gmjit::Error(::gmjit::ErrorKind::usage, 0, fmt::format(__VA_ARGS__), {}, __FILE__, \
                       __LINE__)

#define GMJIT_EXCHANGE_CACHE(code, call, ...)                                               \
  throw ::gmjit::Error(::gmjit::ErrorKind::cache, (code), fmt::format(__VA_ARGS__), (call), \
                       __FILE__, __LINE__)

namespace gmjit::cache {
namespace fs = std::filesystem;
using nlohmann::json;

// The one door into Store's connection, for applying a whole import in one transaction.
struct StoreAccess {
  static Connection& connection(Store& store) { return store.connection_; }
  static Statement& statement(Store& store, const char* sql) { return store.statement(sql); }
};

namespace {

constexpr std::string_view kFormat = "gmjit-cache-export";
constexpr int kFormatVersion = 1;
constexpr std::array<std::string_view, 7> kStatuses = {
    "ok", "compile_failed", "invalid", "launch_failed", "crashed", "timeout", "wrong_result"};

// ---------------------------------------------------------------------------------------------
// base64 (RFC 4648, with padding)

constexpr char kBase64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string base64_encode(const std::vector<char>& data) {
  std::string out;
  out.reserve((data.size() + 2) / 3 * 4);
  std::size_t i = 0;
  auto byte = [&](std::size_t k) {
    return static_cast<unsigned>(static_cast<unsigned char>(data[k]));
  };
  for (; i + 3 <= data.size(); i += 3) {
    const unsigned v = byte(i) << 16 | byte(i + 1) << 8 | byte(i + 2);
    out += kBase64[v >> 18 & 63];
    out += kBase64[v >> 12 & 63];
    out += kBase64[v >> 6 & 63];
    out += kBase64[v & 63];
  }
  if (const std::size_t rest = data.size() - i; rest > 0) {
    const unsigned v = byte(i) << 16 | (rest == 2 ? byte(i + 1) << 8 : 0u);
    out += kBase64[v >> 18 & 63];
    out += kBase64[v >> 12 & 63];
    out += rest == 2 ? kBase64[v >> 6 & 63] : '=';
    out += '=';
  }
  return out;
}

std::optional<std::vector<char>> base64_decode(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  std::array<int, 256> value{};
  value.fill(-1);
  for (int k = 0; k < 64; ++k) value[static_cast<unsigned char>(kBase64[k])] = k;
  std::vector<char> out;
  out.reserve(text.size() / 4 * 3);
  for (std::size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    unsigned v = 0;
    int padding = 0;
    for (std::size_t k = 0; k < 4; ++k) {
      const char c = text[i + k];
      // '=' only ends the last group, and only in its last two places.
      if (c == '=' && last && k >= 2 && (k == 3 || text[i + 3] == '=')) {
        ++padding;
        v <<= 6;
        continue;
      }
      const int d = value[static_cast<unsigned char>(c)];
      if (d < 0 || padding > 0) return std::nullopt;
      v = v << 6 | static_cast<unsigned>(d);
    }
    out.push_back(static_cast<char>(v >> 16 & 0xff));
    if (padding < 2) out.push_back(static_cast<char>(v >> 8 & 0xff));
    if (padding < 1) out.push_back(static_cast<char>(v & 0xff));
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// The document, validated and typed

struct DeviceRow {
  DeviceRecord record;
  std::int64_t first_seen = 0;
  std::int64_t last_seen = 0;
};

struct TrialRow {
  std::string device;
  std::string problem;
  TrialRecord record;
  std::int64_t tuned_at = 0;
  std::string library_version;
  std::int64_t occurrence = 0;
};

struct WinnerRow {
  std::string device;
  std::string problem;
  std::size_t trial = 0;
  std::int64_t trial_count = 0;
  std::int64_t tuned_at = 0;
  std::string library_version;
};

struct BinaryRow {
  BinaryRecord record;  // checksum as the document states it
  std::int64_t created_at = 0;
};

struct Document {
  std::vector<DeviceRow> devices;
  std::vector<std::pair<std::string, std::string>> kernels;  // name, template hash
  std::vector<ProblemRecord> problems;
  std::vector<TrialRow> trials;
  std::vector<WinnerRow> winners;
  std::vector<BinaryRow> binaries;
};

// Reads the fields of one object of the document; every failure names where it is ("trials[3]:
// missing median_ms"), in one line.
class Fields {
 public:
  Fields(const json& object, std::string where) : object_(object), where_(std::move(where)) {
    if (!object_.is_object()) GMJIT_EXCHANGE_USAGE("{}: expected an object", where_);
  }

  const json& get(const char* name) const {
    const auto it = object_.find(name);
    if (it == object_.end()) GMJIT_EXCHANGE_USAGE("{}: missing {}", where_, name);
    return *it;
  }

  std::string text(const char* name, bool allow_empty = true) const {
    const json& v = get(name);
    if (!v.is_string()) GMJIT_EXCHANGE_USAGE("{}.{}: expected a string", where_, name);
    std::string s = v.get<std::string>();
    if (!allow_empty && s.empty()) GMJIT_EXCHANGE_USAGE("{}.{}: must not be empty", where_, name);
    return s;
  }

  std::string json_text(const char* name) const {
    std::string s = text(name);
    if (!json::accept(s)) GMJIT_EXCHANGE_USAGE("{}.{}: not valid JSON", where_, name);
    return s;
  }

  std::int64_t integer(const char* name) const {
    const json& v = get(name);
    if (!v.is_number_integer()) GMJIT_EXCHANGE_USAGE("{}.{}: expected an integer", where_, name);
    return v.get<std::int64_t>();
  }

  int int32(const char* name) const {
    const std::int64_t v = integer(name);
    if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max()) {
      GMJIT_EXCHANGE_USAGE("{}.{}: {} is out of range", where_, name, v);
    }
    return static_cast<int>(v);
  }

  // null stands for NaN, which JSON cannot spell.
  double real(const char* name) const {
    const json& v = get(name);
    if (v.is_null()) return std::numeric_limits<double>::quiet_NaN();
    if (!v.is_number()) GMJIT_EXCHANGE_USAGE("{}.{}: expected a number or null", where_, name);
    return v.get<double>();
  }

  bool has(const char* name) const { return object_.contains(name); }

 private:
  const json& object_;
  std::string where_;
};

const json& array_field(const json& root, const char* name, bool required) {
  static const json kEmpty = json::array();
  const auto it = root.find(name);
  if (it == root.end()) {
    if (required) GMJIT_EXCHANGE_USAGE("missing {}", name);
    return kEmpty;
  }
  if (!it->is_array()) GMJIT_EXCHANGE_USAGE("{}: expected an array", name);
  return *it;
}

std::string item(const char* array, std::size_t index) {
  return fmt::format("{}[{}]", array, index);
}

Document validate(const json& root, const ImportOptions& options) {
  if (!root.is_object()) GMJIT_EXCHANGE_USAGE("the document is not a JSON object");
  const auto format = root.find("format");
  if (format == root.end() || !format->is_string() || format->get<std::string>() != kFormat) {
    GMJIT_EXCHANGE_USAGE("format: expected \"{}\", found {}", kFormat,
                         format == root.end() ? std::string("nothing") : format->dump());
  }
  const auto version = root.find("version");
  if (version == root.end() || !version->is_number_integer() ||
      version->get<std::int64_t>() != kFormatVersion) {
    GMJIT_EXCHANGE_USAGE("version: unsupported export version {} (this library reads {})",
                         version == root.end() ? std::string("(missing)") : version->dump(),
                         kFormatVersion);
  }
  auto known = [&](const std::string& kernel, const std::string& where) {
    if (options.known_kernel && !options.known_kernel(kernel)) {
      GMJIT_EXCHANGE_USAGE("{}: unknown kernel '{}'", where, kernel);
    }
  };

  Document doc;
  std::set<std::string> device_keys;
  const json& devices = array_field(root, "devices", true);
  for (std::size_t i = 0; i < devices.size(); ++i) {
    const Fields f(devices[i], item("devices", i));
    DeviceRow row;
    row.record = {f.text("key", false), f.text("name"), f.text("arch"),
                  f.json_text("fingerprint_json")};
    row.first_seen = f.integer("first_seen");
    row.last_seen = f.integer("last_seen");
    device_keys.insert(row.record.key);
    doc.devices.push_back(std::move(row));
  }
  const json& kernels = array_field(root, "kernels", true);
  for (std::size_t i = 0; i < kernels.size(); ++i) {
    const Fields f(kernels[i], item("kernels", i));
    doc.kernels.emplace_back(f.text("name", false), f.text("template_hash"));
    known(doc.kernels.back().first, item("kernels", i));
  }
  std::set<std::string> problem_keys;
  const json& problems = array_field(root, "problems", true);
  for (std::size_t i = 0; i < problems.size(); ++i) {
    const Fields f(problems[i], item("problems", i));
    ProblemRecord p{f.text("key", false), f.text("kernel", false), f.text("template_hash"),
                    f.text("dtype"),      f.text("layout"),        f.json_text("shape_json")};
    known(p.kernel, item("problems", i));
    problem_keys.insert(p.key);
    doc.problems.push_back(std::move(p));
  }
  const json& trials = array_field(root, "trials", true);
  for (std::size_t i = 0; i < trials.size(); ++i) {
    const std::string where = item("trials", i);
    const Fields f(trials[i], where);
    TrialRow row;
    row.device = f.text("device", false);
    if (device_keys.count(row.device) == 0) {
      GMJIT_EXCHANGE_USAGE("{}.device: '{}' is not among devices", where, row.device);
    }
    row.problem = f.text("problem", false);
    if (problem_keys.count(row.problem) == 0) {
      GMJIT_EXCHANGE_USAGE("{}.problem: '{}' is not among problems", where, row.problem);
    }
    TrialRecord& t = row.record;
    t.config_json = f.json_text("config_json");
    t.status = f.text("status");
    if (std::find(kStatuses.begin(), kStatuses.end(), t.status) == kStatuses.end()) {
      GMJIT_EXCHANGE_USAGE("{}.status: unknown status '{}'", where, t.status);
    }
    t.median_ms = f.real("median_ms");
    t.spread = f.real("spread");
    t.repetitions = f.int32("repetitions");
    t.verify_error = f.real("verify_error");
    t.compile_ms = f.real("compile_ms");
    t.registers = f.int32("registers");
    t.spill_bytes = f.int32("spill_bytes");
    t.shared_bytes = f.int32("shared_bytes");
    t.detail = f.text("detail");
    row.tuned_at = f.integer("tuned_at");
    row.library_version = f.text("library_version");
    row.occurrence = f.has("occurrence") ? f.integer("occurrence") : 0;
    doc.trials.push_back(std::move(row));
  }
  const json& winners = array_field(root, "winners", true);
  for (std::size_t i = 0; i < winners.size(); ++i) {
    const std::string where = item("winners", i);
    const Fields f(winners[i], where);
    WinnerRow row;
    row.device = f.text("device", false);
    row.problem = f.text("problem", false);
    const std::int64_t trial = f.integer("trial");
    if (trial < 0 || static_cast<std::uint64_t>(trial) >= doc.trials.size()) {
      GMJIT_EXCHANGE_USAGE("{}.trial: {} is not an index into trials ({} trials)", where, trial,
                           doc.trials.size());
    }
    row.trial = static_cast<std::size_t>(trial);
    const TrialRow& t = doc.trials[row.trial];
    if (t.device != row.device || t.problem != row.problem) {
      GMJIT_EXCHANGE_USAGE("{}: trial {} belongs to another device or problem", where, trial);
    }
    if (t.record.status != "ok") {
      GMJIT_EXCHANGE_USAGE("{}: trial {} has status '{}'; only an 'ok' trial can win", where, trial,
                           t.record.status);
    }
    row.trial_count = f.integer("trial_count");
    row.tuned_at = f.integer("tuned_at");
    row.library_version = f.text("library_version");
    doc.winners.push_back(std::move(row));
  }
  const json& binaries = array_field(root, "binaries", false);
  for (std::size_t i = 0; i < binaries.size(); ++i) {
    const std::string where = item("binaries", i);
    const Fields f(binaries[i], where);
    BinaryRow row;
    BinaryRecord& b = row.record;
    b.compile_key = f.text("compile_key", false);
    b.kernel = f.text("kernel");
    b.arch = f.text("arch");
    auto cubin = base64_decode(f.text("cubin_base64"));
    if (!cubin) GMJIT_EXCHANGE_USAGE("{}.cubin_base64: not valid base64", where);
    b.cubin = std::move(*cubin);
    b.ptx = f.text("ptx");
    b.resources_json = f.text("resources_json");
    b.checksum = f.text("checksum");
    b.last_used = f.integer("last_used");
    row.created_at = f.integer("created_at");
    doc.binaries.push_back(std::move(row));
  }
  return doc;
}

// ---------------------------------------------------------------------------------------------
// Reading a cache into a document

// A read snapshot, so that an export is consistent while tuners keep writing.
class ReadTransaction {
 public:
  explicit ReadTransaction(Connection& connection) : connection_(connection) {
    connection_.exec("BEGIN");
  }
  ReadTransaction(const ReadTransaction&) = delete;
  ReadTransaction& operator=(const ReadTransaction&) = delete;
  ~ReadTransaction() {
    if (sqlite3_get_autocommit(connection_.handle()) == 0) {
      sqlite3_exec(connection_.handle(), "ROLLBACK", nullptr, nullptr, nullptr);
    }
  }

 private:
  Connection& connection_;
};

json real_or_null(const Statement& s, int index) {
  if (s.column_is_null(index)) return nullptr;
  return s.column_double(index);
}

std::int64_t schema_version(sqlite3* db) {
  Statement s(db, "PRAGMA user_version");
  return s.step() ? s.column_int64(0) : 0;
}

json read_document(Connection& connection, bool with_binaries) {
  sqlite3* db = connection.handle();
  ReadTransaction snapshot(connection);
  const std::int64_t version = schema_version(db);
  json doc = {{"format", kFormat}, {"version", kFormatVersion}};

  json devices = json::array();
  {
    Statement s(db,
                "SELECT key, name, arch, fingerprint_json, first_seen, last_seen FROM devices "
                "ORDER BY id");
    while (s.step()) {
      devices.push_back({{"key", s.column_text(0)},
                         {"name", s.column_text(1)},
                         {"arch", s.column_text(2)},
                         {"fingerprint_json", s.column_text(3)},
                         {"first_seen", s.column_int64(4)},
                         {"last_seen", s.column_int64(5)}});
    }
  }
  json kernels = json::array();
  {
    Statement s(db, "SELECT name, template_hash FROM kernels ORDER BY id");
    while (s.step()) {
      kernels.push_back({{"name", s.column_text(0)}, {"template_hash", s.column_text(1)}});
    }
  }
  json problems = json::array();
  {
    Statement s(db,
                "SELECT p.key, k.name, k.template_hash, p.dtype, p.layout, p.shape_json "
                "FROM problems p JOIN kernels k ON k.id = p.kernel_id ORDER BY p.id");
    while (s.step()) {
      problems.push_back({{"key", s.column_text(0)},
                          {"kernel", s.column_text(1)},
                          {"template_hash", s.column_text(2)},
                          {"dtype", s.column_text(3)},
                          {"layout", s.column_text(4)},
                          {"shape_json", s.column_text(5)}});
    }
  }
  json trials = json::array();
  std::map<std::int64_t, std::size_t> trial_index;
  {
    // Schema 1 has no occurrence column; numbering identical trials the way migration 2 does
    // gives them the identity they would have after an upgrade.
    const char* occurrence =
        version >= 2 ? "t.occurrence"
                     : "row_number() OVER (PARTITION BY t.device_id, t.problem_id, "
                       "t.config_json, t.status, ifnull(t.median_ms, 'NaN'), t.tuned_at, "
                       "t.library_version ORDER BY t.id) - 1";
    Statement s(
        db, fmt::format("SELECT t.id, d.key, p.key, t.config_json, t.status, t.median_ms, "
                        "t.spread, t.repetitions, t.verify_error, t.compile_ms, t.registers, "
                        "t.spill_bytes, t.shared_bytes, t.detail, t.tuned_at, t.library_version, "
                        "{} FROM trials t JOIN devices d ON d.id = t.device_id "
                        "JOIN problems p ON p.id = t.problem_id ORDER BY t.id",
                        occurrence));
    while (s.step()) {
      trial_index.emplace(s.column_int64(0), trials.size());
      trials.push_back({{"device", s.column_text(1)},
                        {"problem", s.column_text(2)},
                        {"config_json", s.column_text(3)},
                        {"status", s.column_text(4)},
                        {"median_ms", real_or_null(s, 5)},
                        {"spread", real_or_null(s, 6)},
                        {"repetitions", s.column_int64(7)},
                        {"verify_error", real_or_null(s, 8)},
                        {"compile_ms", real_or_null(s, 9)},
                        {"registers", s.column_int64(10)},
                        {"spill_bytes", s.column_int64(11)},
                        {"shared_bytes", s.column_int64(12)},
                        {"detail", s.column_text(13)},
                        {"tuned_at", s.column_int64(14)},
                        {"library_version", s.column_text(15)},
                        {"occurrence", s.column_int64(16)}});
    }
  }
  json winners = json::array();
  {
    Statement s(db,
                "SELECT d.key, p.key, w.trial_id, w.trial_count, w.tuned_at, w.library_version "
                "FROM winners w JOIN devices d ON d.id = w.device_id "
                "JOIN problems p ON p.id = w.problem_id ORDER BY d.key, p.key");
    while (s.step()) {
      const auto it = trial_index.find(s.column_int64(2));
      if (it == trial_index.end()) {
        // Only a damaged cache has such a winner (verify reports it); it cannot travel.
        detail::logger().warn("export: winner of device {} problem {} has no trial; skipped",
                              s.column_text(0), s.column_text(1));
        continue;
      }
      winners.push_back({{"device", s.column_text(0)},
                         {"problem", s.column_text(1)},
                         {"trial", it->second},
                         {"trial_count", s.column_int64(3)},
                         {"tuned_at", s.column_int64(4)},
                         {"library_version", s.column_text(5)}});
    }
  }
  doc["devices"] = std::move(devices);
  doc["kernels"] = std::move(kernels);
  doc["problems"] = std::move(problems);
  doc["trials"] = std::move(trials);
  doc["winners"] = std::move(winners);
  if (with_binaries) {
    json binaries = json::array();
    if (version >= 2) {
      Statement s(db,
                  "SELECT compile_key, kernel, arch, cubin, ptx, resources_json, checksum, "
                  "created_at, last_used FROM binaries ORDER BY compile_key");
      while (s.step()) {
        binaries.push_back({{"compile_key", s.column_text(0)},
                            {"kernel", s.column_text(1)},
                            {"arch", s.column_text(2)},
                            {"cubin_base64", base64_encode(s.column_blob(3))},
                            {"ptx", s.column_text(4)},
                            {"resources_json", s.column_text(5)},
                            {"checksum", s.column_text(6)},
                            {"created_at", s.column_int64(7)},
                            {"last_used", s.column_int64(8)}});
      }
    }
    doc["binaries"] = std::move(binaries);
  }
  return doc;
}

// ---------------------------------------------------------------------------------------------
// Applying a document

bool faster(double candidate, double current) {
  if (std::isnan(candidate)) return false;
  return std::isnan(current) || candidate < current;
}

void apply(Store& store, const Document& doc, const ImportOptions& options, ImportResult& result) {
  auto query = [&](const char* sql) -> Statement& { return StoreAccess::statement(store, sql); };
  // Resets the statement however the block is left, as Store's own queries do.
  struct Reset {
    Statement& s;
    ~Reset() { s.reset(); }
  };

  std::map<std::string, std::int64_t> device_ids;
  for (const DeviceRow& d : doc.devices) {
    Statement& s = query(
        "INSERT INTO devices (key, name, arch, fingerprint_json, first_seen, last_seen) "
        "VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (key) DO UPDATE SET "
        "first_seen = min(first_seen, excluded.first_seen), "
        "last_seen = max(last_seen, excluded.last_seen) RETURNING id");
    Reset reset{s};
    s.bind(1, d.record.key);
    s.bind(2, d.record.name);
    s.bind(3, d.record.arch);
    s.bind(4, d.record.fingerprint_json);
    s.bind(5, d.first_seen);
    s.bind(6, d.last_seen);
    if (s.step()) device_ids[d.record.key] = s.column_int64(0);
    while (s.step()) {
    }
  }
  auto kernel_id = [&](const std::string& name, const std::string& template_hash) {
    Statement& s = query(
        "INSERT INTO kernels (name, template_hash) VALUES (?1, ?2) "
        "ON CONFLICT (name, template_hash) DO UPDATE SET name = excluded.name RETURNING id");
    Reset reset{s};
    s.bind(1, name);
    s.bind(2, template_hash);
    const std::int64_t id = s.step() ? s.column_int64(0) : 0;
    while (s.step()) {
    }
    return id;
  };
  for (const auto& [name, template_hash] : doc.kernels) kernel_id(name, template_hash);
  std::map<std::string, std::int64_t> problem_ids;
  for (const ProblemRecord& p : doc.problems) {
    const std::int64_t kid = kernel_id(p.kernel, p.template_hash);
    // A problem key hashes kernel, template, dtype, layout and shape: an existing row is the
    // same problem and stays as it is.
    Statement& s = query(
        "INSERT INTO problems (key, kernel_id, dtype, layout, shape_json) "
        "VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (key) DO UPDATE SET key = excluded.key "
        "RETURNING id");
    Reset reset{s};
    s.bind(1, p.key);
    s.bind(2, kid);
    s.bind(3, p.dtype);
    s.bind(4, p.layout);
    s.bind(5, p.shape_json);
    if (s.step()) problem_ids[p.key] = s.column_int64(0);
    while (s.step()) {
    }
  }

  std::set<std::size_t> winning_trials;
  for (const WinnerRow& w : doc.winners) winning_trials.insert(w.trial);
  std::vector<std::int64_t> trial_ids(doc.trials.size(), 0);
  for (std::size_t i = 0; i < doc.trials.size(); ++i) {
    const TrialRow& row = doc.trials[i];
    const TrialRecord& t = row.record;
    const std::int64_t did = device_ids.at(row.device);
    const std::int64_t pid = problem_ids.at(row.problem);
    {
      Statement& s = query(
          "INSERT INTO trials (device_id, problem_id, config_json, status, median_ms, spread, "
          "repetitions, verify_error, compile_ms, registers, spill_bytes, shared_bytes, detail, "
          "tuned_at, library_version, occurrence) "
          "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16) "
          "ON CONFLICT DO NOTHING RETURNING id");
      Reset reset{s};
      s.bind(1, did);
      s.bind(2, pid);
      bind_trial(s, t);
      s.bind(14, row.tuned_at);
      s.bind(15, row.library_version);
      s.bind(16, row.occurrence);
      if (s.step()) {
        trial_ids[i] = s.column_int64(0);
        ++result.trials_added;
      }
      while (s.step()) {
      }
    }
    if (trial_ids[i] == 0 && winning_trials.count(i) != 0) {
      Statement& s = query(
          "SELECT id FROM trials WHERE device_id = ?1 AND problem_id = ?2 AND config_json = ?3 "
          "AND status = ?4 AND ifnull(median_ms, 'NaN') = ifnull(?5, 'NaN') AND tuned_at = ?6 "
          "AND library_version = ?7 AND occurrence = ?8");
      Reset reset{s};
      s.bind(1, did);
      s.bind(2, pid);
      s.bind(3, t.config_json);
      s.bind(4, t.status);
      s.bind(5, t.median_ms);
      s.bind(6, row.tuned_at);
      s.bind(7, row.library_version);
      s.bind(8, row.occurrence);
      if (s.step()) trial_ids[i] = s.column_int64(0);
      while (s.step()) {
      }
    }
  }

  for (const WinnerRow& w : doc.winners) {
    const std::int64_t did = device_ids.at(w.device);
    const std::int64_t pid = problem_ids.at(w.problem);
    const std::int64_t trial_id = trial_ids[w.trial];
    if (trial_id == 0) {
      GMJIT_EXCHANGE_CACHE(SQLITE_INTERNAL, "import", "imported trial {} not found after insert",
                           w.trial);
    }
    bool replace = true;
    {
      Statement& s = query(
          "SELECT w.trial_id, t.median_ms, t.status FROM winners w "
          "JOIN trials t ON t.id = w.trial_id WHERE w.device_id = ?1 AND w.problem_id = ?2");
      Reset reset{s};
      s.bind(1, did);
      s.bind(2, pid);
      if (s.step()) {
        // A current winner that is not 'ok' could only come from a damaged cache; any verified
        // import beats it.
        const bool current_ok = s.column_text(2) == "ok";
        replace = s.column_int64(0) != trial_id &&
                  (!current_ok || faster(doc.trials[w.trial].record.median_ms, s.column_double(1)));
      }
      while (s.step()) {
      }
    }
    if (!replace) continue;
    Statement& s = query(
        "INSERT INTO winners (device_id, problem_id, trial_id, trial_count, tuned_at, "
        "library_version) VALUES (?1, ?2, ?3, ?4, ?5, ?6) "
        "ON CONFLICT (device_id, problem_id) DO UPDATE SET trial_id = excluded.trial_id, "
        "trial_count = excluded.trial_count, tuned_at = excluded.tuned_at, "
        "library_version = excluded.library_version");
    Reset reset{s};
    s.bind(1, did);
    s.bind(2, pid);
    s.bind(3, trial_id);
    s.bind(4, w.trial_count);
    s.bind(5, w.tuned_at);
    s.bind(6, w.library_version);
    while (s.step()) {
    }
    ++result.winners_changed;
  }

  if (!options.trust_binaries) {
    if (!doc.binaries.empty()) {
      detail::logger().warn(
          "tuning cache {}: ignored {} imported binaries; binaries are kept only when trusted",
          store.path().string(), doc.binaries.size());
    }
    result.binaries_ignored += doc.binaries.size();
    return;
  }
  for (const BinaryRow& row : doc.binaries) {
    const BinaryRecord& b = row.record;
    const std::string actual = binary_checksum(b.cubin);
    if (actual != b.checksum) {
      detail::logger().warn("tuning cache {}: imported binary {} fails its checksum; ignored",
                            store.path().string(), b.compile_key);
      ++result.binaries_ignored;
      continue;
    }
    if (options.accept_binary && !options.accept_binary(b)) {
      detail::logger().warn("tuning cache {}: imported binary {} was not accepted; ignored",
                            store.path().string(), b.compile_key);
      ++result.binaries_ignored;
      continue;
    }
    Statement& s = query(
        "INSERT INTO binaries (compile_key, kernel, arch, bytes, checksum, created_at, "
        "last_used, resources_json, ptx, cubin) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) "
        "ON CONFLICT DO NOTHING RETURNING rowid");
    Reset reset{s};
    s.bind(1, b.compile_key);
    s.bind(2, b.kernel);
    s.bind(3, b.arch);
    s.bind(4, static_cast<std::int64_t>(b.cubin.size() + b.ptx.size()));
    s.bind(5, actual);
    s.bind(6, row.created_at);
    s.bind(7, b.last_used);
    s.bind(8, b.resources_json);
    s.bind(9, b.ptx);
    s.bind_blob(10, b.cubin);
    if (s.step()) {
      ++result.binaries_added;
    } else {
      ++result.binaries_ignored;  // the cache already has a binary for this key
    }
    while (s.step()) {
    }
  }
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    GMJIT_EXCHANGE_USAGE("cannot read import file {}: {}", path.string(), std::strerror(errno));
  }
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Opens another cache without writing to it, refusing anything that is not a gmjit cache this
// library can read.
Connection open_source(const fs::path& path) {
  if (!fs::is_regular_file(path)) {
    GMJIT_EXCHANGE_CACHE(0, "merge", "merge source {} is not a regular file", path.string());
  }
  Connection connection(path, Connection::Access::read_only);
  std::int64_t application_id = 0;
  std::int64_t version = 0;
  try {
    Statement s(connection.handle(),
                "SELECT (SELECT application_id FROM pragma_application_id), "
                "(SELECT user_version FROM pragma_user_version)");
    if (s.step()) {
      application_id = s.column_int64(0);
      version = s.column_int64(1);
    }
  } catch (const Error& e) {
    GMJIT_EXCHANGE_CACHE(e.code(), "merge", "cannot read merge source {}: {}", path.string(),
                         sqlite3_errstr(e.code()));
  }
  if (application_id != Store::kApplicationId || version < 1) {
    GMJIT_EXCHANGE_CACHE(0, "merge", "merge source {} is not a gmjit cache (application_id {})",
                         path.string(), application_id);
  }
  if (version > Store::kSchemaVersion) {
    GMJIT_EXCHANGE_CACHE(0, "merge",
                         "merge source {} has schema version {}, newer than this library's {}",
                         path.string(), version, Store::kSchemaVersion);
  }
  return connection;
}

}  // namespace

void export_json(Store& store, const fs::path& out, bool with_binaries) {
  const std::string text = read_document(StoreAccess::connection(store), with_binaries)
                               .dump(1, ' ', false, json::error_handler_t::replace);
  const fs::path dir = out.has_parent_path() ? out.parent_path() : fs::path(".");
  std::string temp = (dir / (out.filename().string() + ".tmp-XXXXXX")).string();
  const int fd = ::mkstemp(temp.data());
  if (fd < 0) {
    const int err = errno;
    GMJIT_EXCHANGE_CACHE(err, "mkstemp", "cannot create a file next to {}: {}", out.string(),
                         std::strerror(err));
  }
  auto fail = [&](const char* call) {
    const int err = errno;
    ::close(fd);
    ::unlink(temp.c_str());
    GMJIT_EXCHANGE_CACHE(err, call, "cannot write export {}: {}", out.string(), std::strerror(err));
  };
  for (std::size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("write");
    }
    done += static_cast<std::size_t>(n);
  }
  // Durable before the rename, or a crash could leave an empty file under the final name.
  if (::fsync(fd) != 0) fail("fsync");
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    GMJIT_EXCHANGE_CACHE(err, "close", "cannot write export {}: {}", out.string(),
                         std::strerror(err));
  }
  if (::rename(temp.c_str(), out.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    GMJIT_EXCHANGE_CACHE(err, "rename", "cannot move export into place at {}: {}", out.string(),
                         std::strerror(err));
  }
}

ImportResult import_json(Store& store, const fs::path& in, const ImportOptions& options) {
  json root;
  try {
    root = json::parse(read_file(in));
  } catch (const json::parse_error& e) {
    // nlohmann's message names the byte where parsing stopped, which also tells a truncated file.
    GMJIT_EXCHANGE_USAGE("{}: not valid JSON: {}", in.string(), e.what());
  }
  Document doc;
  try {
    doc = validate(root, options);
  } catch (const Error& e) {
    GMJIT_EXCHANGE_USAGE("{}: {}", in.string(), e.message());
  }
  ImportResult result;
  Transaction tx(StoreAccess::connection(store));
  apply(store, doc, options, result);
  tx.commit();
  return result;
}

ImportResult merge_into(Store& target, const std::vector<fs::path>& sources,
                        const ImportOptions& options) {
  std::vector<Document> docs;
  std::size_t untrusted_binaries = 0;
  for (const fs::path& source : sources) {
    Connection connection = open_source(source);
    // Untrusted binaries would only be counted; reading and encoding them could take gigabytes.
    const json root = read_document(connection, options.trust_binaries);
    if (!options.trust_binaries && schema_version(connection.handle()) >= 2) {
      Statement s(connection.handle(), "SELECT count(*) FROM binaries");
      if (s.step()) untrusted_binaries += static_cast<std::size_t>(s.column_int64(0));
    }
    try {
      docs.push_back(validate(root, options));
    } catch (const Error& e) {
      GMJIT_EXCHANGE_USAGE("{}: {}", source.string(), e.message());
    }
  }
  ImportResult result;
  Transaction tx(StoreAccess::connection(target));
  for (const Document& doc : docs) apply(target, doc, options, result);
  tx.commit();
  if (untrusted_binaries > 0) {
    detail::logger().warn(
        "tuning cache {}: ignored {} binaries of the merged caches; binaries are kept only when "
        "trusted",
        target.path().string(), untrusted_binaries);
    result.binaries_ignored += untrusted_binaries;
  }
  return result;
}

}  // namespace gmjit::cache
