#pragma once
// The launch index: a read-only picture of a cache's winners and their cubins, written beside the
// SQLite file (`<cache>.launch`) by every process that changes winners or binaries, so that a
// process's first launch finds its kernel with two preads instead of a SQLite connection. Opening
// SQLite in a fresh process costs about 430 us (library initialisation, schema parse, the -wal and
// -shm set up; bench/NOTES.md), the whole budget of a first launch.
//
// The index is derived data: the SQLite file stays the record. What it may serve is bounded by the
// same keys: a winner by (device fingerprint, problem key), which covers the template's bytes; a
// cubin by compile key, which the reader computes itself. It is only ever behind the cache, never
// wrong: a writer republishes after each change it commits, under a lock, reading the cache after
// taking the lock, so the last rename reflects every commit before it. An index written for
// another file (the cache replaced or quarantined: another inode), damaged (a checksum over its
// tables, one over each cubin), or not the reader's own (owner, group- or world-writable) is
// ignored, and the reader goes to SQLite. The Store removes the index when it creates a cache
// file, since a new file may reuse the old one's inode. Bytes copied over the cache file in place
// (same inode) are not seen until the next rewrite: the index then serves the earlier winners,
// which are still valid for their keys.

#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cache/store.hpp"
#include "gmjit/types.hpp"

namespace gmjit::cache {

std::filesystem::path launch_index_path(const std::filesystem::path& cache_file);

class LaunchIndex {
 public:
  struct Winner {
    std::string problem_key;
    Shape shape;
    Config config;
    double distance = 0;  // from the requested shape (nearest_winner); 0 for an exact match
  };

  // nullopt when there is no usable index for `cache_file` (absent, damaged, stale by inode, not
  // the caller's own); never throws for the index's sake.
  static std::optional<LaunchIndex> open(const std::filesystem::path& cache_file);

  LaunchIndex(LaunchIndex&& other) noexcept;
  LaunchIndex& operator=(LaunchIndex&& other) noexcept;
  LaunchIndex(const LaunchIndex&) = delete;
  LaunchIndex& operator=(const LaunchIndex&) = delete;
  ~LaunchIndex();

  std::optional<Winner> find_winner(const std::string& device_key, const std::string& problem_key) const;
  // As Store::nearest_winner, over the winners of the index.
  std::optional<Winner> nearest_winner(const std::string& device_key, const std::string& kernel,
                                       const std::string& dtype, const Shape& shape) const;
  // What launching a built-in kernel's winner takes beyond its cubin, computed by the writer
  // from the kernel's descriptor, so that a process's first launch of a tuned problem runs no
  // catalog code: describing the kernel, hashing its template and specializing its source took
  // 150-250 us of a fresh process's first launch on the H200 (bench/NOTES.md). Served only to a
  // reader running the writer's library build (GNU build-id) and NVRTC, in a process where no
  // embedded header was replaced: there the descriptor computes the same plan.
  struct Plan {
    std::string problem_key;
    std::string dtype;
    Config config;  // resolved (every parameter present), as the Runtime launches it
    std::string compile_key;
    std::vector<std::string> tensor_names;
    LaunchGeometry geometry;
    bool has_workspace = false;
    std::int64_t workspace_bytes = 0;
    std::int64_t workspace_layout = 0;
    std::vector<std::array<unsigned char, 16>> scalars;  // the descriptor's add_scalars slots
  };
  // The plan of the winner of exactly (kernel, dtype, shape) on `device_key`, or on any device
  // when `device_key` is empty (a launch asks that before it acquires the device); an empty
  // dtype asks for the kernel's default one. nullopt when this process may use none.
  std::optional<Plan> find_plan(const std::string& device_key, std::string_view kernel, std::string_view dtype,
                                const Shape& shape) const;
  std::size_t plan_count() const;

  // A cubin read from the index onto the heap. The driver loaded sgemm's 161 KiB cubin in 30-60
  // us from a heap buffer and in 115-250 us from a file mapping of the index or from anonymous
  // memory of its own (H200, bench_runtime's driver-alone rows), though every page was resident.
  struct IndexedCubin {
    std::vector<char> bytes;
    std::string lowered_name;
    const char* data() const { return bytes.data(); }
    std::size_t size() const { return bytes.size(); }
  };
  // The cubin of `compile_key`, its checksum verified; nullopt when absent or damaged.
  std::optional<IndexedCubin> find_cubin(const std::string& compile_key) const;

  std::size_t winner_count() const;
  std::size_t cubin_count() const;

 private:
  LaunchIndex() = default;

  int fd_ = -1;
  std::uint64_t file_size_ = 0;
  std::uint64_t blobs_offset_ = 0;  // where the cubins start; the tables give offsets from here
  bool plans_usable_ = false;       // written by this library build and NVRTC (Plan)
  // The tables as read (checksum verified), walked on each lookup: a process looks up a problem
  // once, and decoding only what a lookup matches keeps open() to two preads.
  std::string tables_;
};

// What publish_launch_index wrote.
struct PublishedIndex {
  std::size_t winners = 0;
  std::size_t cubins = 0;
  std::size_t plans = 0;
  // Winners left out: their kernel is not registered in this process (a user kernel), or their
  // problem key was made with another version of its template.
  std::size_t skipped = 0;
};

// Rewrites the launch index of `store` from its winners and the cubins their configurations
// compile to (for the winner's own shape and its device's arch), atomically (a temporary file,
// then rename) under an exclusive lock on `<index>.lock`. Call it after committing a change to
// winners or binaries. Throws Error(cache) when the index cannot be written; the cache is
// untouched either way.
PublishedIndex publish_launch_index(Store& store);

// publish_launch_index for callers whose own work is done: a failure is a warning, since the
// index only saves time.
void try_publish_launch_index(Store& store);

}  // namespace gmjit::cache
