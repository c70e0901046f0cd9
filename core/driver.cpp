#include "core/driver.hpp"

#include <dlfcn.h>

#include <mutex>

#include "core/log.hpp"

namespace gmjit::detail {
namespace {

// The ABI the entry points are resolved for. Asking for CUDA_VERSION (13.0) would hand out the
// 13.0 revisions of cuCtxGetDevice and cuCtxSynchronize, which take an extra CUcontext that
// cuda.h's undecorated declarations (our decltypes) do not have; every function in the table has
// its header's signature at 12.0.
constexpr int kDriverAbi = 12000;

struct LoadedDriver {
  DriverApi api;
  std::string failure;  // empty when usable
};

LoadedDriver load() {
  LoadedDriver loaded;
  void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    loaded.failure = std::string("no NVIDIA driver: cannot load libcuda.so.1 (") +
                     (why != nullptr ? why : "unknown reason") + ")";
    return loaded;
  }
  using GetProcAddress = decltype(&::cuGetProcAddress);
  auto get_proc = reinterpret_cast<GetProcAddress>(dlsym(handle, "cuGetProcAddress_v2"));
  if (get_proc == nullptr) {
    loaded.failure = "the NVIDIA driver is too old: libcuda.so.1 has no cuGetProcAddress_v2";
    return loaded;
  }
  std::string missing;
#define GMJIT_DRIVER_RESOLVE(name)                                                               \
  {                                                                                              \
    void* fn = nullptr;                                                                          \
    CUdriverProcAddressQueryResult status{};                                                     \
    if (get_proc(#name, &fn, kDriverAbi, CU_GET_PROC_ADDRESS_DEFAULT, &status) == CUDA_SUCCESS   \
        && fn != nullptr) {                                                                      \
      loaded.api.name = reinterpret_cast<decltype(loaded.api.name)>(fn);                        \
    } else {                                                                                     \
      missing += std::string(missing.empty() ? "" : ", ") + #name;                             \
    }                                                                                            \
  }
  GMJIT_DRIVER_FUNCTIONS(GMJIT_DRIVER_RESOLVE)
#undef GMJIT_DRIVER_RESOLVE
  if (!missing.empty()) {
    loaded.failure = "the NVIDIA driver lacks entry points for CUDA " + std::to_string(kDriverAbi) +
                     ": " + missing;
    return loaded;
  }
  const CUresult init = loaded.api.cuInit(0);
  if (init == CUDA_ERROR_NO_DEVICE) {
    loaded.failure = "no CUDA device present (cuInit: CUDA_ERROR_NO_DEVICE)";
  } else if (init != CUDA_SUCCESS) {
    const char* name = nullptr;
    loaded.api.cuGetErrorName(init, &name);
    loaded.failure = std::string("the CUDA driver failed to initialize (cuInit: ") +
                     (name != nullptr ? name : std::to_string(init)) + ")";
  } else {
    int count = 0;
    if (loaded.api.cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0) {
      loaded.failure = "no CUDA device present";
    }
  }
  return loaded;
}

const LoadedDriver& loaded_driver() {
  static const LoadedDriver instance = [] {
    LoadedDriver result = load();
    if (!result.failure.empty()) logger().debug("driver unavailable: {}", result.failure);
    return result;
  }();
  return instance;
}

}  // namespace

const DriverApi& driver() {
  const LoadedDriver& loaded = loaded_driver();
  if (!loaded.failure.empty()) {
    throw Error(ErrorKind::driver, 0, loaded.failure, "dlopen(libcuda.so.1) + cuInit", __FILE__, __LINE__);
  }
  return loaded.api;
}

std::string driver_unavailable_reason() { return loaded_driver().failure; }

std::string cu_error_string(CUresult result) {
  const DriverApi& api = loaded_driver().api;
  const char* name = nullptr;
  const char* text = nullptr;
  if (api.cuGetErrorName != nullptr) api.cuGetErrorName(result, &name);
  if (api.cuGetErrorString != nullptr) api.cuGetErrorString(result, &text);
  std::string out = name != nullptr ? name : "CUresult " + std::to_string(static_cast<int>(result));
  if (text != nullptr) out += std::string(": ") + text;
  return out;
}

}  // namespace gmjit::detail
