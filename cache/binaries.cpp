#include "cache/binaries.hpp"

#include "core/laps.hpp"
#include "core/log.hpp"
#include "gmjit/error.hpp"

namespace gmjit::cache {

void store_binary(cache::Store& store, const codegen::CompiledModule& compiled) {
  cache::BinaryRecord binary;
  binary.compile_key = compiled.compile_key;
  binary.kernel = compiled.source.kernel;
  binary.arch = compiled.arch;
  binary.cubin = compiled.cubin;
  binary.ptx = compiled.ptx;
  binary.resources_json = codegen::resources_json(compiled);
  store.put_binary(binary);
}

LoadedBinary load_through_cache(cache::Store& store, const codegen::GeneratedSource& source, const std::string& arch) {
  detail::Laps laps;
  LoadedBinary loaded;
  const std::string key = codegen::compile_key(source, arch);
  loaded.compile_key_us = laps.lap();
  auto cached = store.get_cubin(key);
  loaded.fetch_us = laps.lap();
  if (cached) {
    try {
      if (cached->lowered_name.empty()) throw Error(ErrorKind::cache, 0, "its description names no lowered_name");
      auto module = std::make_unique<detail::Module>(cached->cubin);
      loaded.kernel = std::make_unique<detail::Kernel>(module->kernel(cached->lowered_name));
      loaded.module = std::move(module);
      loaded.from_cache = true;
      loaded.module_load_us = laps.lap();
      return loaded;
    } catch (const std::exception& e) {
      detail::logger().warn("cached binary {} for {} did not load ({}); deleting it and recompiling", key,
                            source.name_expression, e.what());
      store.remove_binary(key);
    }
  }
  laps.lap();
  const auto compiled = codegen::shared_compiler().compile(source, arch).module;
  loaded.compile_us = laps.lap();
  loaded.module = std::make_unique<detail::Module>(compiled->cubin);
  loaded.kernel = std::make_unique<detail::Kernel>(loaded.module->kernel(compiled->lowered_name));
  loaded.module_load_us = laps.lap();
  store_binary(store, *compiled);
  loaded.compile_us += laps.lap();
  return loaded;
}

}  // namespace gmjit::cache
