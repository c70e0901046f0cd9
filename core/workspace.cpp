#include "core/workspace.hpp"

#include <algorithm>

namespace gmjit::detail {

CUdeviceptr Workspace::prepare(std::size_t bytes, std::int64_t layout, CUstream stream) {
  if (allocations_ == 0 || bytes > current_.bytes()) {
    DeviceBuffer grown(allocations_ == 0 ? std::max<std::size_t>(bytes, 16)
                                         : std::max(bytes, 2 * current_.bytes()));
    grown.fill_bytes(0, stream);
    if (allocations_ > 0) retired_.push_back(std::move(current_));
    current_ = std::move(grown);
    ++allocations_;
  } else if (layout != layout_) {
    current_.fill_bytes(0, stream);
  }
  layout_ = layout;
  return current_.get();
}

void Workspace::clear(CUstream stream) { current_.fill_bytes(0, stream); }

std::size_t Workspace::bytes_held() const {
  std::size_t total = current_.bytes();
  for (const auto& buffer : retired_) total += buffer.bytes();
  return total;
}

}  // namespace gmjit::detail
