#pragma once
// Scratch memory a kernel keeps between launches on one stream: the one place that sizes a
// workspace buffer and zeroes it, for the Runtime and the tuner's harness alike.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/device.hpp"

namespace gmjit::detail {

// Zeroed when allocated, then left as the kernels leave it (each launch leaves it as the next
// launch of the same kernel needs it). Everything it enqueues runs in stream order on the stream
// of the launch it prepares, so it serves one stream: launches on two streams need two.
class Workspace {
 public:
  // The address for a launch on `stream` that needs `bytes` in `layout`. A larger need than the
  // buffer holds replaces it with a new zeroed one of at least twice the size; a layout other than
  // the previous launch's zeroes it. The zeroing is enqueued on `stream`, ahead of the launch.
  CUdeviceptr prepare(std::size_t bytes, std::int64_t layout, CUstream stream);
  // Zeroes all of it on `stream`, as a fresh buffer is.
  void clear(CUstream stream);

  const DeviceBuffer& buffer() const { return current_; }
  // Buffers allocated so far, the current one included.
  std::uint64_t allocations() const { return allocations_; }
  // Bytes held, outgrown buffers included.
  std::size_t bytes_held() const;

 private:
  DeviceBuffer current_;
  // Outgrown buffers may still be read by launches in flight on the stream; they are freed with
  // the workspace, never while the stream may use them. Growth doubles, so they add up to less
  // than the current one.
  std::vector<DeviceBuffer> retired_;
  std::int64_t layout_ = 0;
  std::uint64_t allocations_ = 0;
};

}  // namespace gmjit::detail
