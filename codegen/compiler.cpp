#include "codegen/compiler.hpp"

#include <nlohmann/json.hpp>
#include <nvrtc.h>
#define XXH_INLINE_ALL
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <cctype>
#include <cstdlib>

#include "codegen/cubin.hpp"
#include "codegen/expr_kernel.hpp"
#include "codegen/toolkit.hpp"
#include "core/check.hpp"
#include "core/log.hpp"

#define GMJIT_NVRTC(expr) GMJIT_CHECK_GEN(::gmjit::ErrorKind::nvrtc, expr, NVRTC_SUCCESS, nvrtcGetErrorString)

namespace gmjit::codegen {
namespace {

// Bumped whenever what the key covers changes meaning, so old binaries stop matching.
constexpr const char* kCompileKeySchema = "gmjit-compile-key-1";

std::string file_name_for(const std::string& kernel, const std::string& dtype, const Config& config) {
  std::string name = kernel + "_" + dtype;
  for (const auto& [key, value] : config) name += fmt::format("_{}{}", key, value);
  return name + ".cu";
}

class Program {
 public:
  explicit Program(const GeneratedSource& source) : headers_(templates::all_headers()) {
    std::vector<const char*> names;
    std::vector<const char*> contents;
    for (const auto& [name, content] : headers_) {
      names.push_back(name.c_str());
      contents.push_back(content.c_str());
    }
    GMJIT_NVRTC(nvrtcCreateProgram(&program_, source.source.c_str(), source.file_name.c_str(),
                                   static_cast<int>(names.size()), contents.data(), names.data()));
  }
  ~Program() { nvrtcDestroyProgram(&program_); }
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;
  nvrtcProgram native() const { return program_; }

  std::string log() const {
    size_t size = 0;
    GMJIT_NVRTC(nvrtcGetProgramLogSize(program_, &size));
    std::string text(size, '\0');
    GMJIT_NVRTC(nvrtcGetProgramLog(program_, text.data()));
    while (!text.empty() && (text.back() == '\0' || text.back() == '\n')) text.pop_back();
    return text;
  }

 private:
  std::vector<std::pair<std::string, std::string>> headers_;
  nvrtcProgram program_ = nullptr;
};

std::shared_ptr<const CompiledModule> run_nvrtc(const GeneratedSource& source, const std::string& arch,
                                                std::string key) {
  const auto started = std::chrono::steady_clock::now();
  auto module = std::make_shared<CompiledModule>();
  module->source = source;
  module->arch = arch;
  module->options = canonical_options(arch);
  module->compile_key = std::move(key);

  Program program(source);
  GMJIT_NVRTC(nvrtcAddNameExpression(program.native(), source.name_expression.c_str()));
  std::vector<const char*> options;
  for (const auto& option : module->options) options.push_back(option.c_str());
  const nvrtcResult result = nvrtcCompileProgram(program.native(), static_cast<int>(options.size()), options.data());
  module->log = program.log();
  if (result != NVRTC_SUCCESS) {
    throw Error(ErrorKind::compile, result,
                fmt::format("{} failed to compile ({}): {}", source.name_expression, nvrtcGetErrorString(result),
                            module->log.substr(0, module->log.find('\n'))),
                "nvrtcCompileProgram", __FILE__, __LINE__, module->log, module->options);
  }
  const char* lowered = nullptr;
  GMJIT_NVRTC(nvrtcGetLoweredName(program.native(), source.name_expression.c_str(), &lowered));
  module->lowered_name = lowered;
  size_t size = 0;
  GMJIT_NVRTC(nvrtcGetPTXSize(program.native(), &size));
  module->ptx.resize(size);
  GMJIT_NVRTC(nvrtcGetPTX(program.native(), module->ptx.data()));
  while (!module->ptx.empty() && module->ptx.back() == '\0') module->ptx.pop_back();
  GMJIT_NVRTC(nvrtcGetCUBINSize(program.native(), &size));
  module->cubin.resize(size);
  GMJIT_NVRTC(nvrtcGetCUBIN(program.native(), module->cubin.data()));
  module->resources = parse_ptxas_report(module->log, module->lowered_name);
  if (module->resources.registers == 0) {
    // Seen on the GPU hosts while NVRTC served cubins from the driver's JIT cache (before
    // -no-cache): a hit carries no ptxas report, so the cubin's own attributes stand in.
    detail::logger().debug("no ptxas report for {} in the NVRTC log; reading the cubin", module->lowered_name);
    module->resources = read_cubin_resources(module->cubin, module->lowered_name);
  }
  module->compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  detail::logger().debug("compiled {} for {} in {:.1f} ms ({} registers, {} B spilled)", source.name_expression, arch,
                         module->compile_ms, module->resources.registers, module->resources.spill_store_bytes);
  return module;
}

// An expression kernel: the program parsed back from its canonical text, lowered to LLVM IR,
// PTX (NVPTX) and a cubin (nvJitLink). A failure here is Error(compile) like NVRTC's.
std::shared_ptr<const CompiledModule> run_llvm(const GeneratedSource& source, const std::string& arch, std::string key) {
  const auto started = std::chrono::steady_clock::now();
  auto module = std::make_shared<CompiledModule>();
  module->source = source;
  module->arch = arch;
  module->compile_key = std::move(key);
  expr::LoweredKernel lowered = expr::lower_canonical(source.expression, source.config, arch);
  module->lowered_name = lowered.name;
  module->ptx = std::move(lowered.ptx);
  module->cubin = std::move(lowered.cubin);
  module->resources = read_cubin_resources(module->cubin, module->lowered_name);
  module->compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  detail::logger().debug("lowered {} for {} in {:.1f} ms ({} registers)", source.name_expression, arch,
                         module->compile_ms, module->resources.registers);
  return module;
}

}  // namespace

GeneratedSource specialize(const templates::KernelDescriptor& kernel, const Shape& shape, const std::string& dtype,
                           const Config& config) {
  GeneratedSource out;
  out.kernel = kernel.name;
  out.dtype = dtype;
  out.shape = shape;
  out.config = config;
  out.header = kernel.header;
  out.name_expression = kernel.name_expression(config, shape, templates::dtype_info(dtype));
  out.file_name = file_name_for(kernel.name, dtype, config);
  if (!kernel.expression.empty()) {
    // The source is all the compile key reads of an expression kernel: the canonical expression,
    // the configuration (all the lowering sees) and the LLVM identity.
    out.expression = kernel.expression;
    out.file_name.replace(out.file_name.size() - 3, 3, ".expr");
    out.source = fmt::format("// gmjit expression config {{{}}}, {}\n{}\n", format_assignments(config),
                             expr::lowering_identity(), kernel.expression);
    return out;
  }
  // The problem shape stays out of the text: it reaches the code only through the name
  // expression's template arguments, so every shape that agrees on those shares one source, one
  // compile key and one cubin (an inference server meets a new sequence length per request).
  out.source = fmt::format(
      "// gmjit: {} {} config {{{}}}\n"
      "// instantiated through the NVRTC name expression: {}\n"
      "#include \"{}\"\n",
      kernel.name, dtype, format_assignments(config), out.name_expression, kernel.header);
  return out;
}

GeneratedSource specialize_reference(const templates::KernelDescriptor& kernel, const Shape& shape,
                                     const std::string& dtype) {
  if (!kernel.reference_expression) {
    throw Error(ErrorKind::usage, 0,
                fmt::format("{} has no reference kernel{}", kernel.name,
                            kernel.host_reference ? " (it is verified against a host reference)" : ""));
  }
  GeneratedSource out;
  out.kernel = kernel.name + ".reference";
  out.dtype = dtype;
  out.shape = shape;
  out.header = kernel.reference_header;
  out.name_expression = kernel.reference_expression(templates::dtype_info(dtype), shape);
  out.file_name = kernel.name + "_" + dtype + "_reference.cu";
  out.source = fmt::format("// gmjit: reference for {} {}\n#include \"{}\"\n", kernel.name, dtype, out.header);
  return out;
}

std::string resources_json(const CompiledModule& m) {
  const auto& nvrtc = nvrtc_identity();
  const auto& r = m.resources;
  const nlohmann::json j = {
      {"kernel", m.source.kernel},
      {"dtype", m.source.dtype},
      {"arch", m.arch},
      {"shape", m.source.shape},
      {"config", m.source.config},
      {"name_expression", m.source.name_expression},
      {"lowered_name", m.lowered_name},
      {"compile_key", m.compile_key},
      {"template_hash", templates::template_hash(m.source.header)},
      {"options", m.options},
      {"nvrtc", {{"version", fmt::format("{}.{}", nvrtc.major, nvrtc.minor)}, {"build_id", nvrtc.build_id}}},
      {"compile_ms", m.compile_ms},
      {"ptx_bytes", m.ptx.size()},
      {"cubin_bytes", m.cubin.size()},
      {"resources",
       {{"registers", r.registers},
        {"barriers", r.barriers},
        {"stack_bytes", r.stack_bytes},
        {"spill_store_bytes", r.spill_store_bytes},
        {"spill_load_bytes", r.spill_load_bytes},
        {"shared_bytes", r.shared_bytes},
        {"constant_bytes", r.constant_bytes},
        {"source", r.spills_known ? "ptxas report" : "cubin attributes (no ptxas report; spills unknown)"}}},
  };
  return j.dump(2);
}

bool line_info_requested() {
  static const bool requested = [] {
    const char* value = std::getenv("GMJIT_LINEINFO");
    return value != nullptr && std::string_view(value) == "1";
  }();
  return requested;
}

std::vector<std::string> canonical_options(const std::string& arch) {
  std::vector<std::string> options{"-arch=" + arch, "-std=c++17", "-Xptxas=-v", "-I" + cuda_include_dir()};
  if (line_info_requested()) options.insert(options.begin() + 2, "-lineinfo");
  // NVRTC (12.9 on; the build requires 13) keeps its PTX and cubin in the driver's JIT cache
  // (~/.nv/ComputeCache) wherever a driver is loaded: a hit skips ptxas and so prints no
  // -Xptxas=-v report, a tuning pushes thousands of candidates through the user's cache (256 MB
  // by default, shared with every CUDA application), and the binary cache already keeps what is
  // worth keeping.
  options.push_back("-no-cache");
  return options;
}

std::string compile_key(const GeneratedSource& source, const std::string& arch) {
  XXH3_state_t state;
  XXH3_128bits_reset(&state);
  auto feed = [&](const std::string& part) { XXH3_128bits_update(&state, part.c_str(), part.size() + 1); };
  feed(kCompileKeySchema);
  feed(source.source);
  // An expression's source holds everything its machine code depends on; the kernel's name (in
  // its name expression) does not, and its virtual header need not be registered
  // (compile_expression keys a kernel it does not register).
  if (source.expression.empty()) {
    feed(source.name_expression);
    const auto reached = templates::reachable(source.header);
    for (const auto& [name, text] : reached->headers) {
      feed(name);
      feed(*text);
    }
  }
  for (const auto& option : canonical_options(arch)) feed(option);
  const auto& nvrtc = nvrtc_identity();
  feed(fmt::format("nvrtc {}.{} {}", nvrtc.major, nvrtc.minor, nvrtc.build_id));
  feed(arch);
  const XXH128_hash_t hash = XXH3_128bits_digest(&state);
  return fmt::format("{:016x}{:016x}", hash.high64, hash.low64);
}

ResourceUsage parse_ptxas_report(const std::string& log, const std::string& lowered_name) {
  ResourceUsage usage;
  // ptxas prints a "Function properties for NAME" block, then "Used N registers" for it.
  const size_t at = log.find("Function properties for " + lowered_name);
  if (at == std::string::npos) return usage;
  const size_t next = log.find("Function properties for ", at + 1);
  const std::string block = log.substr(at, next == std::string::npos ? std::string::npos : next - at);
  // The number written just before `suffix`, as in "16 bytes spill stores".
  auto before = [&](const char* suffix, int& out) {
    const size_t end = block.find(suffix);
    if (end == std::string::npos || end < 2) return;
    size_t start = end - 1;  // the space before the suffix
    while (start > 0 && std::isdigit(static_cast<unsigned char>(block[start - 1]))) --start;
    if (start < end - 1) out = std::stoi(block.substr(start, end - 1 - start));
  };
  before("bytes stack frame", usage.stack_bytes);
  before("bytes spill stores", usage.spill_store_bytes);
  before("bytes spill loads", usage.spill_load_bytes);
  before("registers", usage.registers);
  before("barriers", usage.barriers);
  before("bytes smem", usage.shared_bytes);
  before("bytes cmem[0]", usage.constant_bytes);
  return usage;
}

void check_arch(const std::string& arch) {
  static const std::vector<int> supported = [] {
    int count = 0;
    GMJIT_NVRTC(nvrtcGetNumSupportedArchs(&count));
    std::vector<int> archs(static_cast<std::size_t>(count));
    if (count > 0) GMJIT_NVRTC(nvrtcGetSupportedArchs(archs.data()));
    return archs;
  }();
  std::size_t digits = 3;
  while (digits < arch.size() && std::isdigit(static_cast<unsigned char>(arch[digits]))) ++digits;
  const bool shaped = arch.rfind("sm_", 0) == 0 && digits > 3 && digits <= 6 &&
                      (digits == arch.size() || (digits + 1 == arch.size() && std::islower(static_cast<unsigned char>(arch[digits]))));
  if (shaped && std::find(supported.begin(), supported.end(), std::stoi(arch.substr(3, digits - 3))) != supported.end()) {
    return;
  }
  std::vector<std::string> names;
  for (const int sm : supported) names.push_back(fmt::format("sm_{}", sm));
  const auto& nvrtc = nvrtc_identity();
  throw Error(ErrorKind::usage, 0,
              fmt::format("unknown target '{}': NVRTC {}.{} compiles for {} (with a suffix such as sm_90a for "
                          "architecture-specific features)",
                          arch, nvrtc.major, nvrtc.minor, fmt::join(names, ", ")));
}

Compiler::Result Compiler::compile(const GeneratedSource& source, const std::string& arch) {
  check_arch(arch);
  const std::string key = compile_key(source, arch);
  std::promise<std::shared_ptr<const CompiledModule>> promise;
  std::shared_future<std::shared_ptr<const CompiledModule>> pending;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = modules_.find(key); it != modules_.end()) {
      pending = it->second;
    } else {
      modules_.emplace(key, promise.get_future().share());
    }
  }
  if (pending.valid()) return {pending.get(), true};
  try {
    auto module = source.expression.empty() ? run_nvrtc(source, arch, key) : run_llvm(source, arch, key);
    promise.set_value(module);
    return {std::move(module), false};
  } catch (...) {
    // Waiting callers get this error; later callers compile again rather than inherit it.
    {
      std::lock_guard<std::mutex> lock(mutex_);
      modules_.erase(key);
    }
    promise.set_exception(std::current_exception());
    throw;
  }
}

void Compiler::remember(std::shared_ptr<const CompiledModule> module) {
  std::promise<std::shared_ptr<const CompiledModule>> ready;
  const std::string key = module->compile_key;
  ready.set_value(std::move(module));
  std::lock_guard<std::mutex> lock(mutex_);
  modules_.emplace(key, ready.get_future().share());
}

std::shared_ptr<const CompiledModule> Compiler::remembered(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = modules_.find(key);
  if (it == modules_.end() || it->second.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return nullptr;
  try {
    return it->second.get();
  } catch (...) {
    return nullptr;  // a failed compile: the caller compiles again, as compile() would
  }
}

void Compiler::forget_modules() {
  std::lock_guard<std::mutex> lock(mutex_);
  modules_.clear();
}

std::size_t Compiler::module_count() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return modules_.size();
}

Compiler& shared_compiler() {
  static Compiler compiler;
  return compiler;
}

}  // namespace gmjit::codegen
