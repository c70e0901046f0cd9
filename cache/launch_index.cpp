#include "cache/launch_index.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <string_view>
#include <utility>

#include "cache/fail.hpp"
#include "cache/keys.hpp"
#include "codegen/compiler.hpp"
#include "codegen/toolkit.hpp"
#include "core/build_id.hpp"
#include "core/kernel_args.hpp"
#include "core/log.hpp"
#include "gmjit/error.hpp"
#include "templates/registry.hpp"

namespace gmjit::cache {

namespace {

namespace fs = std::filesystem;

// Native byte order throughout: the index never leaves the machine that wrote it (export and
// import carry the SQLite rows); the magic's byte order check refuses a foreign one anyway.
constexpr char kMagic[8] = {'G', 'M', 'J', 'I', 'T', 'L', 'X', '1'};
constexpr std::uint32_t kFormat = 3;  // 3: plans carry the launch's cluster dimensions

struct Header {
  char magic[8];
  std::uint32_t format;
  std::uint32_t byte_order;  // 0x01020304 as written
  std::uint64_t cache_device;
  std::uint64_t cache_inode;
  std::uint64_t tables_offset;
  std::uint64_t tables_bytes;
  std::uint64_t tables_hash;    // XXH3-64 of the tables
  std::uint64_t plan_identity;  // the writer's plan_identity(); 0: no plans
  std::uint64_t header_hash;    // XXH3-64 of every field above
};
static_assert(sizeof(Header) == 72, "the header is read in one pread");

// Who may use an index's plans: the library build (its GNU build-id covers the embedded templates
// and every descriptor's code), the NVRTC that compile keys name, and the compile options the
// environment chooses (GMJIT_LINEINFO). 0 without a build-id.
std::uint64_t plan_identity() {
  static const std::uint64_t identity = [] {
    const std::string& build = detail::library_build_id();
    if (build.empty()) return std::uint64_t{0};
    const auto& nvrtc = codegen::nvrtc_identity();
    const std::string text = fmt::format("{}|nvrtc {}.{} {}|lineinfo {}", build, nvrtc.major, nvrtc.minor,
                                         nvrtc.build_id, codegen::line_info_requested());
    return std::max<std::uint64_t>(1, XXH3_64bits(text.data(), text.size()));
  }();
  return identity;
}

bool plans_allowed_here() { return plan_identity() != 0 && !templates::embedded_headers_replaced(); }

std::uint64_t header_hash(const Header& h) { return XXH3_64bits(&h, offsetof(Header, header_hash)); }

// An index describes one cache file; a replaced or quarantined cache is a new inode.
// An emptied cache (SQLite reads a zero-length file as an empty database) has none.
std::optional<std::pair<std::uint64_t, std::uint64_t>> file_identity(const fs::path& file) {
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0 || st.st_size == 0) return std::nullopt;
  return std::make_pair(static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino));
}

// Length-prefixed fields, in the order the tables list them.
class Writer {
 public:
  void u32(std::uint32_t v) { raw(&v, sizeof(v)); }
  void u64(std::uint64_t v) { raw(&v, sizeof(v)); }
  void text(std::string_view s) {
    u32(static_cast<std::uint32_t>(s.size()));
    bytes_.append(s);
  }
  void assignments(const std::map<std::string, std::int64_t>& values) {
    u32(static_cast<std::uint32_t>(values.size()));
    for (const auto& [key, value] : values) {
      text(key);
      u64(static_cast<std::uint64_t>(value));
    }
  }
  std::string& bytes() { return bytes_; }

 private:
  void raw(const void* p, std::size_t n) { bytes_.append(static_cast<const char*>(p), n); }
  std::string bytes_;
};

// Reads what Writer wrote; any read past the end marks the reader bad and yields zeros, so a
// damaged table (which its checksum already refused) can never read out of bounds.
class Reader {
 public:
  explicit Reader(std::string_view bytes) : rest_(bytes) {}
  bool ok() const { return ok_; }
  std::uint32_t u32() { return fixed<std::uint32_t>(); }
  std::uint64_t u64() { return fixed<std::uint64_t>(); }
  std::string_view text() {
    const std::uint32_t n = u32();
    if (!ok_ || n > rest_.size()) return fail_view();
    const std::string_view s = rest_.substr(0, n);
    rest_.remove_prefix(n);
    return s;
  }
  std::map<std::string, std::int64_t> assignments() {
    std::map<std::string, std::int64_t> values;
    const std::uint32_t n = u32();
    for (std::uint32_t i = 0; ok_ && i < n; ++i) {
      const std::string key(text());
      values[key] = static_cast<std::int64_t>(u64());
    }
    return values;
  }
  void skip_assignments() {
    const std::uint32_t n = u32();
    for (std::uint32_t i = 0; ok_ && i < n; ++i) {
      text();
      u64();
    }
  }

 private:
  template <typename T>
  T fixed() {
    T v{};
    if (!ok_ || rest_.size() < sizeof(T)) {
      fail_view();
      return v;
    }
    std::memcpy(&v, rest_.data(), sizeof(T));
    rest_.remove_prefix(sizeof(T));
    return v;
  }
  std::string_view fail_view() {
    ok_ = false;
    rest_ = {};
    return {};
  }
  std::string_view rest_;
  bool ok_ = true;
};

// Moves `r` past the winners table (count; device, problem, kernel, dtype, shape, config each) to
// the cubins table that follows it.
void skip_winners(Reader& r) {
  const std::uint32_t winners = r.u32();
  for (std::uint32_t i = 0; r.ok() && i < winners; ++i) {
    for (int field = 0; field < 4; ++field) r.text();
    r.skip_assignments();
    r.skip_assignments();
  }
}

// Moves `r` past the cubins table (count; key, lowered name, offset, size, checksum each) to the
// plans table that follows it.
void skip_cubins(Reader& r) {
  const std::uint32_t cubins = r.u32();
  for (std::uint32_t i = 0; r.ok() && i < cubins; ++i) {
    r.text();
    r.text();
    r.u64();
    r.u64();
    r.u64();
  }
}

bool read_exactly(int fd, void* buffer, std::size_t n, std::uint64_t offset) {
  auto* p = static_cast<char*>(buffer);
  while (n > 0) {
    const ssize_t got = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    n -= static_cast<std::size_t>(got);
    offset += static_cast<std::uint64_t>(got);
  }
  return true;
}

bool write_all(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    const ssize_t put = ::write(fd, p, n);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) return false;
    p += put;
    n -= static_cast<std::size_t>(put);
  }
  return true;
}

// The same log2 distance as Store::nearest_winner (shape_distance), on shapes already decoded.
std::optional<double> log2_distance(const Shape& a, const Shape& b) {
  if (a.size() != b.size()) return std::nullopt;
  double sum = 0;
  for (auto ia = a.begin(), ib = b.begin(); ia != a.end(); ++ia, ++ib) {
    if (ia->first != ib->first || ia->second <= 0 || ib->second <= 0) return std::nullopt;
    const double d = std::log2(static_cast<double>(ia->second)) - std::log2(static_cast<double>(ib->second));
    sum += d * d;
  }
  return std::sqrt(sum);
}

class ScopedFd {
 public:
  explicit ScopedFd(int fd) : fd_(fd) {}
  ~ScopedFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

}  // namespace

fs::path launch_index_path(const fs::path& cache_file) {
  fs::path index = cache_file;
  index += ".launch";
  return index;
}

std::optional<LaunchIndex> LaunchIndex::open(const fs::path& cache_file) {
  const auto identity = file_identity(cache_file);
  if (!identity) return std::nullopt;
  const fs::path path = launch_index_path(cache_file);
  ScopedFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (fd.get() < 0) return std::nullopt;
  struct stat st {};
  // The same trust as the cache's: a file someone else could have written is not served from.
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid() ||
      (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    detail::logger().debug("launch index {} is not a private regular file of yours; reading the cache", path.string());
    return std::nullopt;
  }
  Header h{};
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (size < sizeof(Header) || !read_exactly(fd.get(), &h, sizeof(h), 0) ||
      std::memcmp(h.magic, kMagic, sizeof(kMagic)) != 0 || h.format != kFormat || h.byte_order != 0x01020304u ||
      h.header_hash != header_hash(h)) {
    detail::logger().debug("launch index {} is not one this library reads; reading the cache", path.string());
    return std::nullopt;
  }
  if (h.cache_device != identity->first || h.cache_inode != identity->second) {
    detail::logger().debug("launch index {} was written for another {}; reading the cache", path.string(),
                           cache_file.string());
    return std::nullopt;
  }
  if (h.tables_offset < sizeof(Header) || h.tables_offset > size || h.tables_bytes > size - h.tables_offset) {
    return std::nullopt;
  }
  LaunchIndex index;
  index.tables_.resize(h.tables_bytes);
  if (!read_exactly(fd.get(), index.tables_.data(), index.tables_.size(), h.tables_offset) ||
      XXH3_64bits(index.tables_.data(), index.tables_.size()) != h.tables_hash) {
    detail::logger().warn("launch index {} is damaged; reading the cache (the next change to it rewrites the index)",
                          path.string());
    return std::nullopt;
  }
  index.file_size_ = size;
  index.blobs_offset_ = h.tables_offset + h.tables_bytes;
  index.plans_usable_ = h.plan_identity != 0 && h.plan_identity == plan_identity();
  index.fd_ = fd.release();
  return index;
}

LaunchIndex::LaunchIndex(LaunchIndex&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      file_size_(other.file_size_),
      blobs_offset_(other.blobs_offset_),
      plans_usable_(other.plans_usable_),
      tables_(std::move(other.tables_)) {}

LaunchIndex& LaunchIndex::operator=(LaunchIndex&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    file_size_ = other.file_size_;
    blobs_offset_ = other.blobs_offset_;
    plans_usable_ = other.plans_usable_;
    tables_ = std::move(other.tables_);
  }
  return *this;
}

LaunchIndex::~LaunchIndex() {
  if (fd_ >= 0) ::close(fd_);
}

std::size_t LaunchIndex::winner_count() const {
  Reader r(tables_);
  return r.u32();
}

std::size_t LaunchIndex::cubin_count() const {
  Reader r(tables_);
  skip_winners(r);
  return r.ok() ? r.u32() : 0;
}

std::optional<LaunchIndex::Winner> LaunchIndex::find_winner(const std::string& device_key,
                                                            const std::string& problem_key) const {
  Reader r(tables_);
  const std::uint32_t winners = r.u32();
  for (std::uint32_t i = 0; r.ok() && i < winners; ++i) {
    const std::string_view device = r.text(), problem = r.text();
    r.text();  // kernel
    r.text();  // dtype
    if (device != device_key || problem != problem_key) {
      r.skip_assignments();
      r.skip_assignments();
      continue;
    }
    Winner w;
    w.problem_key = problem_key;
    w.shape = r.assignments();
    w.config = r.assignments();
    if (r.ok()) return w;
  }
  return std::nullopt;
}

std::optional<LaunchIndex::Winner> LaunchIndex::nearest_winner(const std::string& device_key,
                                                               const std::string& kernel, const std::string& dtype,
                                                               const Shape& shape) const {
  std::optional<Winner> best;
  Reader r(tables_);
  const std::uint32_t winners = r.u32();
  for (std::uint32_t i = 0; r.ok() && i < winners; ++i) {
    const std::string_view device = r.text(), problem = r.text(), k = r.text(), d = r.text();
    if (device != device_key || k != kernel || d != dtype) {
      r.skip_assignments();
      r.skip_assignments();
      continue;
    }
    Shape tuned = r.assignments();
    Config config = r.assignments();
    const auto distance = log2_distance(shape, tuned);
    if (!r.ok() || !distance) continue;
    if (!best || *distance < best->distance || (*distance == best->distance && problem < best->problem_key)) {
      best = Winner{std::string(problem), std::move(tuned), std::move(config), *distance};
    }
  }
  return best;
}

// Plans table: count; then device, problem key, kernel, dtype, default-dtype flag, shape, config,
// compile key, tensor names, grid and block (3 u32 each), dynamic shared bytes, cluster (3 u32), workspace
// (flag, bytes, layout), scalar slots (count, 16 bytes each).
std::size_t LaunchIndex::plan_count() const {
  if (!plans_usable_) return 0;
  Reader r(tables_);
  skip_winners(r);
  skip_cubins(r);
  return r.ok() ? r.u32() : 0;
}

std::optional<LaunchIndex::Plan> LaunchIndex::find_plan(const std::string& device_key, std::string_view kernel,
                                                        std::string_view dtype, const Shape& shape) const {
  if (!plans_usable_ || !plans_allowed_here()) return std::nullopt;
  Reader r(tables_);
  skip_winners(r);
  skip_cubins(r);
  const std::uint32_t plans = r.u32();
  for (std::uint32_t i = 0; r.ok() && i < plans; ++i) {
    const std::string_view device = r.text(), problem = r.text(), k = r.text(), d = r.text();
    const bool default_dtype = r.u32() != 0;
    const Shape planned_shape = r.assignments();
    const bool match = (device_key.empty() || device == device_key) && k == kernel &&
                       (d == dtype || (dtype.empty() && default_dtype)) && planned_shape == shape;
    Plan plan;
    plan.problem_key = std::string(problem);
    plan.dtype = std::string(d);
    plan.config = r.assignments();
    plan.compile_key = std::string(r.text());
    const std::uint32_t tensors = r.u32();
    for (std::uint32_t t = 0; r.ok() && t < tensors; ++t) plan.tensor_names.emplace_back(r.text());
    for (int a = 0; a < 3; ++a) plan.geometry.grid[a] = r.u32();
    for (int a = 0; a < 3; ++a) plan.geometry.block[a] = r.u32();
    plan.geometry.dynamic_shared_bytes = r.u32();
    for (int a = 0; a < 3; ++a) plan.geometry.cluster[a] = r.u32();
    plan.has_workspace = r.u32() != 0;
    plan.workspace_bytes = static_cast<std::int64_t>(r.u64());
    plan.workspace_layout = static_cast<std::int64_t>(r.u64());
    const std::uint32_t slots = r.u32();
    const std::string_view slot_bytes = r.text();
    if (!r.ok() || slot_bytes.size() != std::size_t{16} * slots) return std::nullopt;
    if (!match) continue;
    plan.scalars.resize(slots);
    for (std::uint32_t j = 0; j < slots; ++j) std::memcpy(plan.scalars[j].data(), slot_bytes.data() + 16 * j, 16);
    return plan;
  }
  return std::nullopt;
}

std::optional<LaunchIndex::IndexedCubin> LaunchIndex::find_cubin(const std::string& compile_key) const {
  Reader r(tables_);
  skip_winners(r);
  const std::uint32_t cubins = r.u32();
  for (std::uint32_t i = 0; r.ok() && i < cubins; ++i) {
    const std::string_view key = r.text(), lowered = r.text();
    const std::uint64_t offset = r.u64(), size = r.u64(), checksum = r.u64();
    if (!r.ok() || key != compile_key) continue;
    if (size == 0 || offset > file_size_ - blobs_offset_ || size > file_size_ - blobs_offset_ - offset) {
      return std::nullopt;
    }
    IndexedCubin cubin{std::vector<char>(static_cast<std::size_t>(size)), std::string(lowered)};
    if (!read_exactly(fd_, cubin.bytes.data(), cubin.bytes.size(), blobs_offset_ + offset)) return std::nullopt;
    if (XXH3_64bits(cubin.data(), cubin.size()) != checksum) {
      detail::logger().warn("launch index: the cubin of {} fails its checksum; reading the cache", compile_key);
      return std::nullopt;
    }
    return cubin;
  }
  return std::nullopt;
}

namespace {

// Appends the plan of winner `w` (a built-in kernel) as the Runtime would compute it on a hit;
// false, and nothing written, when the descriptor rejects the winner (the Runtime then reports it).
bool add_plan(Writer& table, const WinnerRecord& w, const Shape& shape, const Config& resolved,
              const std::string& compile_key) {
  Writer row;
  try {
    const auto& kernel = templates::find_kernel(w.kernel);
    const auto& dtype = templates::dtype_info(w.dtype);
    row.text(w.device_key);
    row.text(w.problem_key);
    row.text(w.kernel);
    row.text(w.dtype);
    row.u32(!kernel.dtypes.empty() && kernel.dtypes.front() == w.dtype ? 1 : 0);
    row.assignments(shape);
    row.assignments(resolved);
    row.text(compile_key);
    const auto tensors = kernel.tensors(shape);
    row.u32(static_cast<std::uint32_t>(tensors.size()));
    for (const auto& t : tensors) row.text(t.name);
    const LaunchGeometry g = kernel.geometry(resolved, shape, dtype);
    for (int a = 0; a < 3; ++a) row.u32(g.grid[a]);
    for (int a = 0; a < 3; ++a) row.u32(g.block[a]);
    row.u32(g.dynamic_shared_bytes);
    for (int a = 0; a < 3; ++a) row.u32(g.cluster[a]);
    const auto workspace = kernel.workspace ? std::optional(kernel.workspace(shape)) : std::nullopt;
    row.u32(workspace ? 1 : 0);
    row.u64(workspace ? static_cast<std::uint64_t>(workspace->bytes) : 0);
    row.u64(workspace ? static_cast<std::uint64_t>(workspace->layout) : 0);
    detail::KernelArgs scalars;
    kernel.add_scalars(scalars, shape);
    void** slots = scalars.pointers();
    std::string slot_bytes;
    for (std::size_t j = 0; j < scalars.size(); ++j) {
      if (scalars.bytes_of(j) > 16) throw Error(ErrorKind::usage, 0, "a scalar argument of more than 16 bytes");
      slot_bytes.append(static_cast<const char*>(slots[j]), 16);
    }
    row.u32(static_cast<std::uint32_t>(scalars.size()));
    row.text(slot_bytes);
  } catch (const std::exception& e) {
    detail::logger().debug("launch index: no plan for {} {} {}: {}", w.kernel, w.dtype, w.shape_json, e.what());
    return false;
  }
  table.bytes() += row.bytes();
  return true;
}

}  // namespace

PublishedIndex publish_launch_index(Store& store) {
  const fs::path index_path = launch_index_path(store.path());
  fs::path lock_path = index_path;
  lock_path += ".lock";
  ScopedFd lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (lock.get() < 0) {
    const int err = errno;
    GMJIT_CACHE_FAIL(err, "open", "cannot open launch index lock {}: {}", lock_path.string(), std::strerror(err));
  }
  // Writers take turns and each reads the cache only once it holds the lock, so whichever renames
  // last has seen every commit made before it took the lock.
  while (::flock(lock.get(), LOCK_EX) != 0) {
    if (errno != EINTR) {
      const int err = errno;
      GMJIT_CACHE_FAIL(err, "flock", "cannot lock {}: {}", lock_path.string(), std::strerror(err));
    }
  }
  const auto identity = file_identity(store.path());
  if (!identity) {
    const int err = errno;
    GMJIT_CACHE_FAIL(err, "stat", "cannot inspect cache {}: {}", store.path().string(), std::strerror(err));
  }

  PublishedIndex published;
  Writer winners_table;
  Writer plans_table;
  std::uint32_t plan_rows = 0;
  const bool write_plans = plans_allowed_here();
  struct Blob {
    std::string compile_key, lowered_name;
    std::vector<char> cubin;
  };
  std::map<std::string, Blob> blobs;  // by compile key: winners of several shapes share cubins
  std::uint32_t winner_rows = 0;
  for (const auto& w : store.winners()) {
    Shape shape;
    Config config;
    Config resolved;  // as the Runtime launches it; the winner's own when the descriptor rejects it
    bool plannable = write_plans;
    codegen::GeneratedSource source;
    try {
      const auto& kernel = templates::find_kernel(w.kernel);
      shape = nlohmann::json::parse(w.shape_json).get<Shape>();
      config = nlohmann::json::parse(w.config_json).get<Config>();
      // A winner of an older template text has a key no launch computes now; its cubin would be
      // the new text's, so it must not be listed.
      if (problem_key(w.kernel, templates::template_hash(kernel.header), w.dtype, kRowMajor, shape) != w.problem_key) {
        ++published.skipped;
        continue;
      }
      try {
        resolved = templates::resolve_config(kernel, shape, w.dtype, config);
      } catch (const std::exception&) {
        resolved = config;
        plannable = false;  // the Runtime reports this winner from the catalog's path
      }
      source = codegen::specialize(kernel, shape, w.dtype, resolved);
    } catch (const std::exception& e) {
      detail::logger().debug("launch index: leaving out {} {} {}: {}", w.kernel, w.dtype, w.shape_json, e.what());
      ++published.skipped;
      continue;
    }
    winners_table.text(w.device_key);
    winners_table.text(w.problem_key);
    winners_table.text(w.kernel);
    winners_table.text(w.dtype);
    winners_table.assignments(shape);
    winners_table.assignments(config);
    ++winner_rows;
    const std::string key = codegen::compile_key(source, w.device_arch);
    if (plannable && !templates::is_user_kernel(w.kernel) && add_plan(plans_table, w, shape, resolved, key)) {
      ++plan_rows;
    }
    if (blobs.count(key) != 0) continue;
    if (auto cubin = store.get_cubin(key); cubin && !cubin->lowered_name.empty()) {
      blobs.emplace(key, Blob{key, std::move(cubin->lowered_name), std::move(cubin->cubin)});
    }
  }
  published.winners = winner_rows;
  published.cubins = blobs.size();
  published.plans = plan_rows;

  // Layout: header, tables, then the cubins, at offsets counted from the end of the tables.
  Writer tables;
  tables.u32(winner_rows);
  tables.bytes() += winners_table.bytes();
  tables.u32(static_cast<std::uint32_t>(blobs.size()));
  std::uint64_t offset = 0;
  for (const auto& [key, blob] : blobs) {
    tables.text(key);
    tables.text(blob.lowered_name);
    tables.u64(offset);
    tables.u64(blob.cubin.size());
    tables.u64(XXH3_64bits(blob.cubin.data(), blob.cubin.size()));
    offset += blob.cubin.size();
  }
  tables.u32(plan_rows);
  tables.bytes() += plans_table.bytes();

  Header h{};
  std::memcpy(h.magic, kMagic, sizeof(kMagic));
  h.format = kFormat;
  h.byte_order = 0x01020304u;
  h.cache_device = identity->first;
  h.cache_inode = identity->second;
  h.tables_offset = sizeof(Header);
  h.tables_bytes = tables.bytes().size();
  h.tables_hash = XXH3_64bits(tables.bytes().data(), tables.bytes().size());
  h.plan_identity = write_plans ? plan_identity() : 0;
  h.header_hash = header_hash(h);

  fs::path temporary = index_path;
  temporary += fmt::format(".tmp.{}", ::getpid());
  ScopedFd out(::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (out.get() < 0) {
    const int err = errno;
    GMJIT_CACHE_FAIL(err, "open", "cannot write launch index {}: {}", temporary.string(), std::strerror(err));
  }
  bool written = ::fchmod(out.get(), 0600) == 0 &&
                 write_all(out.get(), reinterpret_cast<const char*>(&h), sizeof(h)) &&
                 write_all(out.get(), tables.bytes().data(), tables.bytes().size());
  for (const auto& [key, blob] : blobs) {
    written = written && write_all(out.get(), blob.cubin.data(), blob.cubin.size());
  }
  const int err = errno;
  if (!written || ::close(out.release()) != 0 || ::rename(temporary.c_str(), index_path.c_str()) != 0) {
    const int rename_err = errno;
    ::unlink(temporary.c_str());
    GMJIT_CACHE_FAIL(written ? rename_err : err, "write", "cannot write launch index {}: {}", index_path.string(),
                     std::strerror(written ? rename_err : err));
  }
  detail::logger().debug("launch index {}: {} winners, {} cubins, {} plans, {} left out", index_path.string(),
                         published.winners, published.cubins, published.plans, published.skipped);
  return published;
}

void try_publish_launch_index(Store& store) {
  try {
    publish_launch_index(store);
  } catch (const std::exception& e) {
    detail::logger().warn("could not update the launch index of {} ({}); launches read the cache instead",
                          store.path().string(), e.what());
  }
}

}  // namespace gmjit::cache
