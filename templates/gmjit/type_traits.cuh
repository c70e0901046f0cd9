#pragma once
// Type traits the templates share; NVRTC compiles without the standard library's <type_traits>.

namespace gmjit {

// Enumerators rather than static constexpr members: NVRTC emits those as device globals.
template <typename T, typename U>
struct IsSame {
  enum : bool { kValue = false };
};
template <typename T>
struct IsSame<T, T> {
  enum : bool { kValue = true };
};

}  // namespace gmjit
