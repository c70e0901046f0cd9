// The LLVM 19 NVPTX back end (codegen/nvptx.cpp) and nvJitLink (codegen/jitlink.cpp), no GPU:
// kernels built with IRBuilder become PTX 8.5 for sm_90a and then a cubin whose resources the
// project's own reader finds; bad IR and bad PTX surface as Error(compile), never a crash.
#include <gtest/gtest.h>

#include <llvm/IR/BasicBlock.h>
#include <llvm/IR/CallingConv.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/DerivedTypes.h>
#include <llvm/IR/Function.h>
#include <llvm/IR/GlobalVariable.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/IntrinsicsNVPTX.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "codegen/cubin.hpp"
#include "codegen/jitlink.hpp"
#include "codegen/nvptx.hpp"
#include "codegen/nvptx_module.hpp"
#include "gmjit/error.hpp"

namespace gmjit {
namespace {

constexpr const char* kArch = "sm_90a";
constexpr unsigned kGlobal = 1;
constexpr unsigned kShared = 3;

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

// A kernel `name`(float addrspace(1)* x, float addrspace(1)* y, i32 n) with the ptx_kernel
// calling convention, its builder placed in the entry block.
struct KernelBuilder {
  llvm::Module& module;
  llvm::LLVMContext& context;
  llvm::Function* function;
  llvm::IRBuilder<> builder;
  llvm::Value* x;
  llvm::Value* y;
  llvm::Value* n;

  KernelBuilder(llvm::Module& m, const std::string& name)
      : module(m), context(m.getContext()), function(nullptr), builder(m.getContext()) {
    llvm::Type* global_ptr = llvm::PointerType::get(context, kGlobal);
    auto* type = llvm::FunctionType::get(builder.getVoidTy(), {global_ptr, global_ptr, builder.getInt32Ty()}, false);
    function = llvm::Function::Create(type, llvm::Function::ExternalLinkage, name, module);
    function->setCallingConv(llvm::CallingConv::PTX_Kernel);
    x = function->getArg(0);
    y = function->getArg(1);
    n = function->getArg(2);
    x->setName("x");
    y->setName("y");
    n->setName("n");
    builder.SetInsertPoint(llvm::BasicBlock::Create(context, "entry", function));
  }

  llvm::Value* sreg(llvm::Intrinsic::ID id) {
    return builder.CreateCall(llvm::Intrinsic::getDeclaration(&module, id));
  }
  llvm::Value* thread_x() { return sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x); }
  // ctaid.x * ntid.x + tid.x
  llvm::Value* global_index() {
    llvm::Value* block = builder.CreateMul(sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x),
                                           sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_ntid_x), "block", true, true);
    return builder.CreateAdd(block, thread_x(), "i", true, true);
  }
  llvm::Value* element(llvm::Value* base, llvm::Value* index) {
    return builder.CreateInBoundsGEP(builder.getFloatTy(), base, builder.CreateSExt(index, builder.getInt64Ty()));
  }

  // if (i < n) y[i] = body(x[i]);
  template <typename Body>
  void guarded_map(Body body) {
    llvm::Value* i = global_index();
    auto* work = llvm::BasicBlock::Create(context, "work", function);
    auto* done = llvm::BasicBlock::Create(context, "done", function);
    builder.CreateCondBr(builder.CreateICmpSLT(i, n), work, done);
    builder.SetInsertPoint(work);
    llvm::Value* value = builder.CreateLoad(builder.getFloatTy(), element(x, i), "xi");
    builder.CreateStore(body(value), element(y, i));
    builder.CreateBr(done);
    builder.SetInsertPoint(done);
    builder.CreateRetVoid();
  }
};

// (a) y[i] = x[i] * 2 + 1
codegen::NvptxModule affine_module() {
  codegen::NvptxModule made = codegen::make_nvptx_module("affine", kArch);
  KernelBuilder k(*made.module, "affine");
  k.guarded_map([&](llvm::Value* v) {
    return k.builder.CreateFAdd(k.builder.CreateFMul(v, llvm::ConstantFP::get(k.builder.getFloatTy(), 2.0)),
                                llvm::ConstantFP::get(k.builder.getFloatTy(), 1.0));
  });
  return made;
}

// (b) y[i] = __nv_expf(x[i]), from libdevice
codegen::NvptxModule exp_module() {
  codegen::NvptxModule made = codegen::make_nvptx_module("exp", kArch);
  KernelBuilder k(*made.module, "exp_kernel");
  llvm::FunctionCallee expf = made.module->getOrInsertFunction(
      "__nv_expf", llvm::FunctionType::get(k.builder.getFloatTy(), {k.builder.getFloatTy()}, false));
  k.guarded_map([&](llvm::Value* v) { return k.builder.CreateCall(expf, {v}); });
  return made;
}

// (c) tile[t] = x[i]; barrier; v = tile[t ^ 1]; y[i] = v + shfl.bfly(v, 16): shared memory, a
// barrier and a warp shuffle. No bounds check, so every thread reaches the barrier.
constexpr int kTile = 256;
codegen::NvptxModule shuffle_module() {
  codegen::NvptxModule made = codegen::make_nvptx_module("shuffle", kArch);
  KernelBuilder k(*made.module, "shuffle_kernel");
  auto& b = k.builder;
  auto* tile_type = llvm::ArrayType::get(b.getFloatTy(), kTile);
  auto* tile = new llvm::GlobalVariable(*made.module, tile_type, false, llvm::GlobalValue::InternalLinkage,
                                        llvm::UndefValue::get(tile_type), "tile", nullptr,
                                        llvm::GlobalValue::NotThreadLocal, kShared);
  tile->setAlignment(llvm::Align(4));
  llvm::Value* i = k.global_index();
  llvm::Value* t = k.thread_x();
  auto slot = [&](llvm::Value* index) {
    return b.CreateInBoundsGEP(tile_type, tile, {b.getInt64(0), b.CreateZExt(index, b.getInt64Ty())});
  };
  b.CreateStore(b.CreateLoad(b.getFloatTy(), k.element(k.x, i)), slot(t));
  b.CreateCall(llvm::Intrinsic::getDeclaration(made.module.get(), llvm::Intrinsic::nvvm_barrier0));
  llvm::Value* v = b.CreateLoad(b.getFloatTy(), slot(b.CreateXor(t, b.getInt32(1))), "v");
  llvm::Value* other =
      b.CreateCall(llvm::Intrinsic::getDeclaration(made.module.get(), llvm::Intrinsic::nvvm_shfl_sync_bfly_f32),
                   {b.getInt32(-1), v, b.getInt32(16), b.getInt32(31)}, "other");
  b.CreateStore(b.CreateFAdd(v, other), k.element(k.y, i));
  b.CreateRetVoid();
  return made;
}

void expect_ptx_header(const codegen::PtxResult& result, const std::string& kernel) {
  EXPECT_NE(result.ptx.find(".version 8.5"), std::string::npos) << result.ptx;
  EXPECT_NE(result.ptx.find(".target sm_90a"), std::string::npos) << result.ptx;
  EXPECT_NE(result.ptx.find(".entry " + kernel), std::string::npos) << result.ptx;
  EXPECT_EQ(result.kernels, std::vector<std::string>{kernel});
  EXPECT_EQ(result.arch, kArch);
}

ResourceUsage expect_cubin(const codegen::PtxResult& result, const std::string& kernel) {
  const codegen::LinkedCubin linked = codegen::link_ptx(result.ptx, kArch);
  EXPECT_EQ(linked.options.front(), "-arch=sm_90a");
  EXPECT_GE(linked.cubin.size(), 4u);
  EXPECT_EQ(std::memcmp(linked.cubin.data(), "\x7f" "ELF", 4), 0);
  const ResourceUsage usage = codegen::read_cubin_resources(linked.cubin, kernel);
  EXPECT_GT(usage.registers, 0);
  EXPECT_LE(usage.registers, 255);
  return usage;
}

TEST(Nvptx, AffineKernelGivesPtx85ForSm90aAndACubin) {
  codegen::NvptxModule made = affine_module();
  const codegen::PtxResult result = codegen::emit_ptx(*made.module, kArch);
  expect_ptx_header(result, "affine");
  EXPECT_NE(result.ptx.find("mov.u32 \t%r"), std::string::npos);  // special registers read
  EXPECT_NE(result.ptx.find("%tid.x"), std::string::npos);
  EXPECT_NE(result.ptx.find("%ctaid.x"), std::string::npos);
  EXPECT_NE(result.ptx.find("%ntid.x"), std::string::npos);
  EXPECT_NE(result.ptx.find("ld.global"), std::string::npos) << result.ptx;
  EXPECT_NE(result.ptx.find("st.global"), std::string::npos) << result.ptx;
  // A module that calls no __nv_* function does not pull libdevice in.
  EXPECT_FALSE(result.libdevice_linked);
  EXPECT_EQ(result.ptx.find("__nv_"), std::string::npos);
  EXPECT_EQ(result.ptx.find(".func"), std::string::npos) << result.ptx;
  expect_cubin(result, "affine");
}

TEST(Nvptx, LibdeviceIsLinkedOnlyWhenCalledAndLeavesNoCall) {
  codegen::NvptxModule made = exp_module();
  const codegen::PtxResult result = codegen::emit_ptx(*made.module, kArch);
  expect_ptx_header(result, "exp_kernel");
  EXPECT_TRUE(result.libdevice_linked);
  // Linked, internalized and inlined: no call, no declaration and no copy of libdevice's other
  // functions is left.
  EXPECT_EQ(result.ptx.find("__nv_"), std::string::npos) << result.ptx;
  EXPECT_EQ(result.ptx.find("call"), std::string::npos) << result.ptx;
  EXPECT_EQ(result.ptx.find(".func"), std::string::npos) << result.ptx;
  EXPECT_NE(result.ptx.find("ex2.approx"), std::string::npos) << result.ptx;
  EXPECT_LT(result.ptx.size(), 8000u);
  expect_cubin(result, "exp_kernel");
}

TEST(Nvptx, SharedMemoryBarrierAndWarpShuffle) {
  codegen::NvptxModule made = shuffle_module();
  const codegen::PtxResult result = codegen::emit_ptx(*made.module, kArch);
  expect_ptx_header(result, "shuffle_kernel");
  EXPECT_NE(result.ptx.find(".shared .align 4 .b8 tile[1024]"), std::string::npos) << result.ptx;
  EXPECT_NE(result.ptx.find("st.shared.f32"), std::string::npos) << result.ptx;
  EXPECT_NE(result.ptx.find("ld.shared.f32"), std::string::npos) << result.ptx;
  EXPECT_NE(result.ptx.find("bar.sync \t0"), std::string::npos) << result.ptx;
  EXPECT_NE(result.ptx.find("shfl.sync.bfly.b32"), std::string::npos) << result.ptx;
  EXPECT_FALSE(result.libdevice_linked);
  const ResourceUsage usage = expect_cubin(result, "shuffle_kernel");
  // The cubin's .nv.shared.<kernel> section also counts the 1 KiB sm_80+ reserves per block;
  // nvJitLink's cubin (CUDA 13.0) marks it only with the .nv.reservedSmem symbol, not the
  // .nv.shared.reserved section ptxas writes, and read_cubin_resources takes it off either way.
  EXPECT_EQ(usage.shared_bytes, kTile * 4);
}

TEST(Nvptx, IrTextCompilesLikeABuiltModule) {
  const std::string ir = R"(
define ptx_kernel void @negate(ptr addrspace(1) %x) {
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %p = getelementptr inbounds float, ptr addrspace(1) %x, i32 %t
  %v = load float, ptr addrspace(1) %p
  %n = fneg float %v
  store float %n, ptr addrspace(1) %p
  ret void
}
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
)";
  const codegen::PtxResult result = codegen::emit_ptx_from_ir(ir, kArch);
  expect_ptx_header(result, "negate");
  EXPECT_NE(result.ptx.find("neg.f32"), std::string::npos) << result.ptx;
  expect_cubin(result, "negate");
}

// libdevice's reflect queries get NVRTC's defaults: __nv_sqrtf is IEEE (sqrt.rn, where LLVM
// 19's NVVMReflect alone would answer __CUDA_PREC_SQRT with 0: sqrt.approx) and keeps denormals
// ("nvvm-reflect-ftz" = 0; at 1 it would be sqrt.rn.ftz.f32). expf cannot tell: libdevice scales
// by 2^n around ex2.approx.ftz either way.
TEST(Nvptx, LibdeviceGetsNvrtcDefaultsNoFlushToZeroAndIeeeSqrt) {
  const std::string ir = R"(
declare float @__nv_sqrtf(float)
define ptx_kernel void @root(ptr addrspace(1) %x) {
  %v = load float, ptr addrspace(1) %x
  %r = call float @__nv_sqrtf(float %v)
  store float %r, ptr addrspace(1) %x
  ret void
}
)";
  const codegen::PtxResult result = codegen::emit_ptx_from_ir(ir, kArch);
  EXPECT_TRUE(result.libdevice_linked);
  EXPECT_NE(result.ptx.find("sqrt.rn.f32"), std::string::npos) << result.ptx;
  EXPECT_EQ(result.ptx.find("sqrt.approx"), std::string::npos) << result.ptx;
  EXPECT_EQ(result.ptx.find(".ftz"), std::string::npos) << result.ptx;
  EXPECT_EQ(result.ptx.find("__nv_"), std::string::npos) << result.ptx;
}

TEST(Nvptx, IrThatDoesNotParseIsACompileError) {
  try {
    codegen::emit_ptx_from_ir("define void @f( {", kArch);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::compile);
    EXPECT_NE(e.message().find("does not parse"), std::string::npos) << e.message();
    EXPECT_FALSE(e.log().empty());
  }
}

TEST(Nvptx, ABlockWithoutTerminatorIsACompileErrorWithTheVerifierMessage) {
  codegen::NvptxModule made = codegen::make_nvptx_module("broken", kArch);
  auto* type = llvm::FunctionType::get(llvm::Type::getVoidTy(*made.context), false);
  auto* function = llvm::Function::Create(type, llvm::Function::ExternalLinkage, "broken", *made.module);
  function->setCallingConv(llvm::CallingConv::PTX_Kernel);
  llvm::BasicBlock::Create(*made.context, "entry", function);
  try {
    codegen::emit_ptx(*made.module, kArch);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::compile);
    EXPECT_NE(e.message().find("does not have terminator"), std::string::npos) << e.message();
    EXPECT_NE(e.log().find("'broken'"), std::string::npos) << e.log();
  }
}

TEST(Nvptx, AnArchLlvmCannotTargetIsAUsageError) {
  try {
    codegen::make_nvptx_module("m", "sm_999");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::usage);
    EXPECT_NE(e.message().find("sm_999"), std::string::npos) << e.message();
  }
}

TEST(Nvptx, IdentityNamesLlvmPtxLibdeviceAndNvJitLink) {
  const codegen::NvptxIdentity& id = codegen::nvptx_identity();
  EXPECT_EQ(id.llvm_version.rfind("19.", 0), 0u) << id.llvm_version;
  EXPECT_EQ(id.ptx_isa, "8.5");
  EXPECT_NE(id.libdevice_path.find("libdevice.10.bc"), std::string::npos) << id.libdevice_path;
  EXPECT_EQ(id.libdevice_hash.size(), 16u) << id.libdevice_hash;
  EXPECT_EQ(id.libdevice_hash.find_first_not_of("0123456789abcdef"), std::string::npos) << id.libdevice_hash;
  EXPECT_FALSE(id.nvjitlink_version.empty());
  EXPECT_EQ(id.nvjitlink_version, codegen::nvjitlink_version());
  const std::string key = id.key();
  for (const auto& part : {id.llvm_version, id.libdevice_hash, id.nvjitlink_version}) {
    EXPECT_NE(key.find(part), std::string::npos) << key;
  }
}

// The compile pool compiles on several threads; each compile owns its context.
TEST(Nvptx, CompilesOnSeveralThreadsAtOnce) {
  constexpr int kThreads = 4;
  std::vector<std::string> ptx(kThreads);
  std::vector<std::string> failures(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &ptx, &failures] {
      try {
        codegen::NvptxModule made = t % 2 == 0 ? exp_module() : shuffle_module();
        ptx[t] = codegen::emit_ptx(*made.module, kArch).ptx;
      } catch (const std::exception& e) {
        failures[t] = e.what();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(failures[t], "") << t;
    EXPECT_EQ(ptx[t], ptx[t % 2]) << t;
  }
  EXPECT_EQ(count(ptx[0], ".entry"), 1u);
}

TEST(Jitlink, InvalidPtxIsACompileErrorWithNvJitLinksLog) {
  const std::string ptx = ".version 8.5\n.target sm_90a\n.address_size 64\n.visible .entry k() { bogus.instruction; }\n";
  try {
    codegen::link_ptx(ptx, kArch);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::compile);
    EXPECT_FALSE(e.log().empty());
    EXPECT_NE(e.message().find(e.log().substr(0, e.log().find('\n'))), std::string::npos)
        << e.message() << "\n" << e.log();
    EXPECT_EQ(e.options(), std::vector<std::string>{"-arch=sm_90a"});
  }
}

TEST(Jitlink, AnOptionNvJitLinkRejectsIsAnNvJitLinkError) {
  try {
    codegen::link_ptx(".version 8.5\n.target sm_90a\n.address_size 64\n", kArch, {"-no-such-option"});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_TRUE(e.kind() == ErrorKind::nvrtc || e.kind() == ErrorKind::compile) << to_string(e.kind());
    EXPECT_FALSE(e.message().empty());
  }
}

}  // namespace
}  // namespace gmjit
