#pragma once
// RAII wrappers over the driver's handles: the primary context of a device, streams, events
// and device memory. Each owns one handle and is movable, not copyable.

#include <cstddef>
#include <utility>

#include "gmjit/device.hpp"
#include "core/driver.hpp"

namespace gmjit::detail {

DeviceInfo query_device(int ordinal);
// query_device once per ordinal and process: nothing it reads (name, attributes, driver and
// NVRTC versions) changes while a process runs, and every Runtime needs the fingerprint.
const DeviceInfo& cached_device(int ordinal);

// Retains the device's primary context (shared with the CUDA runtime and cuBLAS in the same
// process) and makes it current on construction.
class Context {
 public:
  explicit Context(int ordinal);
  ~Context();
  Context(Context&& other) noexcept;
  Context& operator=(Context&&) = delete;
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  void make_current() const;
  void synchronize() const;
  CUdevice device() const { return device_; }
  CUcontext get() const { return context_; }
  int ordinal() const { return ordinal_; }

 private:
  int ordinal_ = 0;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
};

class Stream {
 public:
  Stream();  // a non-blocking stream in the current context
  ~Stream();
  Stream(Stream&& other) noexcept : stream_(std::exchange(other.stream_, nullptr)) {}
  Stream& operator=(Stream&&) = delete;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  CUstream get() const { return stream_; }
  void synchronize() const;

 private:
  CUstream stream_ = nullptr;
};

class Event {
 public:
  Event();
  ~Event();
  Event(Event&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}
  Event& operator=(Event&&) = delete;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  void record(CUstream stream) const;
  void synchronize() const;
  // Milliseconds from `start` to this event; both must have completed.
  float elapsed_ms_since(const Event& start) const;

 private:
  CUevent event_ = nullptr;
};

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : ptr_(std::exchange(other.ptr_, 0)), bytes_(std::exchange(other.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  CUdeviceptr get() const { return ptr_; }
  std::size_t bytes() const { return bytes_; }
  // The bytes are on the device when this returns, for work on any stream.
  void upload(const void* host, std::size_t bytes);
  void download(void* host, std::size_t bytes, std::size_t offset = 0) const;
  // Fills every byte with `value` (0xFF poisons float and half outputs with NaN).
  void fill_bytes(unsigned char value, CUstream stream);

 private:
  CUdeviceptr ptr_ = 0;
  std::size_t bytes_ = 0;
};

}  // namespace gmjit::detail
