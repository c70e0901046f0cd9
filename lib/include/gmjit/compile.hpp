#pragma once
/// @file compile.hpp
/// Specialize a kernel template for a problem and a configuration and compile it with NVRTC.

#include <optional>
#include <string>
#include <vector>

#include "gmjit/types.hpp"

namespace gmjit {

struct CompileRequest {
  std::string kernel;
  std::string dtype;  ///< empty: the kernel's first dtype
  Shape shape;
  Config config;     ///< parameters not given take the template's defaults
  std::string arch;  ///< e.g. sm_90a; empty: the arch of device 0 (needs a GPU)
};

struct CompileResult {
  std::string kernel;
  std::string dtype;
  std::string arch;
  Shape shape;
  Config config;  ///< complete, defaults filled in
  std::string name_expression;
  std::string lowered_name;
  std::string file_name;
  std::string source;  ///< the generated translation unit
  std::string ptx;
  std::vector<char> cubin;
  std::string log;
  std::vector<std::string> options;
  ResourceUsage resources;
  std::string compile_key;
  std::string template_hash;
  double compile_ms = 0;
  bool memory_cache_hit = false;
  std::string description_json;  ///< identity and resources, as resources_json() returns
};

/// Throws Error(usage) for a bad request (unknown kernel, shape key, parameter, value outside
/// its domain, violated constraint) and Error(compile) with the log when NVRTC rejects it.
CompileResult compile(const CompileRequest& request);

/// Resource report and identity of a compile as a JSON object.
std::string resources_json(const CompileResult& result);

/// What write_compile_outputs wrote.
struct CompileOutputs {
  std::string stem;        ///< the directory and file stem every output shares (add .cu, .ptx, ...)
  bool sass = false;       ///< the .sass was written
  std::string sass_note;   ///< why not, when it was not (no nvdisasm or cuobjdump)
};

/// Writes `result` into `directory` (created if missing) as `gmtune compile --out` does: the
/// generated .cu, .ptx, .cubin, the NVRTC and ptxas .log, resources.json, and the .sass when a
/// disassembler is installed. Throws Error(usage) naming a file it cannot write.
CompileOutputs write_compile_outputs(const CompileResult& result, const std::string& directory);

/// SASS of a cubin through nvdisasm or cuobjdump; nullopt, with the reason in why_not, when
/// neither is installed.
std::optional<std::string> disassemble(const std::vector<char>& cubin, std::string& why_not);

}  // namespace gmjit
