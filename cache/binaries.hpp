#pragma once
// Machine code through the binary cache: a cubin is fetched by compile key (without its PTX),
// and compiled (then stored) only when the cache has none. An entry that fails its checksum (the store drops it) or
// that the driver refuses to load is deleted and recompiled, never served.

#include <memory>
#include <string>

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

// Needs a current context.
LoadedBinary load_through_cache(cache::Store& store, const codegen::GeneratedSource& source, const std::string& arch);

}  // namespace gmjit::cache
