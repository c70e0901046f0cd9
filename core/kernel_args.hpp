#pragma once
// A launch's arguments, kept apart from core/module.hpp (which needs the driver header) so the
// kernel descriptors in templates/ fill them without seeing a CUDA header.

#include <cstddef>
#include <cstring>
#include <type_traits>
#include <vector>

namespace gmjit::detail {

// Kernel arguments by value, in order. Each starts a run of 16-byte slots of its own, as many as
// its bytes need, so an argument of any size (a 128-byte TMA tensor map) is read by the driver
// through one pointer, and the common scalars and addresses take one slot each.
class KernelArgs {
 public:
  template <typename T>
  KernelArgs& add(const T& value) {
    static_assert(std::is_trivially_copyable_v<T>, "kernel arguments are copied bytewise");
    return add_bytes(&value, sizeof(T));
  }
  KernelArgs& add_bytes(const void* bytes, std::size_t size) {
    first_slot_.push_back(slots_.size());
    sizes_.push_back(size);
    slots_.resize(slots_.size() + (size + sizeof(Slot) - 1) / sizeof(Slot) + (size == 0 ? 1 : 0));
    if (size > 0) std::memcpy(slots_[first_slot_.back()].bytes, bytes, size);
    return *this;
  }
  // Every argument of `other`, after this one's.
  KernelArgs& append(const KernelArgs& other) {
    for (std::size_t i = 0; i < other.size(); ++i) add_bytes(other.slots_[other.first_slot_[i]].bytes, other.sizes_[i]);
    return *this;
  }
  std::size_t size() const { return first_slot_.size(); }
  // The bytes argument `i` holds.
  std::size_t bytes_of(std::size_t i) const { return sizes_.at(i); }
  // One pointer per argument, valid until the next add.
  void** pointers() {
    pointers_.clear();
    for (const std::size_t slot : first_slot_) pointers_.push_back(slots_[slot].bytes);
    return pointers_.data();
  }

 private:
  struct alignas(16) Slot {
    unsigned char bytes[16];
  };
  std::vector<Slot> slots_;
  std::vector<std::size_t> first_slot_;
  std::vector<std::size_t> sizes_;
  std::vector<void*> pointers_;
};

}  // namespace gmjit::detail
