// What Runtime::launch costs. Two tables, not a test:
//
// 1. The first launch from a warm cache, as an application meets it: a fresh process (this
//    binary again, with --child) whose CUDA context exists before the clock starts, timed from
//    Runtime construction to the return of its first launch. The cache is prepared in this run:
//    a winner recorded for each tuned problem and its cubin compiled into the binary cache; the
//    "new shape" rows have no winner of their own and run the nearest one's configuration, whose
//    cubin is the same (the shape is not in the generated source). Beside each: the same cubin
//    loaded and launched through the driver alone (module load, function, launch), the floor no
//    library goes under; and the context either fresh (nothing launched in it yet) or used (one
//    other kernel launched before), since a context's first launch costs the driver more.
//    RuntimeStats::last_load names the stages. Medians over --processes processes.
// 2. A launch once loaded: Runtime::launch on a hit next to a raw cuLaunchKernel of the same
//    cubin, per-call medians over batches.
//
// Without a GPU it prepares the cache (NVRTC), times the CPU stages of the load path in fresh
// processes, and says that the rest needs a device.
#include <dlfcn.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cache/binaries.hpp"
#include "cache/keys.hpp"
#include "cache/launch_index.hpp"
#include "cache/store.hpp"
#include "codegen/compiler.hpp"
#include "core/device.hpp"
#include "core/laps.hpp"
#include "core/module.hpp"
#include "gmjit/runtime.hpp"
#include "templates/registry.hpp"

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;
using namespace gmjit;
namespace fs = std::filesystem;

constexpr int kBatch = 100;  // launches per timed sample: small enough never to fill the launch queue
constexpr int kSamples = 300;

// ---------------------------------------------------------------------------------------------
// The problems of the first-launch table.

struct Case {
  std::string label;
  std::string kernel;
  Shape shape;
  // The winner recorded for `winner_shape` (the case's own shape, or the tuned shape a new shape
  // is nearest to); its cubin is compiled into the binary cache.
  Config config;
  Shape winner_shape;
  MissPolicy policy;
  double target_us;
};

std::vector<Case> cases() {
  const Config vector_add{{"block", 256}, {"items", 4}, {"vec_bytes", 16}};
  // sgemm 4096^3's winner on the H200 (bench/NOTES.md): the largest tile and cubin (43 KiB;
  // 161 KiB while compiles kept -lineinfo, which embeds the PTX text).
  const Config sgemm{{"bm", 128}, {"bn", 128}, {"bk", 16}, {"tm", 8}, {"tn", 8}, {"vec", 1}, {"wm", 0}};
  const Shape square{{"m", 4096}, {"n", 4096}, {"k", 4096}};
  return {
      {"vector_add fp32 n=2^24", "vector_add", {{"n", 1 << 24}}, vector_add, {{"n", 1 << 24}}, MissPolicy::fail, 500},
      {"sgemm fp32 4096^3", "sgemm", square, sgemm, square, MissPolicy::fail, 500},
      {"vector_add n=3*2^22, new shape", "vector_add", {{"n", 3 << 22}}, vector_add, {{"n", 1 << 24}},
       MissPolicy::nearest, 1000},
      {"sgemm 2048x4096x4096, new shape", "sgemm", {{"m", 2048}, {"n", 4096}, {"k", 4096}}, sgemm, square,
       MissPolicy::nearest, 1000},
  };
}

std::string json_shape(const Shape& shape) { return nlohmann::json(shape).dump(); }
Shape parse_shape(const std::string& text) { return nlohmann::json::parse(text).get<Shape>(); }

// ---------------------------------------------------------------------------------------------
// The driver as an application reaches it before it ever meets gmjit: its own dlopen, a few
// entry points, the primary context. Nothing of the library's driver table is touched, so the
// Runtime's first launch pays for that as it would in an application.

struct RawDriver {
  void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  template <class F>
  F get(const char* name) const {
    void* f = handle ? dlsym(handle, name) : nullptr;
    if (!f) throw std::runtime_error(std::string("libcuda.so.1 has no ") + name);
    return reinterpret_cast<F>(f);
  }
  decltype(&cuInit) init = get<decltype(&cuInit)>("cuInit");
  decltype(&cuDeviceGet) device_get = get<decltype(&cuDeviceGet)>("cuDeviceGet");
  decltype(&cuDevicePrimaryCtxRetain) retain = get<decltype(&cuDevicePrimaryCtxRetain)>("cuDevicePrimaryCtxRetain");
  decltype(&cuCtxSetCurrent) set_current = get<decltype(&cuCtxSetCurrent)>("cuCtxSetCurrent");
  decltype(&cuCtxSynchronize) synchronize = get<decltype(&cuCtxSynchronize)>("cuCtxSynchronize");
  decltype(&cuMemAlloc) alloc = get<decltype(&cuMemAlloc)>("cuMemAlloc_v2");
  decltype(&cuModuleLoadData) load = get<decltype(&cuModuleLoadData)>("cuModuleLoadData");
  decltype(&cuModuleGetFunction) function = get<decltype(&cuModuleGetFunction)>("cuModuleGetFunction");
  decltype(&cuLaunchKernel) launch = get<decltype(&cuLaunchKernel)>("cuLaunchKernel");

  void check(CUresult r, const char* what) const {
    if (r != CUDA_SUCCESS) throw std::runtime_error(fmt::format("{} failed: CUresult {}", what, static_cast<int>(r)));
  }
};

// What a child needs to launch without the catalog (which the Runtime's clock must pay for).
struct LaunchSpec {
  std::vector<std::int64_t> tensor_bytes;
  std::vector<std::string> scalar_slots;  // 16 bytes each, hex
  LaunchGeometry geometry;
  std::string lowered_name;
  std::string cubin_file;
  std::string compile_key;  // of the cubin, for the children that read it from the launch index
};

std::string hex(const unsigned char* bytes, std::size_t n) {
  std::string out;
  for (std::size_t i = 0; i < n; ++i) out += fmt::format("{:02x}", bytes[i]);
  return out;
}

nlohmann::json to_json(const LaunchSpec& s) {
  const auto& g = s.geometry;
  return {{"tensor_bytes", s.tensor_bytes},
          {"scalars", s.scalar_slots},
          {"grid", {g.grid[0], g.grid[1], g.grid[2]}},
          {"block", {g.block[0], g.block[1], g.block[2]}},
          {"shared", g.dynamic_shared_bytes},
          {"lowered_name", s.lowered_name},
          {"cubin_file", s.cubin_file},
          {"compile_key", s.compile_key}};
}

LaunchSpec spec_from_json(const nlohmann::json& j) {
  LaunchSpec s;
  s.tensor_bytes = j.at("tensor_bytes").get<std::vector<std::int64_t>>();
  s.scalar_slots = j.at("scalars").get<std::vector<std::string>>();
  for (int i = 0; i < 3; ++i) {
    s.geometry.grid[i] = j.at("grid")[i].get<unsigned>();
    s.geometry.block[i] = j.at("block")[i].get<unsigned>();
  }
  s.geometry.dynamic_shared_bytes = j.at("shared").get<unsigned>();
  s.lowered_name = j.at("lowered_name").get<std::string>();
  s.cubin_file = j.at("cubin_file").get<std::string>();
  s.compile_key = j.value("compile_key", std::string());
  return s;
}

struct alignas(16) Slot {
  unsigned char bytes[16];
};

std::vector<char> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Launches `spec` through the driver alone; returns the microseconds of (load, function, launch).
// The image is the cubin file read into a vector, or (`index` set) the launch index's mapping of
// it, the bytes the Runtime hands the driver.
std::array<double, 3> raw_launch(const RawDriver& d, const LaunchSpec& spec, const std::vector<CUdeviceptr>& tensors,
                                 const cache::LaunchIndex* index = nullptr) {
  const std::vector<char> file_image = index ? std::vector<char>() : read_file(spec.cubin_file);
  const std::optional<cache::LaunchIndex::IndexedCubin> mapped =
      index ? index->find_cubin(spec.compile_key) : std::nullopt;
  if (index && !mapped) throw std::runtime_error("the launch index lacks " + spec.compile_key);
  const char* const image = mapped ? mapped->data() : file_image.data();
  std::vector<Slot> slots(spec.scalar_slots.size());
  for (std::size_t i = 0; i < slots.size(); ++i) {
    for (std::size_t b = 0; b < 16; ++b) slots[i].bytes[b] = static_cast<unsigned char>(std::stoi(spec.scalar_slots[i].substr(2 * b, 2), nullptr, 16));
  }
  std::vector<CUdeviceptr> addresses(tensors.begin(), tensors.begin() + static_cast<long>(spec.tensor_bytes.size()));
  std::vector<void*> args;
  for (auto& a : addresses) args.push_back(&a);
  for (auto& s : slots) args.push_back(s.bytes);
  detail::Laps laps;
  CUmodule module = nullptr;
  d.check(d.load(&module, image), "cuModuleLoadData");
  const double load_us = laps.lap();
  CUfunction function = nullptr;
  d.check(d.function(&function, module, spec.lowered_name.c_str()), "cuModuleGetFunction");
  const double function_us = laps.lap();
  const auto& g = spec.geometry;
  d.check(d.launch(function, g.grid[0], g.grid[1], g.grid[2], g.block[0], g.block[1], g.block[2],
                   g.dynamic_shared_bytes, nullptr, args.data(), nullptr),
          "cuLaunchKernel");
  return {load_us, function_us, laps.lap()};
}

// ---------------------------------------------------------------------------------------------
// Children: one first launch each, printed as one JSON line.

// --child runtime|raw --context fresh|used --spec FILE --case I --db FILE
int child(const std::map<std::string, std::string>& args) {
  const std::string mode = args.at("--child");
  const Case c = cases().at(std::stoul(args.at("--case")));
  nlohmann::json out;
  if (mode == "cpu-plan") {
    // The CPU stages of a first load that the launch index plans: no catalog code.
    detail::Laps laps;
    const auto index = cache::LaunchIndex::open(args.at("--db"));
    out["cache_open_us"] = laps.lap();
    if (!index) throw std::runtime_error("no launch index beside the cache");
    const auto plan = index->find_plan(args.at("--device-key"), c.kernel, "fp32", c.shape);
    out["lookup_us"] = laps.lap();
    out["planned"] = plan.has_value();
    if (plan) {
      if (!index->find_cubin(plan->compile_key)) throw std::runtime_error("no cubin in the launch index");
      out["fetch_us"] = laps.lap();
    } else {
      out["fetch_us"] = 0.0;
    }
    out["total_us"] = laps.total();
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  if (mode == "cpu") {
    // The CPU stages of the load path, in the order the Runtime takes them, with the device
    // record the parent wrote: what this machine can time without a GPU.
    detail::Laps laps;
    const auto& d = templates::find_kernel(c.kernel);
    templates::normalize_problem(d, c.shape, "fp32");
    d.tensors(c.shape);
    out["check_us"] = laps.lap();
    const std::string problem_key =
        cache::problem_key(d.name, templates::template_hash(d.header), "fp32", cache::kRowMajor, c.shape);
    out["keys_us"] = laps.lap();
    const auto index = cache::LaunchIndex::open(args.at("--db"));
    out["cache_open_us"] = laps.lap();
    if (!index) throw std::runtime_error("no launch index beside the cache");
    const std::string device_key = args.at("--device-key");
    Config config;
    if (const auto winner = index->find_winner(device_key, problem_key)) {
      config = winner->config;
    } else {
      const auto near = index->nearest_winner(device_key, d.name, "fp32", c.shape);
      if (!near) throw std::runtime_error("no winner");
      config = near->config;
    }
    config = templates::resolve_config(d, c.shape, "fp32", config);
    out["lookup_us"] = laps.lap();
    const auto source = codegen::specialize(d, c.shape, "fp32", config);
    const std::string key = codegen::compile_key(source, args.at("--arch"));
    out["compile_key_us"] = laps.lap();
    const auto cubin = index->find_cubin(key);
    out["fetch_us"] = laps.lap();
    if (!cubin) throw std::runtime_error("no cubin in the launch index");
    out["total_us"] = laps.total();
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }

  const nlohmann::json specs = nlohmann::json::parse(read_file(args.at("--spec")));
  const LaunchSpec spec = spec_from_json(specs.at("cases").at(std::stoul(args.at("--case"))));
  RawDriver d;
  d.check(d.init(0), "cuInit");
  CUdevice device = 0;
  d.check(d.device_get(&device, 0), "cuDeviceGet");
  CUcontext context = nullptr;
  d.check(d.retain(&context, device), "cuDevicePrimaryCtxRetain");
  d.check(d.set_current(context), "cuCtxSetCurrent");
  std::vector<CUdeviceptr> tensors;
  for (const std::int64_t bytes : spec.tensor_bytes) {
    CUdeviceptr p = 0;
    d.check(d.alloc(&p, static_cast<std::size_t>(bytes)), "cuMemAlloc");
    tensors.push_back(p);
  }
  if (args.at("--context") == "used") {
    const LaunchSpec warmup = spec_from_json(specs.at("warmup"));
    raw_launch(d, warmup, tensors);
    d.check(d.synchronize(), "cuCtxSynchronize (warm-up)");
  }
  if (mode == "raw" || mode == "raw-index") {
    std::optional<cache::LaunchIndex> index;
    if (mode == "raw-index") {
      index = cache::LaunchIndex::open(args.at("--db"));
      if (!index) throw std::runtime_error("no launch index beside the cache");
    }
    const auto [load_us, function_us, launch_us] = raw_launch(d, spec, tensors, index ? &*index : nullptr);
    d.check(d.synchronize(), "cuCtxSynchronize");
    out = {{"load_us", load_us}, {"function_us", function_us}, {"launch_us", launch_us},
           {"total_us", load_us + function_us + launch_us}};
  } else {
    std::vector<DevicePtr> pointers(tensors.begin(), tensors.end());
    RuntimeOptions options;
    options.db_path = args.at("--db");
    options.miss_policy = c.policy;
    const auto start = Clock::now();
    Runtime runtime(options);
    runtime.launch(c.kernel, c.shape, pointers);
    const double total_us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
    d.check(d.synchronize(), "cuCtxSynchronize");
    const RuntimeStats stats = runtime.stats();
    const LoadTimes& t = stats.last_load;
    out = {{"outside_us", total_us},
           {"check_us", t.check_us},
           {"driver_us", t.driver_us},
           {"device_us", t.device_us},
           {"keys_us", t.keys_us},
           {"cache_open_us", t.cache_open_us},
           {"lookup_us", t.lookup_us},
           {"compile_key_us", t.compile_key_us},
           {"fetch_us", t.fetch_us},
           {"compile_us", t.compile_us},
           {"module_load_us", t.module_load_us},
           {"prepare_us", t.prepare_us},
           {"launch_us", t.launch_us},
           {"total_us", t.total_us},
           {"compiles", stats.compiles},
           {"from_index", t.from_index},
           {"from_plan", t.from_plan},
           {"source", to_string(runtime.resolve(c.kernel, c.shape).source)}};
  }
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

// Runs this binary with `args` and returns the JSON line it printed.
nlohmann::json run_child(const std::vector<std::string>& args) {
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) throw std::runtime_error("pipe failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, pipe_fds[0]);
  std::vector<std::string> argv_strings{"/proc/self/exe"};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_strings) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, "/proc/self/exe", &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(pipe_fds[1]);
  std::string output;
  char buffer[4096];
  for (ssize_t n; (n = read(pipe_fds[0], buffer, sizeof buffer)) > 0;) output.append(buffer, static_cast<std::size_t>(n));
  close(pipe_fds[0]);
  int status = 0;
  if (rc == 0) waitpid(pid, &status, 0);
  if (rc != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    throw std::runtime_error(fmt::format("child {} failed: {}", fmt::join(args, " "), output));
  }
  const auto line = output.substr(0, output.find('\n'));
  return nlohmann::json::parse(line);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Median of `field` over the children's lines.
double median_of(const std::vector<nlohmann::json>& lines, const std::string& field) {
  std::vector<double> v;
  for (const auto& line : lines) v.push_back(line.at(field).get<double>());
  return median(v);
}

// ---------------------------------------------------------------------------------------------
// The parent.

struct Prepared {
  fs::path db;
  fs::path spec_file;
  std::string device_key;
  std::string arch;
  std::vector<std::string> notes;
};

// Records each tuned case's winner and compiles its cubin into the binary cache; writes each
// case's cubin and launch to the spec file for the driver-alone children.
Prepared prepare(const fs::path& dir, const DeviceInfo& device) {
  Prepared p;
  p.db = dir / "cache" / "gmjit.db";
  p.spec_file = dir / "launches.json";
  p.device_key = device.fingerprint();
  p.arch = device.arch;
  cache::Store store(p.db);
  const cache::DeviceRecord device_record{device.fingerprint(), device.name, device.arch, device.to_json()};
  nlohmann::json specs;
  auto write_spec = [&](const std::string& name, const templates::KernelDescriptor& d, const std::string& dtype,
                        const Shape& shape, const Config& config) {
    const auto source = codegen::specialize(d, shape, dtype, config);
    const auto compiled = codegen::shared_compiler().compile(source, device.arch).module;
    LaunchSpec spec;
    const auto& info = templates::dtype_info(dtype);
    for (const auto& t : d.tensors(shape)) {
      spec.tensor_bytes.push_back(t.elements * templates::tensor_dtype(t, info).bytes);
    }
    detail::KernelArgs scalars;
    d.add_scalars(scalars, shape);
    void** pointers = scalars.pointers();
    for (std::size_t i = 0; i < scalars.size(); ++i) {
      spec.scalar_slots.push_back(hex(static_cast<const unsigned char*>(pointers[i]), 16));
    }
    spec.geometry = d.geometry(config, shape, info);
    spec.lowered_name = compiled->lowered_name;
    spec.cubin_file = (dir / (name + ".cubin")).string();
    spec.compile_key = compiled->compile_key;
    std::ofstream(spec.cubin_file, std::ios::binary)
        .write(compiled->cubin.data(), static_cast<std::streamsize>(compiled->cubin.size()));
    return std::make_pair(to_json(spec), compiled);
  };
  for (std::size_t i = 0; i < cases().size(); ++i) {
    const Case c = cases()[i];
    const auto& d = templates::find_kernel(c.kernel);
    const Config config = templates::resolve_config(d, c.shape, "fp32", c.config);
    auto [spec, compiled] = write_spec(fmt::format("case{}", i), d, "fp32", c.shape, config);
    specs["cases"].push_back(spec);
    if (c.shape == c.winner_shape) {
      const std::string template_hash = templates::template_hash(d.header);
      const cache::ProblemRecord problem{cache::problem_key(d.name, template_hash, "fp32", cache::kRowMajor, c.shape),
                                         d.name, template_hash, "fp32", cache::kRowMajor, json_shape(c.shape)};
      cache::TrialRecord trial;
      trial.config_json = nlohmann::json(config).dump();
      trial.status = "ok";
      trial.median_ms = 1;
      trial.repetitions = 1;
      store.record_tuning(device_record, problem, {trial}, 0, "bench_runtime");
      cache::store_binary(store, *compiled);
    } else {
      // The new shape's cubin is the nearest winner's only when their name expressions agree.
      const auto tuned = codegen::specialize(d, c.winner_shape, "fp32", config);
      if (codegen::compile_key(tuned, device.arch) != compiled->compile_key) {
        p.notes.push_back(fmt::format("{}: its cubin differs from the nearest winner's, so it compiles", c.label));
      }
    }
  }
  // As gmtune does after recording: the Runtime's first launches read this index.
  cache::publish_launch_index(store);
  // Warm-up kernel of the "used" context: another module, launched once on one block.
  const auto& warm = templates::find_kernel("vector_add");
  const Shape warm_shape{{"n", 256}};
  auto [warm_spec, warm_compiled] = write_spec("warmup", warm, "fp16", warm_shape,
                                               templates::resolve_config(warm, warm_shape, "fp16", {}));
  specs["warmup"] = warm_spec;
  std::ofstream(p.spec_file) << specs.dump();
  return p;
}

void print_cpu_table(const Prepared& p, int processes) {
  std::printf("\nCPU stages of a first load from the warm cache, fresh process, no driver (median us of %d)\n",
              processes);
  const std::vector<std::string> stages = {"check_us", "keys_us", "cache_open_us", "lookup_us", "compile_key_us",
                                           "fetch_us", "total_us"};
  std::printf("%-34s", "problem");
  for (const auto& s : stages) std::printf(" %13s", s.substr(0, s.size() - 3).c_str());
  std::printf("\n");
  for (std::size_t i = 0; i < cases().size(); ++i) {
    std::vector<nlohmann::json> lines;
    for (int r = 0; r < processes; ++r) {
      lines.push_back(run_child({"--child", "cpu", "--case", std::to_string(i), "--db", p.db.string(), "--device-key",
                                 p.device_key, "--arch", p.arch}));
    }
    std::printf("%-34s", cases()[i].label.c_str());
    for (const auto& s : stages) std::printf(" %13.1f", median_of(lines, s));
    std::printf("\n");
  }
  std::printf("\nthe same, when the launch index plans the launch (no catalog code; new shapes have no plan)\n");
  const std::vector<std::string> plan_stages = {"cache_open_us", "lookup_us", "fetch_us", "total_us"};
  std::printf("%-34s", "problem");
  for (const auto& s : plan_stages) std::printf(" %13s", s.substr(0, s.size() - 3).c_str());
  std::printf(" %8s\n", "planned");
  for (std::size_t i = 0; i < cases().size(); ++i) {
    std::vector<nlohmann::json> lines;
    for (int r = 0; r < processes; ++r) {
      lines.push_back(run_child({"--child", "cpu-plan", "--case", std::to_string(i), "--db", p.db.string(),
                                 "--device-key", p.device_key, "--arch", p.arch}));
    }
    std::printf("%-34s", cases()[i].label.c_str());
    for (const auto& s : plan_stages) std::printf(" %13.1f", median_of(lines, s));
    std::printf(" %8s\n", lines.front().at("planned").get<bool>() ? "yes" : "no");
  }
}

void print_first_launch_tables(const Prepared& p, int processes) {
  const std::vector<std::string> contexts = {"fresh", "used"};
  std::map<std::pair<std::size_t, std::string>, std::vector<nlohmann::json>> runtime_lines, raw_lines,
      raw_index_lines;
  for (std::size_t i = 0; i < cases().size(); ++i) {
    for (const auto& context : contexts) {
      for (int r = 0; r < processes; ++r) {
        const std::vector<std::string> common = {"--case", std::to_string(i), "--context", context, "--db",
                                                 p.db.string(), "--spec", p.spec_file.string()};
        std::vector<std::string> args = {"--child", "runtime"};
        args.insert(args.end(), common.begin(), common.end());
        runtime_lines[{i, context}].push_back(run_child(args));
        args[1] = "raw";
        raw_lines[{i, context}].push_back(run_child(args));
        if (i < cases().size() && cases()[i].shape == cases()[i].winner_shape) {
          args[1] = "raw-index";
          raw_index_lines[{i, context}].push_back(run_child(args));
        }
      }
    }
  }
  std::printf("\nfirst launch from a warm cache: fresh process, CUDA context created before the clock; "
              "median us of %d processes\n",
              processes);
  std::printf("%-34s %-8s %12s %12s %10s %8s %s\n", "problem", "context", "Runtime", "driver alone", "target", "met",
              "config from / compiles / launch index / plan");
  for (std::size_t i = 0; i < cases().size(); ++i) {
    for (const auto& context : contexts) {
      const auto& lines = runtime_lines[{i, context}];
      const double total = median_of(lines, "outside_us");
      std::printf("%-34s %-8s %12.1f %12.1f %10.0f %8s %s / %s / %s / %s\n", cases()[i].label.c_str(), context.c_str(),
                  total,
                  median_of(raw_lines[{i, context}], "total_us"), cases()[i].target_us,
                  total < cases()[i].target_us ? "yes" : "no", lines.front().at("source").get<std::string>().c_str(),
                  lines.front().at("compiles").dump().c_str(),
                  lines.front().at("from_index").get<bool>() ? "yes" : "no",
                  lines.front().at("from_plan").get<bool>() ? "yes" : "no");
    }
  }
  for (const auto& context : contexts) {
    std::printf("\nwhere the Runtime's first launch spends it (RuntimeStats::last_load), context %s, median us\n",
                context.c_str());
    std::printf("%-28s", "stage");
    for (std::size_t i = 0; i < cases().size(); ++i) std::printf(" %16s", fmt::format("case {}", i + 1).c_str());
    std::printf("\n");
    const std::vector<std::pair<std::string, std::string>> stages = {
        {"check_us", "check (catalog)"},      {"driver_us", "driver table"},
        {"device_us", "context + fingerprint"}, {"keys_us", "problem key"},
        {"cache_open_us", "cache open"},      {"lookup_us", "winner lookup"},
        {"compile_key_us", "compile key"},    {"fetch_us", "binary fetch"},
        {"compile_us", "compile"},            {"module_load_us", "module load"},
        {"prepare_us", "prepare"},            {"launch_us", "launch"}};
    auto row = [&](const std::string& name, const std::function<double(std::size_t)>& value) {
      std::printf("%-28s", name.c_str());
      for (std::size_t i = 0; i < cases().size(); ++i) std::printf(" %16.1f", value(i));
      std::printf("\n");
    };
    for (const auto& [field, name] : stages) {
      row(name, [&](std::size_t i) { return median_of(runtime_lines[{i, context}], field); });
    }
    row("other (total - stages)", [&](std::size_t i) {
      double other = median_of(runtime_lines[{i, context}], "total_us");
      for (const auto& stage : stages) other -= median_of(runtime_lines[{i, context}], stage.first);
      return other;
    });
    row("total (Runtime's clock)", [&](std::size_t i) { return median_of(runtime_lines[{i, context}], "total_us"); });
    row("driver alone: module load", [&](std::size_t i) { return median_of(raw_lines[{i, context}], "load_us"); });
    row("driver alone: get function", [&](std::size_t i) { return median_of(raw_lines[{i, context}], "function_us"); });
    row("driver alone: launch", [&](std::size_t i) { return median_of(raw_lines[{i, context}], "launch_us"); });
    // The same driver calls on the launch index's mapping: whether the bytes' home costs the load.
    row("driver alone, index bytes: load", [&](std::size_t i) {
      return raw_index_lines[{i, context}].empty() ? 0.0 : median_of(raw_index_lines[{i, context}], "load_us");
    });
    row("driver alone, index bytes: function", [&](std::size_t i) {
      return raw_index_lines[{i, context}].empty() ? 0.0 : median_of(raw_index_lines[{i, context}], "function_us");
    });
  }
  for (std::size_t i = 0; i < cases().size(); ++i) std::printf("case %zu: %s\n", i + 1, cases()[i].label.c_str());
}

// Median over samples of the per-call time of a batch; the stream drains between samples so
// every batch starts on an empty queue.
double median_ns_per_call(const detail::Stream& stream, const std::function<void()>& launch) {
  std::vector<double> samples;
  for (int s = 0; s < kSamples; ++s) {
    stream.synchronize();
    const auto start = Clock::now();
    for (int i = 0; i < kBatch; ++i) launch();
    samples.push_back(std::chrono::duration<double, std::nano>(Clock::now() - start).count() / kBatch);
  }
  stream.synchronize();
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

void print_hit_table(const fs::path& dir, const DeviceInfo& device) {
  const std::string db = (dir / "hits" / "gmjit.db").string();
  detail::Context context(0);
  detail::Stream stream;
  const std::int64_t n = 1024;
  const Shape shape{{"n", n}};
  detail::DeviceBuffer a(n * sizeof(float)), b(n * sizeof(float)), c(n * sizeof(float));
  for (auto* buffer : {&a, &b, &c}) buffer->fill_bytes(0, stream.get());
  void* const user_stream = stream.get();

  RuntimeOptions options;
  options.db_path = db;
  options.miss_policy = MissPolicy::default_config;
  Runtime runtime(options);
  runtime.launch("vector_add", shape, {a.get(), b.get(), c.get()}, user_stream);
  stream.synchronize();
  const Resolution resolution = runtime.resolve("vector_add", shape);

  // The same cubin, loaded by hand, launched through the driver with nothing in between.
  const auto& kernel = templates::find_kernel("vector_add");
  cache::Store store(db);
  const auto source = codegen::specialize(kernel, shape, resolution.dtype, resolution.config);
  auto loaded = cache::load_through_cache(store, source, device.arch);
  const LaunchGeometry geometry = kernel.geometry(resolution.config, shape, templates::dtype_info(resolution.dtype));
  detail::KernelArgs args;
  args.add(a.get()).add(b.get()).add(c.get());
  kernel.add_scalars(args, shape);
  void** raw_args = args.pointers();
  const auto& api = detail::driver();
  const CUfunction function = loaded.kernel->get();
  const CUstream raw_stream = stream.get();

  const double raw = median_ns_per_call(stream, [&] {
    api.cuLaunchKernel(function, geometry.grid[0], geometry.grid[1], geometry.grid[2], geometry.block[0],
                       geometry.block[1], geometry.block[2], geometry.dynamic_shared_bytes, raw_stream, raw_args,
                       nullptr);
  });
  const double checked = median_ns_per_call(stream, [&] {
    detail::KernelArgs per_call;
    per_call.add(a.get()).add(b.get()).add(c.get());
    kernel.add_scalars(per_call, shape);
    detail::launch(*loaded.kernel, geometry, per_call, raw_stream);
  });
  const double hit = median_ns_per_call(stream, [&] {
    runtime.launch("vector_add", shape, {a.get(), b.get(), c.get()}, user_stream);
  });
  const double hit_shape = median_ns_per_call(stream, [&] {
    runtime.launch("vector_add", {{"n", n}}, {a.get(), b.get(), c.get()}, user_stream);
  });

  std::printf("\nlaunch cost per call once loaded, vector_add fp32 n=%lld (%s), %s, median of %d batches of %d "
              "launches, no sync\n",
              static_cast<long long>(n), format_assignments(resolution.config).c_str(), device.name.c_str(), kSamples,
              kBatch);
  std::printf("%-62s %10s %10s\n", "path", "ns/call", "vs raw");
  auto row = [&](const char* what, double ns) { std::printf("%-62s %10.0f %9.2fx\n", what, ns, ns / raw); };
  row("raw cuLaunchKernel, arguments prebuilt", raw);
  row("detail::launch, arguments built per call (what the tuner does)", checked);
  row("Runtime::launch hit, Shape built once", hit);
  row("Runtime::launch hit, Shape {{\"n\", n}} built per call", hit_shape);
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> args;
  for (int i = 1; i + 1 < argc; i += 2) args[argv[i]] = argv[i + 1];
  if (args.count("--child")) {
    try {
      return child(args);
    } catch (const std::exception& e) {
      std::printf("%s\n", e.what());
      return 1;
    }
  }
  if (argc > 1 && (argc != 3 || std::string(argv[1]) != "--processes")) {
    std::fprintf(stderr, "usage: bench_runtime [--processes N]   (first-launch rows: N fresh processes each, default 9)\n");
    return 2;
  }
  const int processes = args.count("--processes") ? std::max(1, std::stoi(args.at("--processes"))) : 9;

  char dir_template[] = "/tmp/gmjit-bench-runtime-XXXXXX";
  const fs::path dir = mkdtemp(dir_template);
  const auto status = driver_status();
  DeviceInfo device;
  if (status.available) {
    device = detail::cached_device(0);
  } else {
    // The cache is still prepared (NVRTC needs no GPU) for the CPU stages, under a device that
    // does not exist.
    device.name = "no device";
    device.arch = "sm_90a";
  }
  std::printf("bench_runtime on %s (%s)\n", device.name.c_str(), device.arch.c_str());
  int rc = 0;
  try {
    const Prepared prepared = prepare(dir, device);
    for (const auto& note : prepared.notes) std::printf("note: %s\n", note.c_str());
    print_cpu_table(prepared, processes);
    if (!status.available) {
      std::printf("\nno GPU (%s): the first-launch table and the launch costs need a device; stopped here\n",
                  status.reason.c_str());
    } else {
      print_first_launch_tables(prepared, processes);
      print_hit_table(dir, device);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_runtime: %s\n", e.what());
    rc = 1;
  }
  fs::remove_all(dir);
  return rc;
}
