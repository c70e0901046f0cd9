#include "lib/output_files.hpp"

#include <filesystem>
#include <fstream>

#include "gmjit/error.hpp"

namespace gmjit::detail {
namespace {

void write_file(const std::filesystem::path& path, const void* data, std::size_t size) {
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out) throw Error(ErrorKind::usage, 0, "cannot write " + path.string());
}

}  // namespace

CompileOutputs write_outputs(const std::string& directory, const std::string& stem, const std::vector<OutputFile>& files,
                             const std::vector<char>& cubin) {
  const std::filesystem::path dir(directory);
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) throw Error(ErrorKind::usage, 0, "cannot create " + dir.string() + ": " + error.message());
  for (const auto& file : files) write_file(dir / file.name, file.bytes.data(), file.bytes.size());
  write_file(dir / (stem + ".cubin"), cubin.data(), cubin.size());
  CompileOutputs out;
  out.stem = (dir / stem).string();
  if (const auto sass = disassemble(cubin, out.sass_note)) {
    write_file(dir / (stem + ".sass"), sass->data(), sass->size());
    out.sass = true;
  }
  return out;
}

}  // namespace gmjit::detail
