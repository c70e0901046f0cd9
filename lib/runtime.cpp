// gmjit::Runtime: the cache's winner (or the miss policy's choice) for a problem, loaded once and
// launched from memory afterwards.
#include "gmjit/runtime.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <array>
#include <atomic>
#include <filesystem>
#include <future>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "cache/store.hpp"
#include "codegen/compiler.hpp"
#include "gmjit/error.hpp"
#include "core/device.hpp"
#include "core/laps.hpp"
#include "core/log.hpp"
#include "core/module.hpp"
#include "core/workspace.hpp"
#include "templates/registry.hpp"
#include "cache/binaries.hpp"
#include "cache/keys.hpp"
#include "cache/launch_index.hpp"
#include "tuner/names.hpp"

namespace gmjit {

namespace {

constexpr tuner::EnumNames<MissPolicy, 4> kMissPolicies{
    "miss policy", "policies",
    {{MissPolicy::tune, "tune"}, {MissPolicy::nearest, "nearest"}, {MissPolicy::default_config, "default_config"},
     {MissPolicy::fail, "fail"}}};

}  // namespace

const char* to_string(MissPolicy policy) { return kMissPolicies.name(policy); }

MissPolicy parse_miss_policy(const std::string& name) { return kMissPolicies.parse(name); }

const char* to_string(ConfigSource source) {
  switch (source) {
    case ConfigSource::cache: return "cache";
    case ConfigSource::nearest: return "nearest";
    case ConfigSource::default_config: return "default_config";
    case ConfigSource::tuned: return "tuned";
  }
  return "unknown";
}

namespace {

// Makes `ours` current for one scope and gives the thread back whatever it had, so a launch never
// leaves the application's thread on another context.
class CurrentContext {
 public:
  CurrentContext(const detail::DriverApi& api, CUcontext ours) : api_(api), ours_(ours) {
    GMJIT_CU(api_.cuCtxGetCurrent(&previous_));
    if (previous_ != ours_) GMJIT_CU(api_.cuCtxSetCurrent(ours_));
  }
  ~CurrentContext() {
    if (previous_ != ours_) api_.cuCtxSetCurrent(previous_);
  }
  CurrentContext(const CurrentContext&) = delete;
  CurrentContext& operator=(const CurrentContext&) = delete;

 private:
  const detail::DriverApi& api_;
  CUcontext ours_;
  CUcontext previous_ = nullptr;
};

// A problem checked against its descriptor: everything a miss needs, built before the device or
// the cache is touched.
struct Request {
  const templates::KernelDescriptor* descriptor = nullptr;
  std::string requested_dtype;  // as the caller spelled it (empty: the kernel's first)
  std::string dtype;
  Shape shape;
  std::vector<std::string> tensor_names;
};

std::string request_label(const Request& r) {
  return fmt::format("{} {} {}", r.descriptor->name, r.dtype, format_assignments(r.shape));
}

Request check_request(std::string_view kernel, const Shape& shape, const std::string& dtype) {
  auto problem = templates::normalize_problem(std::string(kernel), shape, dtype);
  Request r;
  r.descriptor = problem.kernel;
  r.requested_dtype = dtype;
  r.dtype = std::move(problem.dtype);
  r.shape = std::move(problem.shape);
  for (const auto& t : r.descriptor->tensors(r.shape)) r.tensor_names.push_back(t.name);
  return r;
}

// Which workspace a launch on `stream` uses. The legacy default stream has two spellings (0 and
// CU_STREAM_LEGACY); CU_STREAM_PER_THREAD is one spelling of a different stream in every thread.
struct StreamKey {
  std::uintptr_t stream;
  std::thread::id thread;
  bool operator<(const StreamKey& o) const { return std::tie(stream, thread) < std::tie(o.stream, o.thread); }
};

StreamKey stream_key(void* stream) {
  auto handle = reinterpret_cast<std::uintptr_t>(stream);
  if (handle == reinterpret_cast<std::uintptr_t>(CU_STREAM_LEGACY)) handle = 0;
  const bool per_thread = handle == reinterpret_cast<std::uintptr_t>(CU_STREAM_PER_THREAD);
  return {handle, per_thread ? std::this_thread::get_id() : std::thread::id()};
}

[[noreturn]] void wrong_tensor_count(const std::string& kernel, const std::vector<std::string>& names,
                                     std::size_t got) {
  throw Error(ErrorKind::usage, 0,
              fmt::format("{} takes {} tensors ({}), got {}", kernel, names.size(), fmt::join(names, ", "), got));
}

// Hash of what identifies a loaded kernel; the bytes are joined without separators that could
// collide because each piece is NUL-terminated or fixed-size.
std::uint64_t key_hash(std::string_view kernel, std::string_view dtype, const Shape& shape) {
  thread_local std::string bytes;
  bytes.clear();
  bytes.append(kernel).push_back('\0');
  bytes.append(dtype).push_back('\0');
  for (const auto& [key, value] : shape) {
    bytes.append(key).push_back('\0');
    bytes.append(reinterpret_cast<const char*>(&value), sizeof(value));
  }
  return XXH3_64bits(bytes.data(), bytes.size());
}

std::string reason(const std::exception& e) {
  const auto* error = dynamic_cast<const Error*>(&e);
  return error ? error->message() : e.what();
}

Config parse_config(const std::string& json) { return nlohmann::json::parse(json).get<Config>(); }

// A launch that loads its problem: the stages so far, and the clock they are taken from.
struct PendingLoad {
  LoadTimes times;
  detail::Laps laps;
};

}  // namespace

struct Runtime::Impl {
  // Immutable once built: read by every thread that launches it.
  struct Loaded {
    std::string kernel_name;
    Resolution resolution;
    std::vector<std::string> tensor_names;
    std::unique_ptr<detail::Module> module;
    std::unique_ptr<detail::Kernel> function;
    LaunchGeometry geometry;
    std::optional<templates::WorkspaceNeed> workspace;
    detail::KernelArgs scalars;
    std::vector<void*> scalar_pointers;
    // The descriptor's add_address_args for this configuration and problem, or empty: the
    // arguments a launch derives from its tensors' addresses (TMA maps), after the scalars.
    std::function<void(detail::KernelArgs&, const std::uint64_t*)> address_args;
    // The byte alignment every tensor address needs (the descriptor's tensor_alignment); 0: any.
    std::uint32_t alignment = 0;
  };

  // One problem as launched here. The identity is compared on every lookup, so a hash collision
  // can never launch another problem's kernel.
  struct Entry {
    std::string kernel;
    std::string dtype;  // as requested
    Shape shape;
    std::atomic<const Loaded*> ready{nullptr};
    std::shared_future<std::shared_ptr<const Loaded>> future;

    bool is(std::string_view k, std::string_view d, const Shape& s) const {
      return kernel == k && dtype == d && shape == s;
    }
  };

  struct Counters {
    std::atomic<std::uint64_t> launches{0}, memory_hits{0}, cache_hits{0}, nearest{0}, default_config{0}, tuned{0},
        failed{0}, db_lookups{0}, index_hits{0}, compiles{0}, loads{0}, workspace_allocations{0};
  };

  // One kernel's workspace on one stream. Its mutex is held from preparing the buffer to
  // enqueueing the launch, so launches from several threads on one stream reach the stream in
  // the order their workspace states were prepared.
  struct StreamWorkspace {
    std::mutex mutex;
    detail::Workspace buffer;
  };
  using WorkspaceKey = std::pair<StreamKey, std::string>;  // stream, kernel name

  explicit Impl(RuntimeOptions o) : options(std::move(o)) {}

  ~Impl() {
    if (!context) return;
    // Modules unload and buffers free in their context; make it current for that, whichever
    // thread destroys us.
    try {
      CurrentContext current(*api, context->get());
      entries.clear();
      workspaces.clear();
    } catch (const std::exception&) {
      entries.clear();
      workspaces.clear();
    }
  }

  RuntimeOptions options;
  Counters counters;

  // Acquired on first need, so a Runtime can be built (and its arguments checked) without a GPU.
  std::mutex device_mutex;
  std::optional<detail::Context> context;
  DeviceInfo device;
  std::string fingerprint;  // device.fingerprint(), hashed once
  const detail::DriverApi* api = nullptr;

  // A Store is one connection and must not be used by two threads at once.
  std::mutex db_mutex;
  std::string cache_file_;  // resolved lazily: the default path lookup may throw
  std::optional<cache::Store> store;
  // Read before the store, and instead of it when it has the problem (cache/launch_index.hpp).
  bool index_read = false;
  std::optional<cache::LaunchIndex> index;
  // SQLite had a winner the index lacked: the index is rewritten once this load is done.
  bool index_behind = false;

  // Tuning two problems at once would time each against the other on the same GPU.
  std::mutex tune_mutex;

  mutable std::mutex map_mutex;
  std::unordered_multimap<std::uint64_t, std::unique_ptr<Entry>> entries;

  // Guards the map, not the buffers: each StreamWorkspace has its own mutex.
  mutable std::mutex workspace_mutex;
  std::map<WorkspaceKey, std::unique_ptr<StreamWorkspace>> workspaces;

  StreamWorkspace& workspace_for(void* stream, const std::string& kernel) {
    std::lock_guard<std::mutex> lock(workspace_mutex);
    auto& slot = workspaces[{stream_key(stream), kernel}];
    if (!slot) slot = std::make_unique<StreamWorkspace>();
    return *slot;
  }

  mutable std::mutex times_mutex;
  LoadTimes last_load;

  const std::string& cache_file() {
    std::lock_guard<std::mutex> lock(db_mutex);
    return cache_file_locked();
  }
  const std::string& cache_file_locked() {
    if (cache_file_.empty()) cache_file_ = options.db_path.empty() ? default_cache_path() : options.db_path;
    return cache_file_;
  }
  cache::Store& store_locked() {
    if (!store) store.emplace(cache_file_locked());
    return *store;
  }

  void ensure_device(PendingLoad* pending) {
    std::lock_guard<std::mutex> lock(device_mutex);
    if (context) return;
    if (pending) pending->laps.lap();
    const detail::DriverApi& loaded_api = detail::driver();
    if (pending) pending->times.driver_us = pending->laps.lap();
    detail::Context acquired(options.device);
    device = detail::cached_device(options.device);
    fingerprint = device.fingerprint();
    api = &loaded_api;
    context.emplace(std::move(acquired));
    if (pending) pending->times.device_us = pending->laps.lap();
  }

  // The command named records into the cache this Runtime reads, for its device.
  [[noreturn]] void refuse(const Request& r, const std::string& where) {
    ++counters.failed;
    std::string where_to = " --db " + cache_file_locked();
    if (options.device != 0) where_to += fmt::format(" --device {}", options.device);
    // An expression kernel is tuned from its text (which declares every dtype), a manifest's
    // kernel with its manifest registered.
    const bool expression = !r.descriptor->expression.empty();
    const std::string what = expression ? fmt::format("--expr \"{}\" --name {}", r.descriptor->expression, r.descriptor->name)
                                        : r.descriptor->name;
    const std::string dtype = expression ? "" : " --dtype " + r.dtype;
    if (!expression && templates::is_user_kernel(r.descriptor->name)) where_to += " --kernel-file MANIFEST";
    throw Error(ErrorKind::cache_miss, 0,
                fmt::format("no tuned winner for {} {} (miss policy fail); record one with `gmtune tune {} --shape {}{}{}` "
                            "(or `gmtune sweep --shapes FILE{}` for a shapes file listing it)",
                            request_label(r), where, what, format_assignments(r.shape), dtype, where_to, where_to));
  }

  Config checked(const Request& r, const Config& config) {
    return templates::resolve_config(*r.descriptor, r.shape, r.dtype, config);
  }

  Config checked_winner(const Request& r, const Config& config) {
    try {
      return checked(r, config);
    } catch (const std::exception& e) {
      throw Error(ErrorKind::cache, 0,
                  fmt::format("the cached winner of {} in {} is not a valid configuration: {}", request_label(r),
                              cache_file_locked(), reason(e)));
    }
  }

  // `pending` (may be null) receives the stage times, from its laps' last lap on.
  Resolution resolve_request(const Request& r, MissPolicy policy, PendingLoad* pending = nullptr) {
    {
      // A cache-only deployment without its cache file is refused before the device is touched,
      // and no empty cache is created in its place.
      std::lock_guard<std::mutex> lock(db_mutex);
      if (policy == MissPolicy::fail && !store && !std::filesystem::exists(cache_file_locked())) {
        refuse(r, fmt::format("in {}: the file does not exist", cache_file_locked()));
      }
    }
    ensure_device(pending);
    if (pending) pending->laps.lap();
    const auto& d = *r.descriptor;
    const std::string problem_key =
        cache::problem_key(d.name, templates::template_hash(d.header), r.dtype, cache::kRowMajor, r.shape);
    Resolution out{d.name, r.dtype, r.shape, {}, ConfigSource::cache, std::nullopt, 0, {}};
    if (pending) pending->times.keys_us = pending->laps.lap();

    std::unique_lock<std::mutex> db(db_mutex);
    if (pending) pending->laps.lap();  // the wait for the lock is no stage of ours
    // Every return below is the lookup's end.
    struct LookupLap {
      PendingLoad* pending;
      ~LookupLap() {
        if (pending) pending->times.lookup_us = pending->laps.lap();
      }
    } lookup_lap{pending};
    if (!index_read) {
      index_read = true;
      index = cache::LaunchIndex::open(cache_file_locked());
      if (pending) pending->times.cache_open_us = pending->laps.lap();
    }
    if (index) {
      if (auto found = index->find_winner(fingerprint, problem_key)) {
        out.config = checked_winner(r, found->config);
        ++counters.cache_hits;
        ++counters.index_hits;
        if (pending) pending->times.from_index = true;
        return out;
      }
      // Every writer of this library rewrites the index after a change, so an exact miss here is
      // one in the cache too, and the nearest tuned shape is the index's.
      if (policy == MissPolicy::nearest) {
        if (auto near = index->nearest_winner(fingerprint, d.name, r.dtype, r.shape)) {
          try {
            out.config = checked(r, near->config);
            out.source = ConfigSource::nearest;
            out.nearest_shape = near->shape;
            out.nearest_distance = near->distance;
            ++counters.nearest;
            ++counters.index_hits;
            if (pending) pending->times.from_index = true;
            return out;
          } catch (const std::exception&) {
            // Invalid for this shape: the cache's own search below says so and falls back.
          }
        }
      }
    }
    const bool opening = !store;
    cache::Store& s = store_locked();
    if (pending && opening) pending->times.cache_open_us += pending->laps.lap();
    ++counters.db_lookups;
    if (const auto winner = s.find_winner(fingerprint, problem_key)) {
      index_behind = true;
      out.config = checked_winner(r, parse_config(winner->config_json));
      ++counters.cache_hits;
      return out;
    }
    switch (policy) {
      case MissPolicy::fail:
        refuse(r, fmt::format("on {} in {}", device.name, cache_file_locked()));
      case MissPolicy::default_config:
        break;
      case MissPolicy::nearest: {
        ++counters.db_lookups;
        const auto near = s.nearest_winner(fingerprint, d.name, r.dtype, nlohmann::json(r.shape).dump());
        if (!near) {
          out.note = fmt::format("no tuned shape of {} {} on {}", d.name, r.dtype, device.name);
          break;
        }
        out.nearest_shape = nlohmann::json::parse(near->shape_json).get<Shape>();
        out.nearest_distance = near->distance;
        Config candidate;
        try {
          candidate = parse_config(near->config_json);
          out.config = checked(r, candidate);
          out.source = ConfigSource::nearest;
          ++counters.nearest;
          detail::logger().debug("runtime: {} runs the config of the nearest tuned shape {} (distance {:.2f}): {}",
                                 request_label(r), format_assignments(*out.nearest_shape), near->distance,
                                 format_assignments(out.config));
          return out;
        } catch (const std::exception& e) {
          out.note = fmt::format("the nearest tuned shape {} has config {}, invalid here: {}",
                                 format_assignments(*out.nearest_shape),
                                 candidate.empty() ? near->config_json : format_assignments(candidate), reason(e));
          detail::logger().info("runtime: {}: {}; using the default configuration", request_label(r), out.note);
        }
        break;
      }
      case MissPolicy::tune: {
        db.unlock();
        SweepSummary summary;
        {
          std::lock_guard<std::mutex> tuning(tune_mutex);
          SweepOptions sweep_options;
          sweep_options.db_path = cache_file();
          sweep_options.tune = options.tune;
          sweep_options.tune.device = options.device;
          detail::logger().info("runtime: no winner for {}; tuning it now", request_label(r));
          summary = sweep({Problem{d.name, r.dtype, r.shape, "gmjit::Runtime"}}, sweep_options);
        }
        db.lock();
        // The tuner rewrote the index with this winner; later problems may find theirs there.
        index = cache::LaunchIndex::open(cache_file_locked());
        ++counters.db_lookups;
        const auto winner = store_locked().find_winner(fingerprint, problem_key);
        if (!winner) {
          throw Error(ErrorKind::cache_miss, 0,
                      fmt::format("tuning {} on {} verified no configuration; nothing to launch", request_label(r),
                                  device.name));
        }
        out.config = checked(r, parse_config(winner->config_json));
        // Another process may have tuned it while we waited; then it is an ordinary hit.
        out.source = summary.tuned > 0 ? ConfigSource::tuned : ConfigSource::cache;
        ++(summary.tuned > 0 ? counters.tuned : counters.cache_hits);
        return out;
      }
    }
    out.config = checked(r, d.default_config);
    out.source = ConfigSource::default_config;
    ++counters.default_config;
    return out;
  }

  // The launch index's plan of exactly this problem (cache/launch_index.hpp), which spares the
  // first launch of a tuned problem the catalog's work. The device is acquired only when the
  // index plans this problem on some device, so bad arguments still fail before it, in the
  // catalog's check.
  std::optional<cache::LaunchIndex::Plan> find_plan(std::string_view kernel, const Shape& shape,
                                                    const std::string& dtype, const Tensors* tensors,
                                                    PendingLoad& pending) {
    {
      std::lock_guard<std::mutex> lock(db_mutex);
      if (!index_read) {
        try {
          index = cache::LaunchIndex::open(cache_file_locked());
        } catch (const Error&) {
          return std::nullopt;  // no cache path: the catalog's path reports it
        }
        index_read = true;
        pending.times.cache_open_us = pending.laps.lap();
      }
      const auto planned = index ? index->find_plan(std::string(), kernel, dtype, shape) : std::nullopt;
      if (!planned) return std::nullopt;
      if (tensors && tensors->size() != planned->tensor_names.size()) {
        wrong_tensor_count(std::string(kernel), planned->tensor_names, tensors->size());
      }
    }
    ensure_device(&pending);
    pending.laps.lap();
    std::lock_guard<std::mutex> lock(db_mutex);
    auto plan = index ? index->find_plan(fingerprint, kernel, dtype, shape) : std::nullopt;
    pending.times.lookup_us = pending.laps.lap();
    return plan;
  }

  static std::function<void(detail::KernelArgs&, const std::uint64_t*)> address_args(
      const templates::KernelDescriptor& kernel, const Config& config, const Shape& shape, const std::string& dtype) {
    if (!kernel.add_address_args) return {};
    return [hook = kernel.add_address_args, config, shape, info = templates::dtype_info(dtype)](
               detail::KernelArgs& args, const std::uint64_t* addresses) { hook(args, config, shape, info, addresses); };
  }

  static std::uint32_t tensor_alignment(const templates::KernelDescriptor& kernel, const Config& config,
                                        const Shape& shape) {
    return kernel.tensor_alignment ? kernel.tensor_alignment(config, shape) : 0;
  }

  // `plan` loaded: its cubin from the index, its launch as planned. nullptr when the index lacks
  // the cubin, for the catalog's path to find or compile it.
  std::shared_ptr<const Loaded> load_plan(const cache::LaunchIndex::Plan& plan, std::string_view kernel,
                                          const Shape& shape, PendingLoad& pending) {
    auto loaded = std::make_shared<Loaded>();
    loaded->kernel_name = std::string(kernel);
    loaded->tensor_names = plan.tensor_names;
    loaded->resolution = Resolution{loaded->kernel_name, plan.dtype, shape, plan.config, ConfigSource::cache,
                                    std::nullopt, 0, {}};
    CurrentContext current(*api, context->get());
    {
      std::lock_guard<std::mutex> lock(db_mutex);
      pending.laps.lap();
      auto binary = index ? cache::load_from_index(*index, plan.compile_key) : std::nullopt;
      if (!binary) return nullptr;
      loaded->module = std::move(binary->module);
      loaded->function = std::move(binary->kernel);
      pending.times.fetch_us = binary->fetch_us;
      pending.times.module_load_us = binary->module_load_us;
      pending.laps.lap();
    }
    ++counters.loads;
    ++counters.cache_hits;
    ++counters.index_hits;
    pending.times.from_index = true;
    pending.times.from_plan = true;
    loaded->geometry = plan.geometry;
    detail::prepare_launch(*loaded->function, loaded->geometry);
    if (plan.has_workspace) loaded->workspace = templates::WorkspaceNeed{plan.workspace_bytes, plan.workspace_layout};
    for (const auto& slot : plan.scalars) loaded->scalars.add(slot);
    const auto& descriptor = templates::find_kernel(loaded->kernel_name);
    loaded->address_args = address_args(descriptor, plan.config, shape, plan.dtype);
    loaded->alignment = tensor_alignment(descriptor, plan.config, shape);
    void** pointers = loaded->scalars.pointers();
    loaded->scalar_pointers.assign(pointers, pointers + loaded->scalars.size());
    pending.times.prepare_us = pending.laps.lap();
    return loaded;
  }

  std::shared_ptr<const Loaded> load(const Request& r, MissPolicy policy, PendingLoad& pending) {
    auto loaded = std::make_shared<Loaded>();
    loaded->kernel_name = r.descriptor->name;
    loaded->tensor_names = r.tensor_names;
    loaded->resolution = resolve_request(r, policy, &pending);
    const Config& config = loaded->resolution.config;
    const auto source = codegen::specialize(*r.descriptor, r.shape, r.dtype, config);
    const double specialize_us = pending.laps.lap();
    CurrentContext current(*api, context->get());
    {
      // Compiles of different problems queue here; they happen once per problem and cache.
      std::lock_guard<std::mutex> lock(db_mutex);
      pending.laps.lap();
      std::optional<cache::LoadedBinary> indexed;
      if (index) indexed = cache::load_from_index(*index, source, device.arch);
      if (!indexed) pending.times.from_index = false;
      auto binary = indexed ? std::move(*indexed) : cache::load_through_cache(store_locked(), source, device.arch);
      pending.laps.lap();
      if (index_behind) {
        index_behind = false;
        cache::try_publish_launch_index(store_locked());
        index = cache::LaunchIndex::open(cache_file_locked());
        pending.laps.lap();  // a one-off rewrite, no stage of a launch
      }
      if (!binary.from_cache) ++counters.compiles;
      loaded->module = std::move(binary.module);
      loaded->function = std::move(binary.kernel);
      pending.times.compile_key_us = specialize_us + binary.compile_key_us;
      pending.times.fetch_us = binary.fetch_us;
      pending.times.compile_us = binary.compile_us;
      pending.times.module_load_us = binary.module_load_us;
    }
    ++counters.loads;
    loaded->geometry = r.descriptor->geometry(config, r.shape, templates::dtype_info(r.dtype));
    detail::prepare_launch(*loaded->function, loaded->geometry);
    if (r.descriptor->workspace) loaded->workspace = r.descriptor->workspace(r.shape);
    r.descriptor->add_scalars(loaded->scalars, r.shape);
    loaded->address_args = address_args(*r.descriptor, config, r.shape, r.dtype);
    loaded->alignment = tensor_alignment(*r.descriptor, config, r.shape);
    void** pointers = loaded->scalars.pointers();
    loaded->scalar_pointers.assign(pointers, pointers + loaded->scalars.size());
    pending.times.prepare_us = pending.laps.lap();
    detail::logger().debug("runtime: loaded {} with {} ({})", request_label(r), format_assignments(config),
                           to_string(loaded->resolution.source));
    pending.laps.lap();
    return loaded;
  }

  // The loaded kernel of a problem: from memory when this Runtime has launched it, otherwise
  // resolved and loaded once (concurrent first launches of one problem wait for one load). When
  // this call loads it, `pending` is set, with the stages' times.
  const Loaded& find_or_load(std::string_view kernel, const Shape& shape, const LaunchOptions& launch_options,
                             const Tensors* tensors, std::optional<PendingLoad>& this_load) {
    const std::uint64_t hash = key_hash(kernel, launch_options.dtype, shape);
    std::shared_future<std::shared_ptr<const Loaded>> pending;
    {
      std::lock_guard<std::mutex> lock(map_mutex);
      if (const Entry* e = find_locked(hash, kernel, launch_options.dtype, shape)) {
        if (const Loaded* ready = e->ready.load(std::memory_order_acquire)) {
          ++counters.memory_hits;
          return *ready;
        }
        pending = e->future;
      }
    }
    if (pending.valid()) return *pending.get();

    PendingLoad& stages = this_load.emplace();
    const auto plan = find_plan(kernel, shape, launch_options.dtype, tensors, stages);
    std::optional<Request> request;
    const auto check_arguments = [&] {
      request = check_request(kernel, shape, launch_options.dtype);
      if (tensors && tensors->size() != request->tensor_names.size()) {
        wrong_tensor_count(request->descriptor->name, request->tensor_names, tensors->size());
      }
    };
    // Bad arguments are rejected here, before the device or the cache, and leave no entry.
    if (!plan) check_arguments();
    std::promise<std::shared_ptr<const Loaded>> promise;
    Entry* entry = nullptr;
    {
      std::lock_guard<std::mutex> lock(map_mutex);
      if (const Entry* e = find_locked(hash, kernel, launch_options.dtype, shape)) {
        pending = e->future;
      } else {
        auto fresh = std::make_unique<Entry>();
        fresh->kernel = std::string(kernel);
        fresh->dtype = launch_options.dtype;
        fresh->shape = shape;
        fresh->future = promise.get_future().share();
        entry = fresh.get();
        entries.emplace(hash, std::move(fresh));
      }
    }
    if (!entry) {
      this_load.reset();
      return *pending.get();
    }
    if (!plan) stages.times.check_us = stages.laps.lap();

    try {
      // The plan is loaded under the entry, so concurrent first launches load its module once.
      std::shared_ptr<const Loaded> loaded = plan ? load_plan(*plan, kernel, shape, stages) : nullptr;
      if (!loaded) {
        if (!request) check_arguments();
        loaded = load(*request, launch_options.miss_policy.value_or(options.miss_policy), stages);
      }
      entry->ready.store(loaded.get(), std::memory_order_release);
      promise.set_value(loaded);
      return *loaded;
    } catch (...) {
      // A failed problem is forgotten, so a later launch tries again (the cache may be filled by then).
      promise.set_exception(std::current_exception());
      std::lock_guard<std::mutex> lock(map_mutex);
      const auto range = entries.equal_range(hash);
      for (auto it = range.first; it != range.second; ++it) {
        if (it->second.get() == entry) {
          entries.erase(it);
          break;
        }
      }
      throw;
    }
  }

  const Entry* find_locked(std::uint64_t hash, std::string_view kernel, std::string_view dtype, const Shape& shape) const {
    const auto range = entries.equal_range(hash);
    for (auto it = range.first; it != range.second; ++it) {
      if (it->second->is(kernel, dtype, shape)) return it->second.get();
    }
    return nullptr;
  }
};

Runtime::Runtime(RuntimeOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
Runtime::~Runtime() = default;
Runtime::Runtime(Runtime&&) noexcept = default;
Runtime& Runtime::operator=(Runtime&&) noexcept = default;

void Runtime::launch(std::string_view kernel, const Shape& shape, Tensors tensors, void* stream,
                     const LaunchOptions& options) {
  std::optional<PendingLoad> this_load;
  const Impl::Loaded& loaded = impl_->find_or_load(kernel, shape, options, &tensors, this_load);
  const std::size_t n_tensors = loaded.tensor_names.size();
  if (tensors.size() != n_tensors) wrong_tensor_count(loaded.kernel_name, loaded.tensor_names, tensors.size());
  const std::size_t n_buffers = n_tensors + (loaded.workspace ? 1 : 0);
  // Every built-in kernel has a handful of arguments: the common case allocates nothing.
  constexpr std::size_t kInline = 16;
  std::array<CUdeviceptr, kInline> inline_addresses;
  std::vector<CUdeviceptr> heap_addresses;
  CUdeviceptr* addresses = inline_addresses.data();
  if (n_buffers > kInline) {
    heap_addresses.resize(n_buffers);
    addresses = heap_addresses.data();
  }
  for (std::size_t i = 0; i < n_tensors; ++i) {
    addresses[i] = static_cast<CUdeviceptr>(tensors[i].address());
    if (addresses[i] == 0) {
      throw Error(ErrorKind::usage, 0,
                  fmt::format("{}: tensor '{}' (argument {}) is a null pointer", loaded.kernel_name,
                              loaded.tensor_names[i], i));
    }
    if (loaded.alignment > 1 && addresses[i] % loaded.alignment != 0) {
      throw Error(ErrorKind::usage, 0,
                  fmt::format("{}: tensor '{}' (argument {}) at {:#x} is not {}-byte aligned, and its configuration "
                              "at this shape ({}) moves it in {}-byte pieces; device allocations are aligned, so pass "
                              "a view that starts a multiple of {} bytes in",
                              loaded.kernel_name, loaded.tensor_names[i], i, addresses[i], loaded.alignment,
                              format_assignments(loaded.resolution.config), loaded.alignment, loaded.alignment));
    }
  }
  detail::KernelArgs derived;
  if (loaded.address_args) {
    static_assert(sizeof(CUdeviceptr) == sizeof(std::uint64_t), "device addresses are 64-bit");
    loaded.address_args(derived, reinterpret_cast<const std::uint64_t*>(addresses));
  }
  const std::size_t n_args = n_buffers + loaded.scalar_pointers.size() + derived.size();
  std::array<void*, kInline> inline_args;
  std::vector<void*> heap_args;
  void** args = inline_args.data();
  if (n_args > kInline) {
    heap_args.resize(n_args);
    args = heap_args.data();
  }
  for (std::size_t i = 0; i < n_tensors; ++i) args[i] = &addresses[i];
  for (std::size_t j = 0; j < loaded.scalar_pointers.size(); ++j) args[n_buffers + j] = loaded.scalar_pointers[j];
  if (derived.size() > 0) {
    void** derived_pointers = derived.pointers();
    std::copy(derived_pointers, derived_pointers + derived.size(), args + n_buffers + loaded.scalar_pointers.size());
  }
  CurrentContext current(*impl_->api, impl_->context->get());
  const auto cu_stream = static_cast<CUstream>(stream);
  if (!loaded.workspace) {
    if (this_load) this_load->laps.lap();
    detail::launch_prepared(*loaded.function, loaded.geometry, args, cu_stream);
  } else {
    Impl::StreamWorkspace& workspace = impl_->workspace_for(stream, loaded.kernel_name);
    std::lock_guard<std::mutex> lock(workspace.mutex);
    const std::uint64_t before = workspace.buffer.allocations();
    addresses[n_tensors] = workspace.buffer.prepare(static_cast<std::size_t>(loaded.workspace->bytes),
                                                    loaded.workspace->layout, cu_stream);
    args[n_tensors] = &addresses[n_tensors];
    impl_->counters.workspace_allocations += workspace.buffer.allocations() - before;
    if (this_load) this_load->laps.lap();
    detail::launch_prepared(*loaded.function, loaded.geometry, args, cu_stream);
  }
  ++impl_->counters.launches;
  if (this_load) {
    this_load->times.launch_us = this_load->laps.lap();
    this_load->times.total_us = this_load->laps.total();
    std::lock_guard<std::mutex> lock(impl_->times_mutex);
    impl_->last_load = this_load->times;
  }
}

void Runtime::release_workspaces(void* stream) {
  const StreamKey key = stream_key(stream);
  std::vector<std::unique_ptr<Impl::StreamWorkspace>> released;
  {
    std::lock_guard<std::mutex> lock(impl_->workspace_mutex);
    for (auto it = impl_->workspaces.begin(); it != impl_->workspaces.end();) {
      if (!(it->first.first < key) && !(key < it->first.first)) {
        released.push_back(std::move(it->second));
        it = impl_->workspaces.erase(it);
      } else {
        ++it;
      }
    }
  }
  if (released.empty()) return;
  CurrentContext current(*impl_->api, impl_->context->get());
  GMJIT_CU(impl_->api->cuStreamSynchronize(static_cast<CUstream>(stream)));
  released.clear();
}

Resolution Runtime::resolve(std::string_view kernel, const Shape& shape, const LaunchOptions& options) {
  const std::uint64_t hash = key_hash(kernel, options.dtype, shape);
  std::shared_future<std::shared_ptr<const Impl::Loaded>> pending;
  {
    std::lock_guard<std::mutex> lock(impl_->map_mutex);
    if (const Impl::Entry* e = impl_->find_locked(hash, kernel, options.dtype, shape)) {
      if (const Impl::Loaded* ready = e->ready.load(std::memory_order_acquire)) return ready->resolution;
      pending = e->future;
    }
  }
  if (pending.valid()) return pending.get()->resolution;
  return impl_->resolve_request(check_request(kernel, shape, options.dtype),
                                options.miss_policy.value_or(impl_->options.miss_policy));
}

RuntimeStats Runtime::stats() const {
  const auto& c = impl_->counters;
  RuntimeStats s;
  s.launches = c.launches.load();
  s.memory_hits = c.memory_hits.load();
  s.cache_hits = c.cache_hits.load();
  s.nearest = c.nearest.load();
  s.default_config = c.default_config.load();
  s.tuned = c.tuned.load();
  s.failed = c.failed.load();
  s.db_lookups = c.db_lookups.load();
  s.index_hits = c.index_hits.load();
  s.compiles = c.compiles.load();
  s.loads = c.loads.load();
  s.workspace_allocations = c.workspace_allocations.load();
  {
    std::lock_guard<std::mutex> lock(impl_->workspace_mutex);
    s.workspaces = impl_->workspaces.size();
    for (const auto& [key, workspace] : impl_->workspaces) {
      std::lock_guard<std::mutex> held(workspace->mutex);
      s.workspace_bytes += workspace->buffer.bytes_held();
    }
  }
  std::lock_guard<std::mutex> times_lock(impl_->times_mutex);
  s.last_load = impl_->last_load;
  return s;
}

const RuntimeOptions& Runtime::options() const { return impl_->options; }

std::string Runtime::db_path() const { return impl_->cache_file(); }

}  // namespace gmjit
