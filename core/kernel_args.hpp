#pragma once
// A launch's arguments, kept apart from core/module.hpp (which needs the driver header) so the
// kernel descriptors in templates/ fill them without seeing a CUDA header.

#include <cstring>
#include <type_traits>
#include <vector>

namespace gmjit::detail {

// Kernel arguments by value, in order, each kept in its own aligned slot so cuLaunchKernel can
// read it through a pointer.
class KernelArgs {
 public:
  template <typename T>
  KernelArgs& add(const T& value) {
    static_assert(std::is_trivially_copyable_v<T>, "kernel arguments are copied bytewise");
    static_assert(sizeof(T) <= sizeof(Slot) && alignof(T) <= alignof(Slot), "argument too large");
    Slot slot{};
    std::memcpy(slot.bytes, &value, sizeof(T));
    slots_.push_back(slot);
    return *this;
  }
  std::size_t size() const { return slots_.size(); }
  void** pointers() {
    pointers_.clear();
    for (auto& slot : slots_) pointers_.push_back(slot.bytes);
    return pointers_.data();
  }

 private:
  struct alignas(16) Slot {
    unsigned char bytes[16];
  };
  std::vector<Slot> slots_;
  std::vector<void*> pointers_;
};

}  // namespace gmjit::detail
