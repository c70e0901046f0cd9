// The C API (gmjit/gmjit.h) over the C++ one: every entry point catches what the C++ API throws
// and turns it into a status and this thread's last error.
#include "gmjit/gmjit.h"

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <new>
#include <string>
#include <vector>

#include "gmjit/gmjit.hpp"

struct gmjit_runtime {
  gmjit::Runtime runtime;
};

namespace {

thread_local std::string last_error;

gmjit_status status_of(gmjit::ErrorKind kind) {
  switch (kind) {
    case gmjit::ErrorKind::usage: return GMJIT_ERROR_USAGE;
    case gmjit::ErrorKind::driver: return GMJIT_ERROR_DRIVER;
    case gmjit::ErrorKind::nvrtc: return GMJIT_ERROR_NVRTC;
    case gmjit::ErrorKind::compile: return GMJIT_ERROR_COMPILE;
    case gmjit::ErrorKind::device_limit: return GMJIT_ERROR_DEVICE_LIMIT;
    case gmjit::ErrorKind::launch: return GMJIT_ERROR_LAUNCH;
    case gmjit::ErrorKind::cache: return GMJIT_ERROR_CACHE;
    case gmjit::ErrorKind::cache_miss: return GMJIT_ERROR_CACHE_MISS;
  }
  return GMJIT_ERROR_INTERNAL;
}

// Runs `body`, which reports failure by throwing; nothing escapes into C.
template <class Body>
gmjit_status guarded(Body&& body) noexcept {
  try {
    last_error.clear();
    body();
    return GMJIT_OK;
  } catch (const gmjit::Error& e) {
    last_error = e.what();
    return status_of(e.kind());
  } catch (const std::bad_alloc&) {
    last_error = "out of host memory";
    return GMJIT_ERROR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    last_error = e.what();
    return GMJIT_ERROR_INTERNAL;
  } catch (...) {
    last_error = "unknown exception";
    return GMJIT_ERROR_INTERNAL;
  }
}

[[noreturn]] void usage_error(const std::string& message) {
  throw gmjit::Error(gmjit::ErrorKind::usage, 0, message);
}

template <class T>
T& required(T* pointer, const char* what) {
  if (pointer == nullptr) usage_error(std::string(what) + " is null");
  return *pointer;
}

std::string required_text(const char* text, const char* what) {
  if (text == nullptr) usage_error(std::string(what) + " is null");
  return text;
}

std::string optional_text(const char* text) { return text ? std::string(text) : std::string(); }

// keys[i] = values[i] for i < count; a repeated key is an error rather than a silent overwrite.
std::map<std::string, std::int64_t> assignments(const char* const* keys, const int64_t* values, size_t count,
                                                const char* what) {
  std::map<std::string, std::int64_t> out;
  if (count == 0) return out;
  if (keys == nullptr || values == nullptr) usage_error(std::string(what) + ": keys or values are null");
  for (size_t i = 0; i < count; ++i) {
    if (keys[i] == nullptr) usage_error(std::string(what) + ": key " + std::to_string(i) + " is null");
    if (!out.emplace(keys[i], values[i]).second) usage_error(std::string(what) + ": key '" + keys[i] + "' repeats");
  }
  return out;
}

// A copy the caller frees with gmjit_free (std::free), so it outlives this library's allocator.
char* owned_copy(const std::string& text) {
  char* out = static_cast<char*>(std::malloc(text.size() + 1));
  if (out == nullptr) throw std::bad_alloc();
  std::memcpy(out, text.c_str(), text.size() + 1);
  return out;
}

// Clears `*out` first, so a failed call never leaves a stale pointer there.
void clear(char** out) {
  if (out) *out = nullptr;
}

gmjit::MissPolicy miss_policy(gmjit_miss_policy policy) {
  switch (policy) {
    case GMJIT_MISS_NEAREST: return gmjit::MissPolicy::nearest;
    case GMJIT_MISS_TUNE: return gmjit::MissPolicy::tune;
    case GMJIT_MISS_DEFAULT_CONFIG: return gmjit::MissPolicy::default_config;
    case GMJIT_MISS_FAIL: return gmjit::MissPolicy::fail;
  }
  usage_error("miss policy " + std::to_string(static_cast<int>(policy)) + " is not one of GMJIT_MISS_*");
}

nlohmann::json resolution_json(const gmjit::Resolution& r) {
  return {{"kernel", r.kernel},
          {"dtype", r.dtype},
          {"shape", r.shape},
          {"config", r.config},
          {"source", gmjit::to_string(r.source)},
          {"nearest_shape", r.nearest_shape ? nlohmann::json(*r.nearest_shape) : nlohmann::json()},
          {"nearest_distance", r.nearest_distance},
          {"note", r.note}};
}

}  // namespace

extern "C" {

int gmjit_api_version(void) { return GMJIT_API_VERSION; }

const char* gmjit_version(void) { return gmjit::version(); }

const char* gmjit_last_error(void) { return last_error.c_str(); }

void gmjit_free(char* text) { std::free(text); }

gmjit_status gmjit_runtime_open(int device, const char* cache_path, gmjit_miss_policy policy, gmjit_runtime** out) {
  if (out) *out = nullptr;
  return guarded([&] {
    auto& result = required(out, "out");
    if (device < 0) usage_error("device " + std::to_string(device) + " is negative");
    gmjit::RuntimeOptions options;
    options.device = device;
    options.db_path = optional_text(cache_path);
    options.miss_policy = miss_policy(policy);
    result = new gmjit_runtime{gmjit::Runtime(std::move(options))};
  });
}

gmjit_status gmjit_runtime_close(gmjit_runtime* runtime) {
  return guarded([&] { delete &required(runtime, "runtime"); });
}

gmjit_status gmjit_launch(gmjit_runtime* runtime, const char* kernel, const char* dtype,
                          const char* const* shape_keys, const int64_t* shape_values, size_t shape_count,
                          const uint64_t* tensors, size_t tensor_count, void* stream) {
  return guarded([&] {
    auto& r = required(runtime, "runtime");
    const gmjit::Shape shape = assignments(shape_keys, shape_values, shape_count, "shape");
    if (tensor_count > 0 && tensors == nullptr) usage_error("tensors is null");
    std::vector<gmjit::DevicePtr> pointers(tensors, tensors + tensor_count);
    gmjit::LaunchOptions options;
    options.dtype = optional_text(dtype);
    r.runtime.launch(required_text(kernel, "kernel"), shape, gmjit::Tensors(pointers), stream, options);
  });
}

gmjit_status gmjit_resolve(gmjit_runtime* runtime, const char* kernel, const char* dtype,
                           const char* const* shape_keys, const int64_t* shape_values, size_t shape_count,
                           char** json_out) {
  clear(json_out);
  return guarded([&] {
    auto& r = required(runtime, "runtime");
    auto& out = required(json_out, "json_out");
    gmjit::LaunchOptions options;
    options.dtype = optional_text(dtype);
    const auto resolution = r.runtime.resolve(required_text(kernel, "kernel"),
                                              assignments(shape_keys, shape_values, shape_count, "shape"), options);
    out = owned_copy(resolution_json(resolution).dump(2));
  });
}

gmjit_status gmjit_tune(gmjit_runtime* runtime, const char* kernel, const char* dtype, const char* const* shape_keys,
                        const int64_t* shape_values, size_t shape_count, const char* strategy,
                        size_t max_evaluations, double max_seconds, char** json_out) {
  clear(json_out);
  return guarded([&] {
    auto& r = required(runtime, "runtime");
    auto& out = required(json_out, "json_out");
    if (!(max_seconds >= 0)) usage_error("max_seconds must be 0 (no limit) or positive");
    gmjit::Problem problem{required_text(kernel, "kernel"), optional_text(dtype),
                           assignments(shape_keys, shape_values, shape_count, "shape"), "C API"};
    gmjit::TuneOptions options = r.runtime.options().tune;
    options.device = r.runtime.options().device;
    if (strategy && *strategy) options.strategy = strategy;
    options.max_evaluations = max_evaluations;
    options.max_seconds = max_seconds;
    options.record = true;
    options.db_path = r.runtime.db_path();
    out = owned_copy(gmjit::tune_report_json(gmjit::tune(problem, options)));
  });
}

gmjit_status gmjit_list_kernels(char** json_out) {
  clear(json_out);
  return guarded([&] { required(json_out, "json_out") = owned_copy(gmjit::list_kernels_json()); });
}

gmjit_status gmjit_describe(const char* kernel, const char* dtype, const char* const* shape_keys,
                            const int64_t* shape_values, size_t shape_count, char** json_out) {
  clear(json_out);
  return guarded([&] {
    auto& out = required(json_out, "json_out");
    out = owned_copy(gmjit::describe_kernel_json(required_text(kernel, "kernel"),
                                                 assignments(shape_keys, shape_values, shape_count, "shape"),
                                                 optional_text(dtype)));
  });
}

gmjit_status gmjit_register_kernel(const char* manifest_json, const char* cuh_source, char** name_out) {
  clear(name_out);
  return guarded([&] {
    const std::string name = gmjit::register_kernel(required_text(manifest_json, "manifest_json"),
                                                    required_text(cuh_source, "cuh_source"));
    if (name_out) *name_out = owned_copy(name);
  });
}

gmjit_status gmjit_register_kernel_file(const char* manifest_path, char** name_out) {
  clear(name_out);
  return guarded([&] {
    const std::string name = gmjit::register_kernel_file(required_text(manifest_path, "manifest_path"));
    if (name_out) *name_out = owned_copy(name);
  });
}

gmjit_status gmjit_register_expression(const char* name, const char* expression, const char* dtype, char** name_out) {
  clear(name_out);
  return guarded([&] {
    const std::string chosen = gmjit::register_expression(optional_text(name), required_text(expression, "expression"),
                                                          dtype && *dtype ? dtype : "fp32");
    if (name_out) *name_out = owned_copy(chosen);
  });
}

gmjit_status gmjit_compile(const char* kernel, const char* dtype, const char* const* shape_keys,
                           const int64_t* shape_values, size_t shape_count, const char* const* config_keys,
                           const int64_t* config_values, size_t config_count, const char* arch, const char* out_dir,
                           char** json_out) {
  clear(json_out);
  return guarded([&] {
    gmjit::CompileRequest request;
    request.kernel = required_text(kernel, "kernel");
    request.dtype = optional_text(dtype);
    request.shape = assignments(shape_keys, shape_values, shape_count, "shape");
    request.config = assignments(config_keys, config_values, config_count, "config");
    request.arch = optional_text(arch);
    const auto result = gmjit::compile(request);
    if (out_dir && *out_dir) gmjit::write_compile_outputs(result, out_dir);
    if (json_out) *json_out = owned_copy(gmjit::resources_json(result));
  });
}

}  // extern "C"
