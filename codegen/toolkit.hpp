#pragma once
// Facts about the CUDA toolkit found at run time: where its headers are, which NVRTC build is
// loaded, and which disassembler can be used.

#include <optional>
#include <string>
#include <vector>

namespace gmjit::codegen {

// $CUDA_HOME/include, else $CUDA_PATH/include, else /usr/local/cuda/include: the first that
// holds cuda_fp16.h. Throws Error(compile) listing what was tried when none does.
const std::string& cuda_include_dir();

struct NvrtcIdentity {
  int major = 0;
  int minor = 0;
  std::string build_id;  // GNU build-id of the loaded libnvrtc: pins its bundled CUDA headers
  std::string library_path;
};
const NvrtcIdentity& nvrtc_identity();

// nvdisasm or cuobjdump, from PATH or the toolkit's bin/, with the arguments that print SASS
// for a cubin file appended last; nullopt when neither exists.
std::optional<std::vector<std::string>> disassembler_command();

// Runs the disassembler on a cubin; nullopt with `why_not` set when none is available or it fails.
std::optional<std::string> disassemble(const std::vector<char>& cubin, std::string& why_not);

}  // namespace gmjit::codegen
