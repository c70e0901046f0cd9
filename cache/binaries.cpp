#include "cache/binaries.hpp"

#include <nlohmann/json.hpp>

#include "core/log.hpp"

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
  const std::string key = codegen::compile_key(source, arch);
  LoadedBinary loaded;
  if (auto cached = store.get_binary(key)) {
    try {
      const std::string lowered = nlohmann::json::parse(cached->resources_json).at("lowered_name").get<std::string>();
      auto module = std::make_unique<detail::Module>(cached->cubin);
      loaded.kernel = std::make_unique<detail::Kernel>(module->kernel(lowered));
      loaded.module = std::move(module);
      loaded.from_cache = true;
      return loaded;
    } catch (const std::exception& e) {
      detail::logger().warn("cached binary {} for {} did not load ({}); deleting it and recompiling", key,
                            source.name_expression, e.what());
      store.remove_binary(key);
    }
  }
  const auto compiled = codegen::shared_compiler().compile(source, arch).module;
  loaded.module = std::make_unique<detail::Module>(compiled->cubin);
  loaded.kernel = std::make_unique<detail::Kernel>(loaded.module->kernel(compiled->lowered_name));
  store_binary(store, *compiled);
  return loaded;
}

}  // namespace gmjit::cache
