#pragma once
// The JIT pipeline's stages, one type each so each can be tested and cached alone:
// descriptor + problem + config -> GeneratedSource -> (NVRTC) -> CompiledModule.

#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gmjit/types.hpp"
#include "templates/registry.hpp"

namespace gmjit::codegen {

// A translation unit of a few lines: the template's include, plus the name expression NVRTC
// instantiates and lowers.
struct GeneratedSource {
  std::string kernel;
  std::string dtype;
  Shape shape;
  Config config;
  std::string header;
  std::string name_expression;
  std::string file_name;  // e.g. sgemm_bm128_bn128_....cu, for logs and dumps
  std::string source;
  // Non-empty for an expression kernel: its canonical text, lowered through LLVM (expr_lower)
  // rather than compiled by NVRTC; `source` then holds it with the configuration.
  std::string expression;
};

// `config` must be valid (templates::resolve_config / valid_configs).
GeneratedSource specialize(const templates::KernelDescriptor& kernel, const Shape& shape, const std::string& dtype,
                           const Config& config);
// The reference kernel of the same problem.
GeneratedSource specialize_reference(const templates::KernelDescriptor& kernel, const Shape& shape,
                                     const std::string& dtype);

struct CompiledModule {
  GeneratedSource source;
  std::string arch;
  std::vector<std::string> options;
  std::string compile_key;
  std::string lowered_name;
  std::string ptx;
  std::vector<char> cubin;
  std::string log;
  ResourceUsage resources;
  double compile_ms = 0;
};

// Identity and resource report of a compile as a JSON object: what `gmtune compile` writes to
// resources.json and the binary cache keeps beside each cubin, so a cached binary can be traced
// back to (and its compile key recomputed from) kernel, dtype, shape and config.
std::string resources_json(const CompiledModule& module);

// GMJIT_LINEINFO=1: compiles keep source line information (-lineinfo), for profilers that map
// SASS back to source. Off by default: ptxas then also embeds the whole PTX text in the cubin,
// which made sgemm's largest cubin 161 KiB instead of 43, and a module's load time follows its size.
bool line_info_requested();

// The option list every compile uses, in order; part of the compile key.
std::vector<std::string> canonical_options(const std::string& arch);

// Hash of what decides the machine code: generated source, name expression, the bytes of
// every project header the compile can reach, options, NVRTC version and build, arch and the
// key's own schema version.
std::string compile_key(const GeneratedSource& source, const std::string& arch);

// Throws Error(usage) unless `arch` is sm_XY (optionally with a suffix letter, sm_90a) for an XY
// this NVRTC compiles for; the message lists those.
void check_arch(const std::string& arch);

// Reads ptxas's -v report for one entry point out of an NVRTC log.
ResourceUsage parse_ptxas_report(const std::string& log, const std::string& lowered_name);

// Compiles with NVRTC; thread-safe. A repeated compile of the same key is served from memory
// (concurrent requests for one key compile once).
class Compiler {
 public:
  struct Result {
    std::shared_ptr<const CompiledModule> module;
    bool memory_hit = false;
  };
  // Throws Error(compile) with NVRTC's whole log and the options when compilation fails, and
  // Error(usage) for an arch NVRTC does not know (check_arch).
  Result compile(const GeneratedSource& source, const std::string& arch);
  // Keeps a module compiled elsewhere (a compile process) as if compiled here, so later compiles
  // of its key are served from memory; a key already kept is left as it is.
  void remember(std::shared_ptr<const CompiledModule> module);
  // The module kept for `key` once its compile has finished, else null; never waits.
  std::shared_ptr<const CompiledModule> remembered(const std::string& key) const;
  // Drops every module kept in memory, so the next compile of any key runs NVRTC again.
  void forget_modules();
  std::size_t module_count() const;

 private:
  mutable std::mutex mutex_;
  std::map<std::string, std::shared_future<std::shared_ptr<const CompiledModule>>> modules_;
};

// The process-wide compiler the library facade uses.
Compiler& shared_compiler();

}  // namespace gmjit::codegen
