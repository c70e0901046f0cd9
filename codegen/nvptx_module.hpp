#pragma once
// For codegen/ itself (the lowering) and its tests only: the LLVM types of the NVPTX back end,
// so IR can be built with llvm::IRBuilder and handed over without a round trip through text.
// Pinned to LLVM 19 (codegen/CMakeLists.txt); layers above codegen/ use codegen/nvptx.hpp.

#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include <memory>
#include <string>

#include "codegen/nvptx.hpp"

namespace gmjit::codegen {

// A module and the context that owns its types and constants. Each compile gets its own
// context: LLVM contexts are not thread-safe, separate ones may be used on separate threads.
struct NvptxModule {
  std::unique_ptr<llvm::LLVMContext> context;  // declared first: destroyed after the module
  std::unique_ptr<llvm::Module> module;
};

// An empty module with the NVPTX triple (nvptx64-nvidia-cuda) and the data layout of `arch`'s
// TargetMachine already set, ready for IRBuilder. Throws Error(usage) for an unknown arch.
NvptxModule make_nvptx_module(const std::string& name, const std::string& arch);

// Compiles `module` to PTX for `arch` ("sm_90a"), changing it in place: sets the triple and data
// layout, verifies it, links libdevice (only when it declares __nv_* functions, only what they
// need, internalized), sets "nvvm-reflect-ftz" to 0 and answers libdevice's __CUDA_PREC_SQRT
// with 1 (NVRTC's defaults: denormals kept, IEEE sqrt), runs NVVMReflect and the O3 pipeline, and
// prints PTX. Entry points are functions with the ptx_kernel calling convention
// (llvm::CallingConv::PTX_Kernel). Throws Error(compile) with the verifier's or LLVM's message
// for a module it cannot compile, Error(usage) for an unknown arch.
PtxResult emit_ptx(llvm::Module& module, const std::string& arch);

}  // namespace gmjit::codegen
