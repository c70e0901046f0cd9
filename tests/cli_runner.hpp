#pragma once
// Runs gmtune as a user would and captures its exit status, stdout and stderr.

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace gmjit::testing {

struct CliResult {
  int status = -1;
  std::string out;
  std::string err;
};

inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// GMJIT_GMTUNE overrides the build-tree path, for test binaries run from a copied build.
inline std::string gmtune_path() {
  const char* over = std::getenv("GMJIT_GMTUNE");
  return over != nullptr && *over != '\0' ? over : GMTUNE_PATH;
}

inline CliResult run_gmtune(const std::string& arguments, const std::string& environment = {}) {
  const auto dir = std::filesystem::temp_directory_path();
  const auto tag = std::to_string(reinterpret_cast<std::uintptr_t>(&arguments)) + std::to_string(::getpid());
  const auto out_path = dir / ("gmtune-out-" + tag);
  const auto err_path = dir / ("gmtune-err-" + tag);
  const std::string command = environment + " " + gmtune_path() + " " + arguments + " >" + out_path.string() + " 2>" +
                              err_path.string();
  const int raw = std::system(command.c_str());
  CliResult result;
  result.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  result.out = read_text(out_path);
  result.err = read_text(err_path);
  std::filesystem::remove(out_path);
  std::filesystem::remove(err_path);
  return result;
}

// The arguments of the first `gmtune ...` command quoted in `text` (an error message that tells
// the user what to run); empty when there is none.
inline std::string quoted_gmtune_arguments(const std::string& text) {
  const std::string opening = "`gmtune ";
  const auto begin = text.find(opening);
  if (begin == std::string::npos) return {};
  const auto end = text.find('`', begin + opening.size());
  if (end == std::string::npos) return {};
  return text.substr(begin + opening.size(), end - begin - opening.size());
}

inline int line_count(const std::string& text) {
  int lines = 0;
  for (char c : text) lines += c == '\n';
  return lines;
}

}  // namespace gmjit::testing
