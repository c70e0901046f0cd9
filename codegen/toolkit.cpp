#include "codegen/toolkit.hpp"

#include <nvrtc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/build_id.hpp"
#include "gmjit/error.hpp"

namespace gmjit::codegen {
namespace fs = std::filesystem;

// A first launch computes a compile key, whose options name this directory: access(2) rather
// than std::filesystem, whose first use in a process cost 65-120 us here against 2 for the call.
const std::string& cuda_include_dir() {
  static const std::string dir = [] {
    auto has_headers = [](const std::string& include) { return ::access((include + "/cuda_fp16.h").c_str(), R_OK) == 0; };
    const char* const vars[] = {"CUDA_HOME", "CUDA_PATH"};
    for (const char* var : vars) {
      const char* value = std::getenv(var);
      if (value != nullptr && *value != '\0' && has_headers(std::string(value) + "/include")) {
        return std::string(value) + "/include";
      }
    }
    if (has_headers("/usr/local/cuda/include")) return std::string("/usr/local/cuda/include");
    std::vector<std::string> tried;
    for (const char* var : vars) {
      if (const char* value = std::getenv(var); value != nullptr && *value != '\0') {
        tried.push_back(fmt::format("${}={}", var, value));
      }
    }
    tried.emplace_back("/usr/local/cuda");
    throw Error(ErrorKind::compile, 0,
                fmt::format("no CUDA toolkit headers found (tried {}); set CUDA_HOME to the toolkit",
                            fmt::join(tried, ", ")));
  }();
  return dir;
}

const NvrtcIdentity& nvrtc_identity() {
  static const NvrtcIdentity identity = [] {
    NvrtcIdentity id;
    nvrtcVersion(&id.major, &id.minor);
    const detail::LoadedObject nvrtc = detail::loaded_object_of(reinterpret_cast<const void*>(&nvrtcVersion));
    id.library_path = nvrtc.path;
    // Without a build-id (a stripped or static NVRTC) the library's size still tells builds apart.
    id.build_id = !nvrtc.build_id.empty() ? nvrtc.build_id
                  : !nvrtc.path.empty() && fs::exists(nvrtc.path)
                      ? fmt::format("size-{}", fs::file_size(nvrtc.path))
                      : "unknown";
    return id;
  }();
  return identity;
}

std::optional<std::vector<std::string>> disassembler_command() {
  std::vector<fs::path> dirs;
  if (const char* path = std::getenv("PATH")) {
    std::string all = path;
    for (size_t start = 0, colon; start <= all.size(); start = colon + 1) {
      colon = all.find(':', start);
      dirs.emplace_back(all.substr(start, colon == std::string::npos ? std::string::npos : colon - start));
      if (colon == std::string::npos) break;
    }
  }
  try {
    dirs.push_back(fs::path(cuda_include_dir()).parent_path() / "bin");
  } catch (const Error&) {
  }
  for (const auto& [tool, args] : {std::pair<const char*, std::vector<std::string>>{"nvdisasm", {"-c", "-g"}},
                                   {"cuobjdump", {"-sass"}}}) {
    for (const auto& dir : dirs) {
      const fs::path candidate = dir / tool;
      if (!dir.empty() && access(candidate.c_str(), X_OK) == 0) {
        std::vector<std::string> command{candidate.string()};
        command.insert(command.end(), args.begin(), args.end());
        return command;
      }
    }
  }
  return std::nullopt;
}

std::optional<std::string> disassemble(const std::vector<char>& cubin, std::string& why_not) {
  const auto command = disassembler_command();
  if (!command) {
    why_not = "no nvdisasm or cuobjdump on PATH or in the CUDA toolkit; SASS not written";
    return std::nullopt;
  }
  char cubin_path[] = "/tmp/gmjit-disasm-XXXXXX";
  const int fd = mkstemp(cubin_path);
  if (fd < 0) {
    why_not = "cannot create a temporary file for the disassembler";
    return std::nullopt;
  }
  close(fd);
  { std::ofstream(cubin_path, std::ios::binary).write(cubin.data(), static_cast<std::streamsize>(cubin.size())); }
  std::string line = "'" + fmt::format("{}", fmt::join(*command, "' '")) + "' '" + cubin_path + "' 2>&1";
  std::string output;
  FILE* pipe = popen(line.c_str(), "r");
  int status = -1;
  if (pipe != nullptr) {
    std::array<char, 4096> buffer{};
    size_t n = 0;
    while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) output.append(buffer.data(), n);
    status = pclose(pipe);
  }
  fs::remove(cubin_path);
  if (status != 0) {
    why_not = fmt::format("{} failed: {}", (*command)[0], output.substr(0, output.find('\n')));
    return std::nullopt;
  }
  return output;
}

}  // namespace gmjit::codegen
