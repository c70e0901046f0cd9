#pragma once
// Compiles in a gmjit-worker started with --compile. NVRTC compiles side by side far better in
// processes than in threads of one process: on the H100 machine 16 threads compiled 16 Hopper
// gemms 3.8x faster than one, 16 processes 9.4x (bench_compile, bench/NOTES.md, twenty-seventh
// session), the threads' time growing in NVRTC's front end and optimizer while ptxas's stayed
// flat. A compile process that crashes also takes down only its candidate, not the tuning.

#include <memory>
#include <string>

#include "codegen/compiler.hpp"
#include "tuner/protocol.hpp"

namespace gmjit::tuner {

// The worker's argument that makes it a compile process (no device, no CUDA context).
inline constexpr const char* kCompileWorkerFlag = "--compile";

Frame compile_request(const codegen::GeneratedSource& source, const std::string& arch);

// The worker's side: compiles the request with a compiler of its own (nothing kept between
// requests) and answers with the module, its cubin as the payload, or with the Error it threw.
Frame answer_compile_request(const Frame& request);

// The module of `source` from an answer; throws the Error the compile process reported, with its
// log and options.
std::shared_ptr<const codegen::CompiledModule> module_from_answer(Frame answer, const codegen::GeneratedSource& source);

}  // namespace gmjit::tuner
