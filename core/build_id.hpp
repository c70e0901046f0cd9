#pragma once
#include <string>

namespace gmjit::detail {

// A binary loaded in this process (the executable or a shared library).
struct LoadedObject {
  std::string path;      // as the dynamic linker names it; empty for the executable
  std::string build_id;  // its GNU build-id in hex; empty when it carries none (--build-id=none)
  bool found = false;    // false when no loaded binary holds the address
};

// The loaded binary whose code or data holds `address`.
LoadedObject loaded_object_of(const void* address);

// The build-id of the binary this library's code is linked into: libgmjit.so, or an executable
// that links the library's archives. Two processes with the same id run the same embedded
// templates and the same descriptor code. Empty without one.
const std::string& library_build_id();

}  // namespace gmjit::detail
