#pragma once
/// @file runtime.hpp
/// One call per launch: the tuned kernel for a problem, from the cache, launched on a stream.
///
/// @code
///   gmjit::Runtime runtime;  // device 0, the default cache, MissPolicy::nearest
///   runtime.launch("sgemm", {{"m", M}, {"n", N}, {"k", K}}, {a, b, c}, stream);
/// @endcode
///
/// The first launch of a problem looks its winner up in the cache (or follows the miss policy),
/// loads the cubin from the binary cache (compiling it only when absent) and keeps the loaded
/// kernel; every later launch of the same problem is an in-memory hash lookup.

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "gmjit/tune.hpp"
#include "gmjit/types.hpp"

namespace gmjit {

/// What a launch does when the cache holds no winner for its problem on this device.
enum class MissPolicy {
  tune,            ///< tune it now (as `gmtune sweep` does: trials, winner and binary go to the cache)
  nearest,         ///< the winner of the nearest tuned shape, else the default configuration
  default_config,  ///< the template's default configuration
  fail,            ///< throw Error(cache_miss) naming the `gmtune tune` command that records a winner in
                   ///< this Runtime's cache: for cache-only deployments
};
/// "tune", "nearest", "default_config", "fail".
const char* to_string(MissPolicy policy);
/// Throws Error(usage) listing the policies.
MissPolicy parse_miss_policy(const std::string& name);

/// Where the configuration a problem runs with came from.
enum class ConfigSource {
  cache,           ///< the problem's own winner
  nearest,         ///< the winner of the nearest tuned shape
  default_config,  ///< the template's default configuration
  tuned,           ///< tuned by this Runtime on a miss, then read back from the cache
};
/// "cache", "nearest", "default_config", "tuned".
const char* to_string(ConfigSource source);

/// A device address: converts from any pointer (a cudaMalloc'ed `float*`, a framework's
/// `data_ptr()`) and from any integer (a `CUdeviceptr`).
class DevicePtr {
 public:
  DevicePtr(const void* pointer) noexcept  // NOLINT(google-explicit-constructor)
      : address_(reinterpret_cast<std::uintptr_t>(pointer)) {}
  template <class Integer, std::enable_if_t<std::is_integral_v<Integer> && !std::is_same_v<Integer, bool>, int> = 0>
  constexpr DevicePtr(Integer address) noexcept  // NOLINT(google-explicit-constructor)
      : address_(static_cast<std::uint64_t>(address)) {}
  constexpr std::uint64_t address() const noexcept { return address_; }

 private:
  std::uint64_t address_;
};

/// The tensors of one launch, in the kernel's tensor order (inputs, then outputs): a view of
/// the caller's array for the duration of the call.
class Tensors {
 public:
  Tensors(const std::vector<DevicePtr>& list) noexcept  // NOLINT(google-explicit-constructor)
      : data_(list.data()), size_(list.size()) {}
  Tensors(const DevicePtr* data, std::size_t size) noexcept : data_(data), size_(size) {}
  const DevicePtr* begin() const noexcept { return data_; }
  const DevicePtr* end() const noexcept { return data_ + size_; }
  std::size_t size() const noexcept { return size_; }
  const DevicePtr& operator[](std::size_t i) const noexcept { return data_[i]; }

 private:
  const DevicePtr* data_;
  std::size_t size_;
};

struct RuntimeOptions {
  std::string db_path;  ///< empty: default_cache_path()
  int device = 0;       ///< the CUDA device ordinal the Runtime launches on
  /// Followed by a problem's first launch when the cache has no winner for it, unless the launch
  /// names its own.
  MissPolicy miss_policy = MissPolicy::nearest;
  /// Search and budget for MissPolicy::tune; its device is replaced by `device`.
  TuneOptions tune;
};

/// Per launch; only the first launch of a problem reads miss_policy.
struct LaunchOptions {
  std::string dtype;  ///< empty: the kernel's first dtype
  std::optional<MissPolicy> miss_policy;
};

/// Which configuration a problem runs with, and why.
struct Resolution {
  std::string kernel;
  std::string dtype;
  Shape shape;
  Config config;
  ConfigSource source = ConfigSource::cache;
  /// For ConfigSource::nearest, and for a nearest winner rejected for this shape: its shape and
  /// log2 distance (see the cache's nearest-shape rule).
  std::optional<Shape> nearest_shape;
  double nearest_distance = 0;
  /// Why a fallback was taken (no tuned shape, the nearest winner's config is invalid here); empty otherwise.
  std::string note;
};

/// Where the first launch of one problem in a Runtime spent its time, stage by stage, in
/// microseconds of a steady clock. A stage the launch did not go through is 0: the driver, the
/// device and the cache file are set up by a Runtime's first load only (the driver once per
/// process), and compile_us is 0 whenever the binary cache held the cubin.
struct LoadTimes {
  double check_us = 0;        ///< kernel, dtype, shape and tensor count checked against the catalog
  double driver_us = 0;       ///< libcuda loaded and its entry points resolved
  double device_us = 0;       ///< the device's primary context retained, its fingerprint read
  double keys_us = 0;         ///< the problem key (the template hash included)
  double cache_open_us = 0;   ///< the cache file opened
  double lookup_us = 0;       ///< the winner found and checked, or the miss policy followed (tuning included)
  double compile_key_us = 0;  ///< the source specialized and its compile key computed
  double fetch_us = 0;        ///< the cubin read from the binary cache, its checksum verified
  double compile_us = 0;      ///< NVRTC and storing its cubin, when the binary cache had no loadable one
  double module_load_us = 0;  ///< the module loaded, its kernel found and its attributes read
  double prepare_us = 0;      ///< launch geometry, shared-memory opt-in, scalar arguments
  double launch_us = 0;       ///< the first cuLaunchKernelEx
  double total_us = 0;        ///< from launch() missing in memory to its return
  /// The winner and its cubin came from the launch index beside the cache file, and SQLite was
  /// not opened (cache_open_us is then the index's open).
  bool from_index = false;
  /// The index also held the launch itself (geometry, scalars, workspace), computed by the process
  /// that wrote it with this library build: the catalog was not consulted (check_us, keys_us and
  /// compile_key_us are 0).
  bool from_plan = false;
};

/// Counters since construction; each field is read atomically, the set is not a snapshot.
struct RuntimeStats {
  std::uint64_t launches = 0;        ///< launch() calls that reached the driver
  std::uint64_t memory_hits = 0;     ///< launches served by a kernel already loaded here: no cache work at all
  std::uint64_t cache_hits = 0;      ///< problems resolved from their own winner in the cache
  std::uint64_t nearest = 0;         ///< misses resolved with the nearest tuned shape's configuration
  std::uint64_t default_config = 0;  ///< misses resolved with the default configuration (nearest fallbacks too)
  std::uint64_t tuned = 0;           ///< misses tuned in place
  std::uint64_t failed = 0;          ///< misses refused (MissPolicy::fail)
  std::uint64_t db_lookups = 0;      ///< winner queries against the cache file
  std::uint64_t index_hits = 0;      ///< problems resolved from the launch index, without SQLite
  std::uint64_t compiles = 0;        ///< NVRTC compiles (the binary cache had no cubin)
  std::uint64_t loads = 0;           ///< modules loaded into the device's context
  std::uint64_t workspace_allocations = 0;  ///< workspace buffers allocated (first use on a stream, growth)
  std::uint64_t workspaces = 0;             ///< (stream, kernel) workspaces held now
  std::uint64_t workspace_bytes = 0;        ///< device bytes they hold, outgrown buffers included
  /// The stages of the latest launch() that loaded its problem (all 0 before the first): what a
  /// first launch costs, and where.
  LoadTimes last_load;
};

/// Launches tuned kernels on one device. Owns (retains) the device's primary CUDA context, the
/// cache connection, every module it loaded and every workspace, until destruction (destroy it
/// only once its launches have completed). Nothing touches the device or the cache before the
/// first launch or resolve, so constructing one never throws for want of a GPU. launch(),
/// resolve() and stats() may be called from several threads at once.
///
/// Workspaces. Some kernels (vector_sum, prefix_sum, histogram, softmax's split rows) keep
/// scratch state in device memory between launches; the Runtime owns it and the caller passes
/// inputs and outputs only. There is one workspace per (stream, kernel), allocated and zeroed on
/// the first launch of that kernel on that stream, kept across launches (each launch leaves it as
/// the next one needs it, so no launch pays for a memset), and grown, as a new zeroed buffer of at
/// least twice the size, by a launch that needs more; an outgrown buffer is freed with the
/// Runtime, never under a launch in flight. A launch touches only the workspace of its own stream,
/// so launches on different streams run concurrently without sharing scratch; launches on one
/// stream, from any threads, are ordered by the stream. The legacy default stream (nullptr or
/// CU_STREAM_LEGACY) is one stream with one workspace per kernel; CU_STREAM_PER_THREAD is a
/// different stream in every thread and gets one per thread. A stream that is destroyed and a
/// new one created at the same handle reuses the workspace: call release_workspaces() before
/// destroying a stream whose launches may still run. The zeroing is enqueued on the launch's
/// stream; capturing the first launch of a kernel on a stream into a CUDA graph captures it too.
///
/// The first launch of a problem reads the launch index beside the cache file (`<cache>.launch`),
/// which `gmtune tune`, `sweep`, `import`, `merge` and `gc` rewrite after each change they commit:
/// the problem's winner and the cubin of its compile key, read without opening SQLite (whose
/// start costs a fresh process about 0.4 ms). A problem the index lacks, an index that is absent,
/// damaged or written for another cache file, and a cubin the driver refuses all go to the cache
/// itself, as before; a winner found there but not in the index has the index rewritten.
class Runtime {
 public:
  explicit Runtime(RuntimeOptions options = {});
  ~Runtime();
  Runtime(Runtime&&) noexcept;
  Runtime& operator=(Runtime&&) noexcept;
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  /// Launches `kernel` for `shape` on `stream` (a CUstream or cudaStream_t; nullptr: the default
  /// stream) and returns without synchronizing. The shape is normalized as validate() does (a
  /// histogram launches from n alone). The shape's scalars are passed for the caller; `tensors`
  /// are the kernel's inputs then outputs, in its order, each sized for the shape (KernelInfo's
  /// tensors and `gmtune list --json` give names and element counts); the workspace, if any, is
  /// the Runtime's (see above). The Runtime's context is made current for the launch and the
  /// caller's restored.
  /// @throws Error(usage) for an unknown kernel or dtype, a malformed shape, a wrong number of
  ///   tensors (naming the expected ones), a null tensor, or one not aligned as the kernel's
  ///   accesses need (gemm with k and n multiples of 8: 16 bytes); Error(cache_miss) under
  ///   MissPolicy::fail; Error(driver | compile | launch | device_limit | cache) from the layers.
  void launch(std::string_view kernel, const Shape& shape, Tensors tensors, void* stream = nullptr,
              const LaunchOptions& options = {});
  /// launch() with the tensors written in place: `{a, b, c}`.
  void launch(std::string_view kernel, const Shape& shape, std::initializer_list<DevicePtr> tensors,
              void* stream = nullptr, const LaunchOptions& options = {}) {
    launch(kernel, shape, Tensors(tensors.begin(), tensors.size()), stream, options);
  }

  /// The configuration launch() would run the problem with, resolved the same way (a problem
  /// already loaded answers from memory; MissPolicy::tune tunes it), without loading or launching.
  Resolution resolve(std::string_view kernel, const Shape& shape, const LaunchOptions& options = {});

  /// Frees the workspaces of `stream` after synchronizing it (for a stream about to be destroyed,
  /// or to give the memory back); a later launch on it allocates afresh. Must not run while
  /// another thread launches on the same stream.
  void release_workspaces(void* stream);

  RuntimeStats stats() const;
  const RuntimeOptions& options() const;
  /// The cache file this Runtime reads (resolved from the options when empty).
  std::string db_path() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gmjit
