#include "codegen/jitlink.hpp"

#include <nvJitLink.h>

#include <fmt/format.h>

#include "core/check.hpp"
#include "gmjit/error.hpp"

namespace gmjit::codegen {
namespace {

// nvJitLink has no nvJitLinkGetErrorString; the names of nvJitLink.h's enum (CUDA 13.0).
const char* describe(nvJitLinkResult result) {
  switch (result) {
    case NVJITLINK_SUCCESS: return "NVJITLINK_SUCCESS";
    case NVJITLINK_ERROR_UNRECOGNIZED_OPTION: return "NVJITLINK_ERROR_UNRECOGNIZED_OPTION";
    case NVJITLINK_ERROR_MISSING_ARCH: return "NVJITLINK_ERROR_MISSING_ARCH";
    case NVJITLINK_ERROR_INVALID_INPUT: return "NVJITLINK_ERROR_INVALID_INPUT";
    case NVJITLINK_ERROR_PTX_COMPILE: return "NVJITLINK_ERROR_PTX_COMPILE";
    case NVJITLINK_ERROR_NVVM_COMPILE: return "NVJITLINK_ERROR_NVVM_COMPILE";
    case NVJITLINK_ERROR_INTERNAL: return "NVJITLINK_ERROR_INTERNAL";
    case NVJITLINK_ERROR_THREADPOOL: return "NVJITLINK_ERROR_THREADPOOL";
    case NVJITLINK_ERROR_UNRECOGNIZED_INPUT: return "NVJITLINK_ERROR_UNRECOGNIZED_INPUT";
    case NVJITLINK_ERROR_FINALIZE: return "NVJITLINK_ERROR_FINALIZE";
    case NVJITLINK_ERROR_NULL_INPUT: return "NVJITLINK_ERROR_NULL_INPUT";
    case NVJITLINK_ERROR_INCOMPATIBLE_OPTIONS: return "NVJITLINK_ERROR_INCOMPATIBLE_OPTIONS";
    case NVJITLINK_ERROR_INCORRECT_INPUT_TYPE: return "NVJITLINK_ERROR_INCORRECT_INPUT_TYPE";
    case NVJITLINK_ERROR_ARCH_MISMATCH: return "NVJITLINK_ERROR_ARCH_MISMATCH";
    case NVJITLINK_ERROR_OUTDATED_LIBRARY: return "NVJITLINK_ERROR_OUTDATED_LIBRARY";
    case NVJITLINK_ERROR_MISSING_FATBIN: return "NVJITLINK_ERROR_MISSING_FATBIN";
    case NVJITLINK_ERROR_UNRECOGNIZED_ARCH: return "NVJITLINK_ERROR_UNRECOGNIZED_ARCH";
    case NVJITLINK_ERROR_UNSUPPORTED_ARCH: return "NVJITLINK_ERROR_UNSUPPORTED_ARCH";
    case NVJITLINK_ERROR_LTO_NOT_ENABLED: return "NVJITLINK_ERROR_LTO_NOT_ENABLED";
  }
  return "unknown nvJitLinkResult";
}

#define GMJIT_NVJITLINK(expr) GMJIT_CHECK_GEN(::gmjit::ErrorKind::nvrtc, expr, NVJITLINK_SUCCESS, describe)

class Linker {
 public:
  explicit Linker(const std::vector<std::string>& options) {
    std::vector<const char*> pointers;
    for (const auto& option : options) pointers.push_back(option.c_str());
    GMJIT_NVJITLINK(nvJitLinkCreate(&handle_, static_cast<uint32_t>(pointers.size()), pointers.data()));
  }
  ~Linker() {
    if (handle_ != nullptr) nvJitLinkDestroy(&handle_);
  }
  Linker(const Linker&) = delete;
  Linker& operator=(const Linker&) = delete;

  nvJitLinkHandle native() const { return handle_; }

  std::string error_log() const {
    size_t size = 0;
    GMJIT_NVJITLINK(nvJitLinkGetErrorLogSize(handle_, &size));
    return read_log(size, [this](char* text) { return nvJitLinkGetErrorLog(handle_, text); });
  }
  std::string info_log() const {
    size_t size = 0;
    GMJIT_NVJITLINK(nvJitLinkGetInfoLogSize(handle_, &size));
    return read_log(size, [this](char* text) { return nvJitLinkGetInfoLog(handle_, text); });
  }

 private:
  template <typename Get>
  static std::string read_log(size_t size, Get get) {
    std::string text(size, '\0');
    if (size > 0) GMJIT_NVJITLINK(get(text.data()));
    while (!text.empty() && (text.back() == '\0' || text.back() == '\n')) text.pop_back();
    return text;
  }

  nvJitLinkHandle handle_ = nullptr;
};

// The input's fault, not nvJitLink's: Error(compile) with the whole error log.
[[noreturn]] void link_failed(const Linker& linker, nvJitLinkResult result, const char* call,
                              const std::vector<std::string>& options, int line) {
  std::string log;
  try {
    log = linker.error_log();
  } catch (const Error& e) {
    log = "(no error log: " + e.message() + ")";
  }
  std::string head = log.substr(0, log.find('\n'));
  throw Error(ErrorKind::compile, result,
              fmt::format("nvJitLink failed to build a cubin for {} ({}): {}", options.front(), describe(result),
                          head.empty() ? "no error log" : head),
              call, __FILE__, line, log, options);
}

}  // namespace

LinkedCubin link_ptx(const std::string& ptx, const std::string& arch, const std::vector<std::string>& extra_options) {
  LinkedCubin linked;
  linked.options.push_back("-arch=" + arch);
  linked.options.insert(linked.options.end(), extra_options.begin(), extra_options.end());
  Linker linker(linked.options);
  // The terminating NUL is part of the PTX input, as nvrtcGetPTXSize counts it.
  nvJitLinkResult result = nvJitLinkAddData(linker.native(), NVJITLINK_INPUT_PTX, ptx.c_str(), ptx.size() + 1,
                                            "gmjit.ptx");
  if (result != NVJITLINK_SUCCESS) link_failed(linker, result, "nvJitLinkAddData", linked.options, __LINE__);
  result = nvJitLinkComplete(linker.native());
  if (result != NVJITLINK_SUCCESS) link_failed(linker, result, "nvJitLinkComplete", linked.options, __LINE__);
  size_t size = 0;
  GMJIT_NVJITLINK(nvJitLinkGetLinkedCubinSize(linker.native(), &size));
  linked.cubin.resize(size);
  GMJIT_NVJITLINK(nvJitLinkGetLinkedCubin(linker.native(), linked.cubin.data()));
  linked.info_log = linker.info_log();
  return linked;
}

const std::string& nvjitlink_version() {
  static const std::string version = [] {
    unsigned major = 0;
    unsigned minor = 0;
    GMJIT_NVJITLINK(nvJitLinkVersion(&major, &minor));
    return fmt::format("{}.{}", major, minor);
  }();
  return version;
}

}  // namespace gmjit::codegen
