#include "core/device.hpp"

#include <nlohmann/json.hpp>
#include <nvrtc.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <fmt/format.h>

#include <map>
#include <mutex>

#include "core/log.hpp"

namespace gmjit {

std::string arch_for(int cc_major, int cc_minor) {
  // The "a" variants unlock arch-specific instructions (wgmma, setmaxnreg on 9.0); the code
  // then runs on that exact compute capability only, which the fingerprint already pins.
  const bool arch_specific = cc_major >= 9;
  return fmt::format("sm_{}{}{}", cc_major, cc_minor, arch_specific ? "a" : "");
}

std::string DeviceInfo::fingerprint() const {
  const std::string canonical =
      fmt::format("{}|{}.{}|{}|{}|{}|{}|{}|{}.{}", name, cc_major, cc_minor, arch, sm_count, l2_bytes,
                  shared_optin_bytes, driver_version, nvrtc_major, nvrtc_minor);
  return fmt::format("{:016x}", XXH3_64bits(canonical.data(), canonical.size()));
}

std::string DeviceInfo::to_json() const {
  const nlohmann::json j = {
      {"ordinal", ordinal},
      {"name", name},
      {"compute_capability", fmt::format("{}.{}", cc_major, cc_minor)},
      {"arch", arch},
      {"sm_count", sm_count},
      {"l2_bytes", l2_bytes},
      {"shared_optin_bytes", shared_optin_bytes},
      {"global_memory_bytes", global_memory_bytes},
      {"driver_version", driver_version},
      {"nvrtc_version", fmt::format("{}.{}", nvrtc_major, nvrtc_minor)},
      {"fingerprint", fingerprint()},
  };
  return j.dump();
}

DriverStatus driver_status() {
  DriverStatus status;
  status.reason = detail::driver_unavailable_reason();
  if (!status.reason.empty()) return status;
  const auto& api = detail::driver();
  api.cuDriverGetVersion(&status.driver_version);
  api.cuDeviceGetCount(&status.device_count);
  status.available = status.device_count > 0;
  return status;
}

std::vector<DeviceInfo> list_devices() {
  const auto& api = detail::driver();
  int count = 0;
  GMJIT_CU(api.cuDeviceGetCount(&count));
  std::vector<DeviceInfo> devices;
  for (int i = 0; i < count; ++i) devices.push_back(detail::query_device(i));
  return devices;
}

namespace detail {

DeviceInfo query_device(int ordinal) {
  const auto& api = driver();
  CUdevice device = 0;
  GMJIT_CU(api.cuDeviceGet(&device, ordinal));
  DeviceInfo info;
  info.ordinal = ordinal;
  char name[256] = {};
  GMJIT_CU(api.cuDeviceGetName(name, sizeof(name), device));
  info.name = name;
  auto attribute = [&](CUdevice_attribute which) {
    int value = 0;
    GMJIT_CU(api.cuDeviceGetAttribute(&value, which, device));
    return value;
  };
  info.cc_major = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  info.cc_minor = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  info.arch = arch_for(info.cc_major, info.cc_minor);
  info.sm_count = attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  info.l2_bytes = attribute(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
  info.shared_optin_bytes = attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
  size_t total = 0;
  GMJIT_CU(api.cuDeviceTotalMem(&total, device));
  info.global_memory_bytes = static_cast<long long>(total);
  GMJIT_CU(api.cuDriverGetVersion(&info.driver_version));
  if (nvrtcVersion(&info.nvrtc_major, &info.nvrtc_minor) != NVRTC_SUCCESS) {
    throw Error(ErrorKind::nvrtc, 0, "nvrtcVersion failed", "nvrtcVersion", __FILE__, __LINE__);
  }
  return info;
}

const DeviceInfo& cached_device(int ordinal) {
  static std::mutex mutex;
  // Node-based, so a reference handed out stays valid while others are added.
  static std::map<int, DeviceInfo> devices;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = devices.find(ordinal);
  if (it == devices.end()) it = devices.emplace(ordinal, query_device(ordinal)).first;
  return it->second;
}

Context::Context(int ordinal) : ordinal_(ordinal) {
  const auto& api = driver();
  int count = 0;
  GMJIT_CU(api.cuDeviceGetCount(&count));
  if (ordinal < 0 || ordinal >= count) {
    throw Error(ErrorKind::usage, 0,
                fmt::format("device {} does not exist ({} device(s) present)", ordinal, count));
  }
  GMJIT_CU(api.cuDeviceGet(&device_, ordinal));
  GMJIT_CU(api.cuDevicePrimaryCtxRetain(&context_, device_));
  make_current();
}

Context::Context(Context&& other) noexcept
    : ordinal_(other.ordinal_), device_(other.device_), context_(std::exchange(other.context_, nullptr)) {}

Context::~Context() {
  if (context_ != nullptr) driver().cuDevicePrimaryCtxRelease(device_);
}

void Context::make_current() const { GMJIT_CU(driver().cuCtxSetCurrent(context_)); }

void Context::synchronize() const {
  make_current();
  GMJIT_CU(driver().cuCtxSynchronize());
}

Stream::Stream() { GMJIT_CU(driver().cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING)); }

Stream::~Stream() {
  if (stream_ != nullptr) driver().cuStreamDestroy(stream_);
}

void Stream::synchronize() const { GMJIT_CU(driver().cuStreamSynchronize(stream_)); }

Event::Event() { GMJIT_CU(driver().cuEventCreate(&event_, CU_EVENT_DEFAULT)); }

Event::~Event() {
  if (event_ != nullptr) driver().cuEventDestroy(event_);
}

void Event::record(CUstream stream) const { GMJIT_CU(driver().cuEventRecord(event_, stream)); }

void Event::synchronize() const { GMJIT_CU(driver().cuEventSynchronize(event_)); }

float Event::elapsed_ms_since(const Event& start) const {
  float ms = 0;
  GMJIT_CU(driver().cuEventElapsedTime(&ms, start.event_, event_));
  return ms;
}

DeviceBuffer::DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
  // A zero-byte buffer still gets a distinct, valid address so kernels can take it.
  GMJIT_CU(driver().cuMemAlloc(&ptr_, bytes == 0 ? 1 : bytes));
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ != 0) driver().cuMemFree(ptr_);
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (ptr_ != 0) driver().cuMemFree(ptr_);
    ptr_ = std::exchange(other.ptr_, 0);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::upload(const void* host, std::size_t bytes) {
  if (bytes > bytes_) throw Error(ErrorKind::usage, 0, "upload larger than the buffer");
  if (bytes == 0) return;
  GMJIT_CU(driver().cuMemcpyHtoD(ptr_, host, bytes));
  // From pageable memory the copy returns once the data is staged, while its DMA may still run on
  // the legacy stream, which work on our non-blocking streams does not wait for (CUDA Driver API,
  // "API synchronization behavior"): a kernel launched next could read the old bytes. Seen on the
  // H200 as histogram counts off by one when a buffer was refilled between launches.
  GMJIT_CU(driver().cuStreamSynchronize(nullptr));
}

void DeviceBuffer::download(void* host, std::size_t bytes, std::size_t offset) const {
  if (offset > bytes_ || bytes > bytes_ - offset) throw Error(ErrorKind::usage, 0, "download past the end of the buffer");
  if (bytes > 0) GMJIT_CU(driver().cuMemcpyDtoH(host, ptr_ + offset, bytes));
}

void DeviceBuffer::fill_bytes(unsigned char value, CUstream stream) {
  if (bytes_ > 0) GMJIT_CU(driver().cuMemsetD8Async(ptr_, value, bytes_, stream));
}

}  // namespace detail
}  // namespace gmjit
