#include "cache/exchange.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "cache/binaries.hpp"
#include "cache/fail.hpp"
#include "cache/rules.hpp"
#include "core/log.hpp"
#include "gmjit/error.hpp"

namespace gmjit::cache {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr std::string_view kFormat = "gmjit-cache-export";
constexpr int kFormatVersion = 1;

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
// The document's fields, each named once for reading and writing

// What a reader demands of a text field beyond being a string.
enum class Text { any, non_empty, json };

template <class Record, class T>
struct Field {
  const char* name;
  T Record::*member;
  Text text = Text::any;
};

template <class Record, class T>
constexpr Field<Record, T> field(const char* name, T Record::*member, Text text = Text::any) {
  return {name, member, text};
}

constexpr auto kDeviceFields =
    std::make_tuple(field("key", &DeviceRecord::key, Text::non_empty),
                    field("name", &DeviceRecord::name), field("arch", &DeviceRecord::arch),
                    field("fingerprint_json", &DeviceRecord::fingerprint_json, Text::json));
constexpr auto kDeviceRowFields = std::make_tuple(field("first_seen", &CacheRows::Device::first_seen),
                                                  field("last_seen", &CacheRows::Device::last_seen));
constexpr auto kKernelFields =
    std::make_tuple(field("name", &CacheRows::Kernel::name, Text::non_empty),
                    field("template_hash", &CacheRows::Kernel::template_hash));
constexpr auto kProblemFields = std::make_tuple(
    field("key", &ProblemRecord::key, Text::non_empty),
    field("kernel", &ProblemRecord::kernel, Text::non_empty),
    field("template_hash", &ProblemRecord::template_hash), field("dtype", &ProblemRecord::dtype),
    field("layout", &ProblemRecord::layout), field("shape_json", &ProblemRecord::shape_json, Text::json));
constexpr auto kTrialRowFields =
    std::make_tuple(field("device", &CacheRows::Trial::device_key, Text::non_empty),
                    field("problem", &CacheRows::Trial::problem_key, Text::non_empty),
                    field("tuned_at", &CacheRows::Trial::tuned_at),
                    field("library_version", &CacheRows::Trial::library_version));
constexpr auto kTrialFields = std::make_tuple(
    field("config_json", &TrialRecord::config_json, Text::json), field("status", &TrialRecord::status),
    field("median_ms", &TrialRecord::median_ms), field("spread", &TrialRecord::spread),
    field("repetitions", &TrialRecord::repetitions), field("verify_error", &TrialRecord::verify_error),
    field("compile_ms", &TrialRecord::compile_ms), field("registers", &TrialRecord::registers),
    field("spill_bytes", &TrialRecord::spill_bytes), field("shared_bytes", &TrialRecord::shared_bytes),
    field("detail", &TrialRecord::detail));
// "trial" is written and checked apart: it is an index into the document's trials.
constexpr auto kWinnerFields =
    std::make_tuple(field("device", &CacheRows::Winner::device_key, Text::non_empty),
                    field("problem", &CacheRows::Winner::problem_key, Text::non_empty),
                    field("trial_count", &CacheRows::Winner::trial_count),
                    field("tuned_at", &CacheRows::Winner::tuned_at),
                    field("library_version", &CacheRows::Winner::library_version));
constexpr auto kBinaryFields = std::make_tuple(
    field("compile_key", &BinaryRecord::compile_key, Text::non_empty),
    field("kernel", &BinaryRecord::kernel), field("arch", &BinaryRecord::arch),
    field("cubin_base64", &BinaryRecord::cubin), field("ptx", &BinaryRecord::ptx),
    field("resources_json", &BinaryRecord::resources_json), field("checksum", &BinaryRecord::checksum),
    field("last_used", &BinaryRecord::last_used));
constexpr auto kBinaryRowFields = std::make_tuple(field("created_at", &CacheRows::Binary::created_at));

// JSON cannot spell NaN; null stands for it.
json value_of(double v) { return std::isnan(v) ? json(nullptr) : json(v); }
json value_of(const std::vector<char>& bytes) { return base64_encode(bytes); }
template <class T>
json value_of(const T& v) {
  return v;
}

template <class Record, class... Types>
void write_fields(json& object, const Record& record,
                  const std::tuple<Field<Record, Types>...>& fields) {
  std::apply([&](const auto&... f) { ((object[f.name] = value_of(record.*(f.member))), ...); },
             fields);
}

// Reads the fields of one object of the document; every failure names where it is ("trials[3]:
// missing median_ms"), in one line.
class Reader {
 public:
  Reader(const json& object, std::string where) : object_(object), where_(std::move(where)) {
    if (!object_.is_object()) GMJIT_USAGE_FAIL("{}: expected an object", where_);
  }

  const std::string& where() const { return where_; }
  bool has(const char* name) const { return object_.contains(name); }

  const json& get(const char* name) const {
    const auto it = object_.find(name);
    if (it == object_.end()) GMJIT_USAGE_FAIL("{}: missing {}", where_, name);
    return *it;
  }

  void read(const char* name, Text rule, std::string& out) const {
    const json& v = get(name);
    if (!v.is_string()) GMJIT_USAGE_FAIL("{}.{}: expected a string", where_, name);
    out = v.get<std::string>();
    if (rule == Text::non_empty && out.empty()) {
      GMJIT_USAGE_FAIL("{}.{}: must not be empty", where_, name);
    }
    if (rule == Text::json && !json::accept(out)) {
      GMJIT_USAGE_FAIL("{}.{}: not valid JSON", where_, name);
    }
  }

  void read(const char* name, Text, std::int64_t& out) const {
    const json& v = get(name);
    if (!v.is_number_integer()) GMJIT_USAGE_FAIL("{}.{}: expected an integer", where_, name);
    out = v.get<std::int64_t>();
  }

  void read(const char* name, Text, int& out) const {
    std::int64_t v = 0;
    read(name, Text::any, v);
    if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max()) {
      GMJIT_USAGE_FAIL("{}.{}: {} is out of range", where_, name, v);
    }
    out = static_cast<int>(v);
  }

  void read(const char* name, Text, double& out) const {
    const json& v = get(name);
    if (v.is_null()) {
      out = std::numeric_limits<double>::quiet_NaN();
      return;
    }
    if (!v.is_number()) GMJIT_USAGE_FAIL("{}.{}: expected a number or null", where_, name);
    out = v.get<double>();
  }

  void read(const char* name, Text, std::vector<char>& out) const {
    std::string text;
    read(name, Text::any, text);
    auto bytes = base64_decode(text);
    if (!bytes) GMJIT_USAGE_FAIL("{}.{}: not valid base64", where_, name);
    out = std::move(*bytes);
  }

  template <class Record, class... Types>
  void read_fields(Record& record, const std::tuple<Field<Record, Types>...>& fields) const {
    std::apply([&](const auto&... f) { (read(f.name, f.text, record.*(f.member)), ...); }, fields);
  }

 private:
  const json& object_;
  std::string where_;
};

// Reads each object of the array `name` into a row; `required` says whether it may be absent.
template <class Row, class ReadRow>
std::vector<Row> read_array(const json& root, const char* name, bool required, ReadRow read_row) {
  std::vector<Row> rows;
  const auto it = root.find(name);
  if (it == root.end()) {
    if (required) GMJIT_USAGE_FAIL("missing {}", name);
    return rows;
  }
  if (!it->is_array()) GMJIT_USAGE_FAIL("{}: expected an array", name);
  for (std::size_t i = 0; i < it->size(); ++i) {
    const Reader reader((*it)[i], fmt::format("{}[{}]", name, i));
    read_row(reader, rows.emplace_back());
  }
  return rows;
}

template <class Row, class WriteRow>
json write_array(const std::vector<Row>& rows, WriteRow write_row) {
  json array = json::array();
  for (const Row& row : rows) {
    json object = json::object();
    write_row(object, row);
    array.push_back(std::move(object));
  }
  return array;
}

// ---------------------------------------------------------------------------------------------
// The document

json to_document(const CacheRows& rows, bool with_binaries) {
  json doc = {{"format", kFormat}, {"version", kFormatVersion}};
  doc["devices"] = write_array(rows.devices, [](json& o, const CacheRows::Device& d) {
    write_fields(o, d.record, kDeviceFields);
    write_fields(o, d, kDeviceRowFields);
  });
  doc["kernels"] = write_array(
      rows.kernels, [](json& o, const CacheRows::Kernel& k) { write_fields(o, k, kKernelFields); });
  doc["problems"] = write_array(
      rows.problems, [](json& o, const ProblemRecord& p) { write_fields(o, p, kProblemFields); });
  doc["trials"] = write_array(rows.trials, [](json& o, const CacheRows::Trial& t) {
    write_fields(o, t, kTrialRowFields);
    write_fields(o, t.record, kTrialFields);
    o["occurrence"] = t.occurrence;
  });
  doc["winners"] = write_array(rows.winners, [](json& o, const CacheRows::Winner& w) {
    write_fields(o, w, kWinnerFields);
    o["trial"] = w.trial;
  });
  if (with_binaries) {
    doc["binaries"] = write_array(rows.binaries, [](json& o, const CacheRows::Binary& b) {
      write_fields(o, b.record, kBinaryFields);
      write_fields(o, b, kBinaryRowFields);
    });
  }
  return doc;
}

// JSON types and indices here; every other rule in check_rows, which verify shares.
CacheRows validate(const json& root) {
  if (!root.is_object()) GMJIT_USAGE_FAIL("the document is not a JSON object");
  const auto format = root.find("format");
  if (format == root.end() || !format->is_string() || format->get<std::string>() != kFormat) {
    GMJIT_USAGE_FAIL("format: expected \"{}\", found {}", kFormat,
                     format == root.end() ? std::string("nothing") : format->dump());
  }
  const auto version = root.find("version");
  if (version == root.end() || !version->is_number_integer() ||
      version->get<std::int64_t>() != kFormatVersion) {
    GMJIT_USAGE_FAIL("version: unsupported export version {} (this library reads {})",
                     version == root.end() ? std::string("(missing)") : version->dump(),
                     kFormatVersion);
  }
  CacheRows rows;
  rows.devices = read_array<CacheRows::Device>(root, "devices", true, [&](const Reader& r, auto& d) {
    r.read_fields(d.record, kDeviceFields);
    r.read_fields(d, kDeviceRowFields);
  });
  rows.kernels = read_array<CacheRows::Kernel>(root, "kernels", true, [&](const Reader& r, auto& k) {
    r.read_fields(k, kKernelFields);
  });
  rows.problems = read_array<ProblemRecord>(root, "problems", true, [&](const Reader& r, auto& p) {
    r.read_fields(p, kProblemFields);
  });
  rows.trials = read_array<CacheRows::Trial>(root, "trials", true, [&](const Reader& r, auto& t) {
    r.read_fields(t, kTrialRowFields);
    r.read_fields(t.record, kTrialFields);
    if (r.has("occurrence")) r.read("occurrence", Text::any, t.occurrence);
  });
  rows.winners = read_array<CacheRows::Winner>(root, "winners", true, [&](const Reader& r, auto& w) {
    r.read_fields(w, kWinnerFields);
    std::int64_t trial = 0;
    r.read("trial", Text::any, trial);
    if (trial < 0 || static_cast<std::uint64_t>(trial) >= rows.trials.size()) {
      GMJIT_USAGE_FAIL("{}.trial: {} is not an index into trials ({} trials)", r.where(), trial,
                       rows.trials.size());
    }
    w.trial = static_cast<std::size_t>(trial);
  });
  rows.binaries = read_array<CacheRows::Binary>(root, "binaries", false, [&](const Reader& r, auto& b) {
    r.read_fields(b.record, kBinaryFields);
    r.read_fields(b, kBinaryRowFields);
  });
  require_valid_rows(rows);
  return rows;
}

// Leaves in rows.binaries only those an import may store, and counts the others as ignored.
void screen_binaries(const Store& store, CacheRows& rows, const ImportOptions& options,
                     ImportResult& result) {
  if (!options.trust_binaries) {
    if (!rows.binaries.empty()) {
      detail::logger().warn(
          "tuning cache {}: ignored {} imported binaries; binaries are kept only when trusted",
          store.path().string(), rows.binaries.size());
    }
    result.binaries_ignored += rows.binaries.size();
    rows.binaries.clear();
    return;
  }
  std::vector<CacheRows::Binary> kept;
  for (CacheRows::Binary& row : rows.binaries) {
    const BinaryRecord& b = row.record;
    std::string refusal;
    if (binary_checksum(b.cubin) != b.checksum) {
      refusal = "fails its checksum";
    } else {
      ImportedBinaryCheck check = check_imported_binary(b);
      if (check.rebuilt) {
        check.rebuilt->last_used = b.last_used;
        row.record = std::move(*check.rebuilt);
        kept.push_back(std::move(row));
        continue;
      }
      refusal = std::move(check.refusal);
    }
    const std::string line = fmt::format("binary {} ({} {}): {}", b.compile_key, b.kernel, b.arch, refusal);
    detail::logger().warn("tuning cache {}: refused imported {}", store.path().string(), line);
    result.binaries_refused.push_back(line);
    ++result.binaries_ignored;
  }
  rows.binaries = std::move(kept);
}

// Store::merge counts what it wrote; the binaries screened out before are added to its result.
ImportResult apply(Store& store, std::vector<CacheRows>& sources, const ImportOptions& options,
                   std::size_t unread_binaries) {
  ImportResult screened;
  for (CacheRows& rows : sources) screen_binaries(store, rows, options, screened);
  ImportResult result = store.merge(sources);
  result.binaries_ignored += screened.binaries_ignored + unread_binaries;
  result.binaries_refused = std::move(screened.binaries_refused);
  return result;
}

// At most kMaxImportFileBytes: the size is checked before anything is read, and the read stops
// past the limit for a file that grows or has no size (a pipe).
std::string read_file(const fs::path& path) {
  std::error_code error;
  if (const auto size = fs::file_size(path, error); !error && size > kMaxImportFileBytes) {
    GMJIT_USAGE_FAIL("{}: {} bytes; an import file may have at most {} (export without binaries, or "
                     "merge the cache files instead)",
                     path.string(), size, kMaxImportFileBytes);
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    GMJIT_USAGE_FAIL("cannot read import file {}: {}", path.string(), std::strerror(errno));
  }
  std::string text;
  char buffer[1 << 16];
  while (in.read(buffer, sizeof buffer) || in.gcount() > 0) {
    text.append(buffer, static_cast<std::size_t>(in.gcount()));
    if (text.size() > kMaxImportFileBytes) {
      GMJIT_USAGE_FAIL("{}: more than {} bytes; an import file may have at most that", path.string(),
                       kMaxImportFileBytes);
    }
  }
  return text;
}

}  // namespace

void export_json(Store& store, const fs::path& out, bool with_binaries) {
  const std::string text = to_document(store.read_rows(with_binaries), with_binaries)
                               .dump(1, ' ', false, json::error_handler_t::replace);
  const fs::path dir = out.has_parent_path() ? out.parent_path() : fs::path(".");
  std::string temp = (dir / (out.filename().string() + ".tmp-XXXXXX")).string();
  const int fd = ::mkstemp(temp.data());
  if (fd < 0) {
    const int err = errno;
    GMJIT_CACHE_FAIL(err, "mkstemp", "cannot create a file next to {}: {}", out.string(),
                         std::strerror(err));
  }
  auto fail = [&](const char* call) {
    const int err = errno;
    ::close(fd);
    ::unlink(temp.c_str());
    GMJIT_CACHE_FAIL(err, call, "cannot write export {}: {}", out.string(), std::strerror(err));
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
    GMJIT_CACHE_FAIL(err, "close", "cannot write export {}: {}", out.string(),
                         std::strerror(err));
  }
  if (::rename(temp.c_str(), out.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    GMJIT_CACHE_FAIL(err, "rename", "cannot move export into place at {}: {}", out.string(),
                         std::strerror(err));
  }
}

ImportResult import_json(Store& store, const fs::path& in, const ImportOptions& options) {
  json root;
  try {
    root = json::parse(read_file(in));
  } catch (const json::parse_error& e) {
    // nlohmann's message names the byte where parsing stopped, which also tells a truncated file.
    GMJIT_USAGE_FAIL("{}: not valid JSON: {}", in.string(), e.what());
  }
  std::vector<CacheRows> sources;
  try {
    sources.push_back(validate(root));
  } catch (const Error& e) {
    GMJIT_USAGE_FAIL("{}: {}", in.string(), e.message());
  }
  return apply(store, sources, options, 0);
}

ImportResult merge_into(Store& target, const std::vector<fs::path>& sources,
                        const ImportOptions& options) {
  std::vector<CacheRows> rows;
  std::size_t untrusted_binaries = 0;
  for (const fs::path& source : sources) {
    if (!fs::is_regular_file(source)) {
      GMJIT_CACHE_FAIL(0, "merge", "merge source {} is not a regular file", source.string());
    }
    Store reader = Store::open_read_only(source, "merge source");
    // Untrusted binaries would only be counted; reading and encoding them could take gigabytes.
    // The rows pass through the document so that a source meets every check an import file does.
    const json doc = to_document(reader.read_rows(options.trust_binaries), options.trust_binaries);
    if (!options.trust_binaries) untrusted_binaries += reader.binary_count();
    try {
      rows.push_back(validate(doc));
    } catch (const Error& e) {
      GMJIT_USAGE_FAIL("{}: {}", source.string(), e.message());
    }
  }
  const ImportResult result = apply(target, rows, options, untrusted_binaries);
  if (untrusted_binaries > 0) {
    detail::logger().warn(
        "tuning cache {}: ignored {} binaries of the merged caches; binaries are kept only when "
        "trusted",
        target.path().string(), untrusted_binaries);
  }
  return result;
}

}  // namespace gmjit::cache
