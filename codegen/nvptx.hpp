#pragma once
// libgmjit's second code generator: LLVM IR -> PTX through LLVM 19's NVPTX back end, for the
// kernels libgmjit writes itself (fused pointwise and row reductions). nvptx.cpp is the one file
// that includes LLVM headers; this header names no LLVM type. Code in codegen/ that builds IR
// with llvm::IRBuilder uses codegen/nvptx_module.hpp instead. PTX -> cubin: codegen/jitlink.hpp.

#include <string>
#include <string_view>
#include <vector>

namespace gmjit::codegen {

// The PTX ISA every module is emitted for (`+ptx85`, LLVM 19's newest; the CUDA 13 driver and
// nvJitLink accept it).
inline constexpr const char* kNvptxPtxIsa = "8.5";

struct PtxResult {
  std::string ptx;
  std::string arch;                  // "sm_90a"
  std::vector<std::string> kernels;  // the module's ptx_kernel functions: its .entry names
  bool libdevice_linked = false;     // the module called __nv_* functions
  std::string log;                   // LLVM's warnings, if any
};

// What, besides the module itself, decides the PTX (and, through nvJitLink, the cubin) of a
// generated kernel: the compile key of one must cover all of it.
struct NvptxIdentity {
  std::string llvm_version;    // LLVM_VERSION_STRING of the LLVM linked in, "19.1.7"
  std::string ptx_isa;         // kNvptxPtxIsa
  std::string libdevice_path;  // empty when no toolkit holds one
  std::string libdevice_hash;  // XXH3-64 of libdevice.10.bc's bytes, 16 hex digits; "none" without one
  std::string nvjitlink_version;  // "13.0"

  // All of the above in one line, for a compile key.
  std::string key() const;
};

// Computed once per process (libdevice is read and hashed then).
const NvptxIdentity& nvptx_identity();

// LLVM IR, as text (.ll) or bitcode (.bc), to PTX for `arch` (see emit_ptx in
// codegen/nvptx_module.hpp for what happens to it). Throws Error(compile) for IR that does not
// parse or verify, with LLVM's message; Error(usage) for an arch LLVM 19 cannot target.
PtxResult emit_ptx_from_ir(std::string_view ir, const std::string& arch);

}  // namespace gmjit::codegen
