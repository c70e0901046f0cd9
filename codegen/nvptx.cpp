// The one file that drives LLVM's back end. Written against LLVM 19's C++ API, which moves
// between releases (TargetMachine, pass builder and code-gen enums all changed in 17-20), and
// checked at compile time below; a new LLVM means revisiting this file alone.
#include "codegen/nvptx.hpp"

#include <llvm/ADT/SmallString.h>
#include <llvm/ADT/StringSet.h>
#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/IR/CallingConv.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/DiagnosticHandler.h>
#include <llvm/IR/DiagnosticInfo.h>
#include <llvm/IR/DiagnosticPrinter.h>
#include <llvm/IR/GlobalVariable.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Verifier.h>
#include <llvm/IRReader/IRReader.h>
#include <llvm/Linker/Linker.h>
#include <llvm/MC/MCSubtargetInfo.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/ErrorHandling.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/SourceMgr.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Target/TargetOptions.h>
#include <llvm/Transforms/IPO/Internalize.h>

#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <mutex>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "codegen/jitlink.hpp"
#include "codegen/nvptx_module.hpp"
#include "codegen/toolkit.hpp"
#include "gmjit/error.hpp"

static_assert(LLVM_VERSION_MAJOR == 19, "codegen/nvptx.cpp is written against LLVM 19's C++ API");

namespace gmjit::codegen {
namespace {

constexpr const char* kTriple = "nvptx64-nvidia-cuda";
constexpr const char* kFeatures = "+ptx85";  // kNvptxPtxIsa

[[noreturn]] void compile_error(const std::string& message, const std::string& call, int line,
                                const std::string& log = {}) {
  throw Error(ErrorKind::compile, 0, message, call, __FILE__, line, log);
}

// LLVM reports a failure it cannot recover from (instruction selection, a broken invariant)
// through report_fatal_error, which would otherwise exit the process. The handler may not
// return; it throws instead. LLVM's own frames are built with unwind tables but without cleanups
// (-fno-exceptions -funwind-tables), so what they held leaks: acceptable for a kernel that cannot
// compile, and better than ending the application.
void on_fatal_error(void*, const char* reason, bool) {
  throw Error(ErrorKind::compile, 0, fmt::format("LLVM fatal error: {}", reason), "llvm::report_fatal_error",
              __FILE__, __LINE__);
}

// Process-wide LLVM state, set up once: the NVPTX target and the fatal-error handler. No cl::opt
// is changed from its default, so every compile in the process sees the same options and the
// identity (LLVM version) covers them.
void initialize_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
    llvm::install_fatal_error_handler(&on_fatal_error, nullptr);
  });
}

const llvm::Target& nvptx_target() {
  initialize_once();
  std::string error;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(kTriple, error);
  if (target == nullptr) compile_error("LLVM has no NVPTX target: " + error, "TargetRegistry::lookupTarget", __LINE__);
  return *target;
}

// A TargetMachine is cheap next to a compile and not shared between threads.
std::unique_ptr<llvm::TargetMachine> make_target_machine(const std::string& arch) {
  const llvm::Target& target = nvptx_target();
  // An unknown CPU would only print a warning to stderr and fall back to sm_30.
  std::unique_ptr<llvm::MCSubtargetInfo> subtargets(target.createMCSubtargetInfo(kTriple, "", ""));
  if (!subtargets || !subtargets->isCPUStringValid(arch)) {
    throw Error(ErrorKind::usage, 0,
                fmt::format("LLVM {}'s NVPTX back end cannot target '{}' (expected e.g. sm_90a)", LLVM_VERSION_STRING,
                            arch),
                "make_target_machine", __FILE__, __LINE__);
  }
  llvm::TargetOptions options;
  std::unique_ptr<llvm::TargetMachine> machine(target.createTargetMachine(
      kTriple, arch, kFeatures, options, std::nullopt, std::nullopt, llvm::CodeGenOptLevel::Aggressive));
  if (!machine) compile_error("cannot create an NVPTX TargetMachine for " + arch, "createTargetMachine", __LINE__);
  return machine;
}

// Collects the context's diagnostics for the length of one compile; without a handler LLVM
// prints an error to stderr and exits the process. The caller's handler is put back after.
class DiagnosticScope {
 public:
  explicit DiagnosticScope(llvm::LLVMContext& context) : context_(context), previous_(context.getDiagnosticHandler()) {
    auto handler = std::make_unique<llvm::DiagnosticHandler>(this);
    handler->DiagHandlerCallback = &DiagnosticScope::record;
    context_.setDiagnosticHandler(std::move(handler));
  }
  ~DiagnosticScope() { context_.setDiagnosticHandler(std::move(previous_)); }
  DiagnosticScope(const DiagnosticScope&) = delete;
  DiagnosticScope& operator=(const DiagnosticScope&) = delete;

  const std::string& errors() const { return errors_; }
  const std::string& warnings() const { return warnings_; }

  void throw_if_errors(const char* stage, int line) const {
    if (!errors_.empty()) {
      compile_error(fmt::format("LLVM failed {}: {}", stage, errors_.substr(0, errors_.find('\n'))), stage, line,
                    errors_ + warnings_);
    }
  }

 private:
  static void record(const llvm::DiagnosticInfo* info, void* context) {
    auto* self = static_cast<DiagnosticScope*>(context);
    std::string text;
    llvm::raw_string_ostream stream(text);
    llvm::DiagnosticPrinterRawOStream printer(stream);
    info->print(printer);
    stream.flush();
    if (info->getSeverity() == llvm::DS_Error) {
      self->errors_ += "error: " + text + "\n";
    } else if (info->getSeverity() == llvm::DS_Warning) {
      self->warnings_ += "warning: " + text + "\n";
    }
  }

  llvm::LLVMContext& context_;
  std::unique_ptr<llvm::DiagnosticHandler> previous_;
  std::string errors_;
  std::string warnings_;
};

// libdevice.10.bc of the toolkit whose headers NVRTC uses, else of $CUDA_HOME, $CUDA_PATH or
// /usr/local/cuda (a pip-installed NVRTC may come without one).
std::string find_libdevice() {
  const std::string relative = "/nvvm/libdevice/libdevice.10.bc";
  std::vector<std::string> roots;
  try {
    const std::string& include = cuda_include_dir();
    roots.push_back(include.substr(0, include.rfind('/')));
  } catch (const Error&) {
  }
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"}) {
    if (const char* value = std::getenv(var); value != nullptr && *value != '\0') roots.emplace_back(value);
  }
  roots.emplace_back("/usr/local/cuda");
  for (const auto& root : roots) {
    if (::access((root + relative).c_str(), R_OK) == 0) return root + relative;
  }
  return {};
}

struct Libdevice {
  std::string path;
  std::string bytes;  // outlives every lazily loaded module that reads from it
};

const Libdevice& libdevice() {
  static const Libdevice loaded = [] {
    Libdevice found;
    found.path = find_libdevice();
    if (!found.path.empty()) {
      std::ifstream in(found.path, std::ios::binary);
      found.bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    return found;
  }();
  return loaded;
}

bool declares_libdevice_functions(const llvm::Module& module) {
  for (const llvm::Function& function : module) {
    if (function.isDeclaration() && function.getName().starts_with("__nv_")) return true;
  }
  return false;
}

// Only the functions the module calls are materialized and linked (LinkOnlyNeeded); they are
// internalized afterwards, since the back end reads an external function as one to keep whole
// (and libdevice's are never entry points), so O3 can inline and drop them.
void link_libdevice(llvm::Module& module, const DiagnosticScope& diagnostics) {
  const Libdevice& device = libdevice();
  if (device.bytes.empty()) {
    compile_error("the module calls libdevice (__nv_*) functions but no libdevice.10.bc was found under "
                  "$CUDA_HOME, $CUDA_PATH or /usr/local/cuda (nvvm/libdevice/)",
                  "link_libdevice", __LINE__);
  }
  llvm::Expected<std::unique_ptr<llvm::Module>> lazy =
      llvm::getLazyBitcodeModule(llvm::MemoryBufferRef(device.bytes, device.path), module.getContext());
  if (!lazy) {
    compile_error(fmt::format("cannot read {}: {}", device.path, llvm::toString(lazy.takeError())),
                  "getLazyBitcodeModule", __LINE__);
  }
  std::unique_ptr<llvm::Module> library = std::move(*lazy);
  // libdevice carries its own triple (nvptx64-nvidia-gpulibs) and an older data layout; the
  // linker would warn about both.
  library->setTargetTriple(module.getTargetTriple());
  library->setDataLayout(module.getDataLayout());
  const bool failed = llvm::Linker::linkModules(
      module, std::move(library), llvm::Linker::LinkOnlyNeeded,
      [](llvm::Module& linked, const llvm::StringSet<>& from_library) {
        llvm::internalizeModule(linked, [&from_library](const llvm::GlobalValue& value) {
          return !value.hasName() || !from_library.contains(value.getName());
        });
      });
  diagnostics.throw_if_errors("linking libdevice", __LINE__);
  if (failed) compile_error("linking libdevice failed", "Linker::linkModules", __LINE__);
}

// LLVM 19's NVVMReflect answers only __CUDA_FTZ (the module flag) and __CUDA_ARCH; any other
// query folds to 0, and libdevice asks __CUDA_PREC_SQRT, so __nv_sqrtf would become
// sqrt.approx.f32. NVRTC's default for the templates is -prec-sqrt=true: answer 1 before it runs.
void answer_prec_sqrt(llvm::Module& module) {
  llvm::Function* reflect = module.getFunction("__nvvm_reflect");
  if (reflect == nullptr) return;
  std::vector<llvm::CallInst*> answered;
  for (llvm::User* user : reflect->users()) {
    auto* call = llvm::dyn_cast<llvm::CallInst>(user);
    if (call == nullptr || call->getCalledFunction() != reflect || call->arg_size() != 1) continue;
    llvm::Value* argument = call->getArgOperand(0);
    // libdevice's IR predates opaque pointers: the string may reach the call through
    // llvm.nvvm.ptr.constant.to.gen, as NVVMReflect itself allows.
    if (auto* conversion = llvm::dyn_cast<llvm::CallInst>(argument); conversion && conversion->arg_size() == 1) {
      argument = conversion->getArgOperand(0);
    }
    auto* global = llvm::dyn_cast<llvm::GlobalVariable>(argument->stripPointerCasts());
    if (global == nullptr || !global->hasInitializer()) continue;
    auto* text = llvm::dyn_cast<llvm::ConstantDataSequential>(global->getInitializer());
    if (text != nullptr && text->isCString() && text->getAsCString() == "__CUDA_PREC_SQRT") answered.push_back(call);
  }
  for (llvm::CallInst* call : answered) {
    call->replaceAllUsesWith(llvm::ConstantInt::get(call->getType(), 1));
    call->eraseFromParent();
  }
}

void optimize(llvm::Module& module, llvm::TargetMachine& machine) {
  // Declared in this order so they are destroyed in the reverse one, as PassBuilder requires.
  llvm::LoopAnalysisManager loops;
  llvm::FunctionAnalysisManager functions;
  llvm::CGSCCAnalysisManager cgscc;
  llvm::ModuleAnalysisManager modules;
  llvm::PassBuilder builder(&machine);  // registers NVPTX's passes, nvvm-reflect among them
  builder.registerModuleAnalyses(modules);
  builder.registerCGSCCAnalyses(cgscc);
  builder.registerFunctionAnalyses(functions);
  builder.registerLoopAnalyses(loops);
  builder.crossRegisterProxies(loops, functions, cgscc, modules);

  // NVVMReflect first, so the O3 pipeline sees __nvvm_reflect("__CUDA_FTZ") already folded and
  // drops libdevice's unused branches.
  llvm::ModulePassManager reflect;
  if (llvm::Error error = builder.parsePassPipeline(reflect, "function(nvvm-reflect)")) {
    compile_error("cannot build the nvvm-reflect pass: " + llvm::toString(std::move(error)), "parsePassPipeline",
                  __LINE__);
  }
  reflect.run(module, modules);
  llvm::ModulePassManager o3 = builder.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3);
  o3.run(module, modules);
}

std::string print_ptx(llvm::Module& module, llvm::TargetMachine& machine) {
  llvm::SmallString<0> ptx;
  llvm::raw_svector_ostream stream(ptx);
  llvm::legacy::PassManager passes;
  if (machine.addPassesToEmitFile(passes, stream, nullptr, llvm::CodeGenFileType::AssemblyFile)) {
    compile_error("the NVPTX TargetMachine cannot emit PTX", "addPassesToEmitFile", __LINE__);
  }
  passes.run(module);
  return std::string(ptx.str());
}

}  // namespace

NvptxModule make_nvptx_module(const std::string& name, const std::string& arch) {
  const std::unique_ptr<llvm::TargetMachine> machine = make_target_machine(arch);
  NvptxModule made;
  made.context = std::make_unique<llvm::LLVMContext>();
  made.module = std::make_unique<llvm::Module>(name, *made.context);
  made.module->setTargetTriple(kTriple);
  made.module->setDataLayout(machine->createDataLayout());
  return made;
}

PtxResult emit_ptx(llvm::Module& module, const std::string& arch) {
  const std::unique_ptr<llvm::TargetMachine> machine = make_target_machine(arch);
  DiagnosticScope diagnostics(module.getContext());
  module.setTargetTriple(kTriple);
  module.setDataLayout(machine->createDataLayout());

  std::string problems;
  llvm::raw_string_ostream verifier_out(problems);
  if (llvm::verifyModule(module, &verifier_out)) {
    verifier_out.flush();
    while (!problems.empty() && problems.back() == '\n') problems.pop_back();
    compile_error(fmt::format("LLVM IR of module '{}' does not verify: {}", module.getModuleIdentifier(),
                              problems.substr(0, problems.find('\n'))),
                  "llvm::verifyModule", __LINE__, problems);
  }

  PtxResult result;
  result.arch = arch;
  for (const llvm::Function& function : module) {
    if (!function.isDeclaration() && function.getCallingConv() == llvm::CallingConv::PTX_Kernel) {
      result.kernels.push_back(function.getName().str());
    }
  }
  if (declares_libdevice_functions(module)) {
    link_libdevice(module, diagnostics);
    result.libdevice_linked = true;
  }
  // libdevice's __nvvm_reflect("__CUDA_FTZ") reads this: 0 keeps denormals, as NVRTC's default
  // (-ftz=false) does for the templates.
  module.setModuleFlag(llvm::Module::Override, "nvvm-reflect-ftz", 0u);
  answer_prec_sqrt(module);
  optimize(module, *machine);
  diagnostics.throw_if_errors("optimizing", __LINE__);
  result.ptx = print_ptx(module, *machine);
  diagnostics.throw_if_errors("emitting PTX", __LINE__);
  result.log = diagnostics.warnings();
  return result;
}

PtxResult emit_ptx_from_ir(std::string_view ir, const std::string& arch) {
  initialize_once();
  llvm::LLVMContext context;
  llvm::SMDiagnostic problem;
  std::unique_ptr<llvm::Module> module =
      llvm::parseIR(llvm::MemoryBufferRef(llvm::StringRef(ir.data(), ir.size()), "gmjit.ll"), problem, context);
  if (!module) {
    std::string text;
    llvm::raw_string_ostream stream(text);
    problem.print("gmjit", stream, /*ShowColors=*/false);
    stream.flush();
    compile_error(fmt::format("LLVM IR does not parse: {}:{}: {}", problem.getLineNo(), problem.getColumnNo(),
                              problem.getMessage().str()),
                  "llvm::parseIR", __LINE__, text);
  }
  return emit_ptx(*module, arch);
}

std::string NvptxIdentity::key() const {
  return fmt::format("llvm {}; ptx {}; libdevice {}; nvJitLink {}", llvm_version, ptx_isa, libdevice_hash,
                     nvjitlink_version);
}

const NvptxIdentity& nvptx_identity() {
  static const NvptxIdentity identity = [] {
    NvptxIdentity id;
    id.llvm_version = LLVM_VERSION_STRING;
    id.ptx_isa = kNvptxPtxIsa;
    const Libdevice& device = libdevice();
    id.libdevice_path = device.path;
    id.libdevice_hash = device.bytes.empty()
                            ? "none"
                            : fmt::format("{:016x}", XXH3_64bits(device.bytes.data(), device.bytes.size()));
    id.nvjitlink_version = nvjitlink_version();
    return id;
  }();
  return identity;
}

}  // namespace gmjit::codegen
