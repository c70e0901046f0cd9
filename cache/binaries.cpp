#include "cache/binaries.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <string_view>
#include <nlohmann/json.hpp>

#include "core/laps.hpp"
#include "core/log.hpp"
#include "gmjit/error.hpp"
#include "templates/registry.hpp"

namespace gmjit::cache {

BinaryRecord binary_record(const codegen::CompiledModule& compiled) {
  BinaryRecord binary;
  binary.compile_key = compiled.compile_key;
  binary.kernel = compiled.source.kernel;
  binary.arch = compiled.arch;
  binary.cubin = compiled.cubin;
  binary.ptx = compiled.ptx;
  binary.resources_json = codegen::resources_json(compiled);
  return binary;
}

void store_binary(cache::Store& store, const codegen::CompiledModule& compiled) {
  store.put_binary(binary_record(compiled));
}

namespace {

// sm_ and digits, then at most one letter (sm_90a): what NVRTC's -arch names a real GPU by.
bool plausible_arch(const std::string& arch) {
  if (arch.rfind("sm_", 0) != 0 || arch.size() < 5 || arch.size() > 8) return false;
  std::size_t i = 3;
  while (i < arch.size() && std::isdigit(static_cast<unsigned char>(arch[i]))) ++i;
  if (i < 5) return false;
  return i == arch.size() || (i + 1 == arch.size() && std::islower(static_cast<unsigned char>(arch[i])));
}

// Kernels whose compiles are not a function of their input. NVRTC 13.0 compiled sgemm
// bm=128,bn=128,bk=16,tm=8,tn=8,vec=1 for sm_90a to PTX with different register numbering in
// one process of four (same source, options and library), and so to another cubin; the default
// configuration and two others came out the same every time. A rebuild cannot vouch for such a
// kernel's cubin, so its imports are refused rather than compared.
constexpr std::array<std::string_view, 1> kNotReproducible = {"sgemm"};

// The first line of a message, so a refusal stays one line.
std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

}  // namespace

ImportedBinaryCheck check_imported_binary(const BinaryRecord& imported) {
  ImportedBinaryCheck check;
  auto refuse = [&](std::string why) {
    check.refusal = std::move(why);
    return check;
  };
  std::string kernel_name, dtype;
  Shape shape;
  Config config;
  try {
    const auto claimed = nlohmann::json::parse(imported.resources_json);
    kernel_name = claimed.at("kernel").get<std::string>();
    dtype = claimed.at("dtype").get<std::string>();
    shape = claimed.at("shape").get<Shape>();
    config = claimed.at("config").get<Config>();
    if (claimed.contains("arch") && claimed.at("arch").get<std::string>() != imported.arch) {
      return refuse(fmt::format("resources_json names arch {}, the binary {}", claimed.at("arch").dump(),
                                imported.arch));
    }
  } catch (const std::exception& e) {
    return refuse(fmt::format("resources_json does not name a kernel, dtype, shape and config: {}",
                              first_line(e.what())));
  }
  if (kernel_name != imported.kernel) {
    return refuse(fmt::format("resources_json names kernel {}, the binary {}", kernel_name, imported.kernel));
  }
  if (!plausible_arch(imported.arch)) return refuse(fmt::format("arch '{}' is not an sm_XY[a] name", imported.arch));
  if (std::find(kNotReproducible.begin(), kNotReproducible.end(), kernel_name) != kNotReproducible.end()) {
    return refuse(fmt::format("{} compiles are not reproducible (NVRTC has given two cubins for one source), so a "
                              "rebuild cannot vouch for this one; it is compiled where it is used",
                              kernel_name));
  }
  codegen::GeneratedSource source;
  try {
    const auto& kernel = templates::find_kernel(kernel_name);
    if (templates::resolve_config(kernel, shape, dtype, config) != config) {
      return refuse(fmt::format("config {} of {} is not complete", format_assignments(config), kernel_name));
    }
    source = codegen::specialize(kernel, shape, dtype, config);
  } catch (const Error& e) {
    return refuse(first_line(e.message()));
  }
  const std::string key = codegen::compile_key(source, imported.arch);
  if (key != imported.compile_key) {
    return refuse(fmt::format("compile key {} is not {}, this library's key of {} for {}", imported.compile_key, key,
                              source.name_expression, imported.arch));
  }
  std::shared_ptr<const codegen::CompiledModule> fresh;
  try {
    fresh = codegen::shared_compiler().compile(source, imported.arch).module;
  } catch (const Error& e) {
    return refuse(fmt::format("{} does not compile for {}: {}", source.name_expression, imported.arch,
                              first_line(e.message())));
  }
  if (fresh->cubin != imported.cubin) {
    const auto a = std::mismatch(fresh->cubin.begin(), fresh->cubin.end(), imported.cubin.begin(),
                                 imported.cubin.end());
    return refuse(fmt::format("cubin is not this library's build of {} for {} ({} bytes, this build {}; first "
                              "difference at byte {})",
                              source.name_expression, imported.arch, imported.cubin.size(), fresh->cubin.size(),
                              a.first - fresh->cubin.begin()));
  }
  check.rebuilt = binary_record(*fresh);
  return check;
}

std::optional<LoadedBinary> load_from_index(const LaunchIndex& index, const codegen::GeneratedSource& source,
                                            const std::string& arch) {
  detail::Laps laps;
  const std::string key = codegen::compile_key(source, arch);
  const double compile_key_us = laps.lap();
  auto loaded = load_from_index(index, key);
  if (loaded) loaded->compile_key_us = compile_key_us;
  return loaded;
}

std::optional<LoadedBinary> load_from_index(const LaunchIndex& index, const std::string& key) {
  detail::Laps laps;
  LoadedBinary loaded;
  auto cached = index.find_cubin(key);
  loaded.fetch_us = laps.lap();
  if (!cached || cached->lowered_name.empty()) return std::nullopt;
  try {
    auto module = std::make_unique<detail::Module>(static_cast<const void*>(cached->data()));
    loaded.kernel = std::make_unique<detail::Kernel>(module->kernel(cached->lowered_name));
    loaded.module = std::move(module);
  } catch (const std::exception& e) {
    detail::logger().warn("the launch index's cubin {} ({}) did not load ({}); trying the cache", key,
                          cached->lowered_name, e.what());
    return std::nullopt;
  }
  loaded.from_cache = true;
  loaded.module_load_us = laps.lap();
  return loaded;
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
