// The compile pool's two ways of compiling: in compile processes (gmjit-worker --compile), the
// default, and in its own threads. Both must make the same binary under the same key, and a
// failure or a missing worker must read the same to the tuner.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "codegen/compiler.hpp"
#include "gmjit/error.hpp"
#include "nvrtc/compile_support.hpp"
#include "templates/registry.hpp"
#include "tuner/compile_pool.hpp"

namespace gmjit {
namespace {

using testing::kArch;
using tuner::CompileIn;
using tuner::CompilePool;

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

tuner::CompiledPtr compile_in(CompileIn where, const codegen::GeneratedSource& source, CompileIn expected_way) {
  // Each pool must run its own compile, not find the other's module in memory.
  codegen::shared_compiler().forget_modules();
  CompilePool pool(kArch, 1, 1, where);
  auto module = pool.submit(source).get();
  EXPECT_EQ(pool.compiling_in(), expected_way);
  return module;
}

// A user's kernel: its header exists only in the process that registered it.
codegen::GeneratedSource user_source(const std::string& body) {
  templates::register_header("user/pool_probe.cuh",
                             "template <int Scale> __global__ void pool_probe(float* x) { x[threadIdx.x] *= Scale; }\n");
  codegen::GeneratedSource source;
  source.kernel = "pool_probe";
  source.dtype = "fp32";
  source.header = "user/pool_probe.cuh";
  source.name_expression = "pool_probe<3>";
  source.file_name = "pool_probe_3.cu";
  source.source = "#include \"user/pool_probe.cuh\"\n" + body;
  return source;
}

void expect_same_module(const codegen::CompiledModule& a, const codegen::CompiledModule& b) {
  EXPECT_EQ(a.compile_key, b.compile_key);
  EXPECT_EQ(a.lowered_name, b.lowered_name);
  EXPECT_EQ(a.arch, b.arch);
  EXPECT_EQ(a.options, b.options);
  EXPECT_TRUE(a.cubin == b.cubin) << "the two ways made different machine code";
  EXPECT_EQ(a.ptx, b.ptx);
  EXPECT_EQ(a.resources.registers, b.resources.registers);
  EXPECT_EQ(a.resources.shared_bytes, b.resources.shared_bytes);
  EXPECT_EQ(a.resources.spill_store_bytes, b.resources.spill_store_bytes);
  EXPECT_EQ(a.resources.spills_known, b.resources.spills_known);
  EXPECT_EQ(a.source.source, b.source.source);
}

TEST(CompilePool, AProcessAndAThreadMakeTheSameHopperGemm) {
  const auto& kernel = templates::find_kernel("gemm");
  const Shape shape{{"m", 256}, {"n", 256}, {"k", 256}, {"trans_b", 1}};
  std::optional<Config> hopper;
  for (const auto& config : templates::valid_configs(kernel, shape)) {
    if (config.at("wgmma") == 1 && config.at("consumers") == 2) {
      hopper = config;
      break;
    }
  }
  ASSERT_TRUE(hopper) << "no two-consumer wgmma configuration at 256^3";
  const auto source = codegen::specialize(kernel, shape, "bf16", *hopper);
  const auto in_process = compile_in(CompileIn::processes, source, CompileIn::processes);
  const auto in_thread = compile_in(CompileIn::threads, source, CompileIn::threads);
  ASSERT_FALSE(in_process->cubin.empty());
  expect_same_module(*in_process, *in_thread);
  EXPECT_EQ(in_process->compile_key, codegen::compile_key(source, kArch));
  EXPECT_GT(in_process->resources.registers, 0) << "ptxas's report came back with the cubin";
}

TEST(CompilePool, AProcessCompileIsKeptInMemoryLikeAThreadOne) {
  const auto& kernel = templates::find_kernel("vector_add");
  const auto source = codegen::specialize(kernel, {{"n", 4096}}, "fp32", kernel.default_config);
  const auto module = compile_in(CompileIn::processes, source, CompileIn::processes);
  const auto again = codegen::shared_compiler().compile(source, kArch);
  EXPECT_TRUE(again.memory_hit) << "the process's module was not kept, so the library would compile it again";
  EXPECT_EQ(again.module->cubin, module->cubin);
}

TEST(CompilePool, AUserHeaderTravelsToTheCompileProcess) {
  const auto source = user_source("");
  const auto in_process = compile_in(CompileIn::processes, source, CompileIn::processes);
  const auto in_thread = compile_in(CompileIn::threads, source, CompileIn::threads);
  expect_same_module(*in_process, *in_thread);
}

TEST(CompilePool, AFailedCompileInAProcessCarriesNvrtcsLog) {
  const auto source = user_source("this is not C++;\n");
  codegen::shared_compiler().forget_modules();
  CompilePool pool(kArch, 1, 1, CompileIn::processes);
  try {
    pool.submit(source).get();
    FAIL() << "a source that is not C++ compiled";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::compile) << e.what();
    EXPECT_NE(e.log().find("error"), std::string::npos) << e.log();
    EXPECT_FALSE(e.options().empty());
  }
  EXPECT_EQ(pool.compiling_in(), CompileIn::processes) << "a candidate's failure is not the process's";
  // The process that reported the failure compiles the next candidate.
  EXPECT_FALSE(pool.submit(user_source("")).get()->cubin.empty());
}

TEST(CompilePool, ASourceThatIsNotUtf8CompilesInThisProcess) {
  // A Latin-1 comment cannot cross the pipe as JSON text: the compile process gets U+FFFD, makes
  // a binary under another key, and the pool compiles the source itself instead.
  const auto source = user_source("// caf\xe9\n");
  const auto module = compile_in(CompileIn::processes, source, CompileIn::threads);
  EXPECT_EQ(module->compile_key, codegen::compile_key(source, kArch));
  EXPECT_FALSE(module->cubin.empty());
}

TEST(CompilePool, AWorkerThatIsNoCompileProcessLeavesTheCompilesToThreads) {
  const ScopedEnv worker("GMJIT_WORKER", "/bin/true");  // starts, answers nothing, exits
  const auto& kernel = templates::find_kernel("vector_add");
  const auto source = codegen::specialize(kernel, {{"n", 4096}}, "fp32", kernel.default_config);
  const auto module = compile_in(CompileIn::processes, source, CompileIn::threads);
  EXPECT_FALSE(module->cubin.empty());
}

TEST(CompilePool, TheEnvironmentCanAskForThreads) {
  {
    const ScopedEnv threads("GMJIT_COMPILE_IN_PROCESS", "1");
    EXPECT_EQ(tuner::default_compile_in(), CompileIn::threads);
  }
  const ScopedEnv processes("GMJIT_COMPILE_IN_PROCESS", "0");
  EXPECT_EQ(tuner::default_compile_in(), CompileIn::processes);
}

}  // namespace
}  // namespace gmjit
