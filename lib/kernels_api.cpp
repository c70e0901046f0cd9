// The facade over user kernels: a manifest plus its .cuh become a catalog entry like a built-in.
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "gmjit/error.hpp"
#include "gmjit/kernels.hpp"
#include "templates/manifest.hpp"

namespace gmjit {
namespace {

std::string read_text(const std::filesystem::path& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  if (!in || !(text << in.rdbuf())) {
    throw Error(ErrorKind::usage, 0, "cannot read " + what + " '" + path.string() + "'");
  }
  return text.str();
}

}  // namespace

std::string register_kernel(const std::string& manifest_json, const std::string& cuh_source,
                            HostReference host_reference) {
  templates::KernelDescriptor kernel = templates::parse_manifest(manifest_json, cuh_source);
  if (host_reference) {
    if (kernel.reference_expression) {
      throw Error(ErrorKind::usage, 0,
                  "kernel manifest: reference: '" + kernel.name +
                      "' names a CUDA reference and a host reference was given too; give one");
    }
    kernel.host_reference = std::move(host_reference);
  } else if (!kernel.reference_expression) {
    throw Error(ErrorKind::usage, 0,
                "kernel manifest: reference: missing for '" + kernel.name +
                    "' (name a CUDA reference kernel in the manifest, or pass a host reference function)");
  }
  return templates::register_user_kernel(std::move(kernel)).name;
}

std::string register_kernel_file(const std::string& manifest_path) {
  const std::string manifest = read_text(manifest_path, "kernel manifest");
  try {
    nlohmann::json root;
    try {
      root = nlohmann::json::parse(manifest);
    } catch (const nlohmann::json::parse_error& e) {
      throw Error(ErrorKind::usage, 0, std::string("kernel manifest: not valid JSON: ") + e.what());
    }
    if (!root.is_object() || !root.contains("header_file") || !root["header_file"].is_string()) {
      throw Error(ErrorKind::usage, 0,
                  "kernel manifest: header_file: missing (the .cuh's path, relative to the manifest)");
    }
    const auto header = std::filesystem::path(manifest_path).parent_path() / root["header_file"].get<std::string>();
    return register_kernel(manifest, read_text(header, "kernel header"));
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::usage) throw;
    throw Error(ErrorKind::usage, 0, manifest_path + ": " + e.message());
  }
}

}  // namespace gmjit
