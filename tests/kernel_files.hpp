#pragma once
// Manifests of user kernels written for a test, derived from the worked example
// tests/data/broken/broken.json, for commands that take --kernel-file or GMJIT_KERNEL_PATH.

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

namespace gmjit::testing {

inline std::filesystem::path broken_example_dir() {
  // GMJIT_SOURCE_DIR in the environment points at a copied checkout, e.g. on a GPU machine.
  const char* source_dir = std::getenv("GMJIT_SOURCE_DIR");
  return std::filesystem::path(source_dir && *source_dir ? source_dir : GMJIT_SOURCE_DIR) / "tests/data/broken";
}

// Writes `dir`/`name`.json: the broken example as kernel `name` (header user/`name`.cuh, read from
// the example's .cuh) whose only mode is 0, the correct one, so tuning it neither crashes nor
// hangs a worker. `edit` changes the manifest further.
inline std::string write_user_manifest(const std::filesystem::path& dir, const std::string& name,
                                       const std::function<void(nlohmann::json&)>& edit = {}) {
  nlohmann::json manifest = nlohmann::json::parse(std::ifstream(broken_example_dir() / "broken.json"));
  manifest["name"] = name;
  manifest["header"] = "user/" + name + ".cuh";
  manifest["header_file"] = (broken_example_dir() / "broken.cuh").string();
  manifest["params"][0]["values"] = nlohmann::json::array({0});
  if (edit) edit(manifest);
  const auto path = dir / (name + ".json");
  std::ofstream(path) << manifest.dump(2);
  return path.string();
}

}  // namespace gmjit::testing
