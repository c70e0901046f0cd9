#pragma once
// Machine code through the binary cache: a cubin is fetched by compile key (without its PTX),
// and compiled (then stored) only when the cache has none. An entry that fails its checksum (the store drops it) or
// that the driver refuses to load is deleted and recompiled, never served.

#include <memory>
#include <optional>
#include <string>

#include "cache/launch_index.hpp"
#include "cache/store.hpp"
#include "codegen/compiler.hpp"
#include "core/module.hpp"

namespace gmjit::cache {

struct LoadedBinary {
  std::unique_ptr<detail::Module> module;
  std::unique_ptr<detail::Kernel> kernel;
  bool from_cache = false;  // false: NVRTC compiled it in this call
  // Where the call spent its time (steady clock, microseconds), for the Runtime's load times.
  double compile_key_us = 0;
  double fetch_us = 0;
  double compile_us = 0;      // NVRTC and storing the cubin; 0 on a hit
  double module_load_us = 0;  // module load, kernel lookup and its attributes
};

// Stores a compiled module in the binary cache.
void store_binary(cache::Store& store, const codegen::CompiledModule& compiled);

// This library's record of a compiled module, as the binary cache keeps it.
BinaryRecord binary_record(const codegen::CompiledModule& compiled);

// What rebuilding a binary from elsewhere (an import) found.
struct ImportedBinaryCheck {
  // This library's own record of the instantiation, whose cubin is byte-identical to the
  // imported one; nullopt when refused.
  std::optional<BinaryRecord> rebuilt;
  std::string refusal;  // why the imported binary is not kept, in one line
};

// A binary's claims (compile key, kernel, arch, and kernel, dtype, shape and configuration in
// its resources_json) say nothing about its bytes. So the claimed instantiation is compiled here
// for the binary's arch, and the binary is kept only when its compile key is that compile's and
// its cubin equals the fresh one byte for byte; what is kept is the fresh record (its PTX and
// resources, among them the entry point loaded, are this library's). A kernel whose compiles
// are not reproducible (sgemm) is refused outright. Compiles through codegen::shared_compiler(), so
// this costs one NVRTC compile per instantiation not yet compiled in this process.
ImportedBinaryCheck check_imported_binary(const BinaryRecord& imported);

// The launch index's cubin of `source`, loaded (needs a current context); nullopt when the index
// has none for its compile key or the driver refuses it, and the caller goes to load_through_cache.
std::optional<LoadedBinary> load_from_index(const LaunchIndex& index, const codegen::GeneratedSource& source,
                                            const std::string& arch);
// The same for a compile key known already (a launch plan's).
std::optional<LoadedBinary> load_from_index(const LaunchIndex& index, const std::string& compile_key);

// Needs a current context.
LoadedBinary load_through_cache(cache::Store& store, const codegen::GeneratedSource& source, const std::string& arch);

}  // namespace gmjit::cache
