#pragma once
// What the gpu tier's tests share: one binary cache for the whole run, compiles spread over every
// core, and the check of configurations against their reference. NVRTC, not the GPU, is where
// the tier's time went (thousands of configurations, compiled one after another), so a test that
// compiles several configurations hands them all to a compile pool first and loads each one
// through the binary cache as it verifies it.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cache/binaries.hpp"
#include "cache/store.hpp"
#include "codegen/compiler.hpp"
#include "core/device.hpp"
#include "gmjit/types.hpp"
#include "tuner/compile_pool.hpp"

namespace gmjit::gpu_test {

DeviceInfo device0();

// The run's binary cache. GMJIT_TEST_BINARY_CACHE names its file; unset, it is the file the build
// chose (tests/CMakeLists.txt), so the processes ctest starts one test at a time share their
// cubins, and a later run compiles only what changed: the compile key covers the generated
// source, every header it reaches, the options and NVRTC's build, so a cubin found by key is the
// one a compile would give.
cache::Store& binary_store();

// Compiles `sources` on every core through the process's compiler, except those the run's binary
// cache holds. load() of one of them then waits for its compile, if it is still running, rather
// than starting another; a compile error surfaces there, in the test that asked for it.
class CompileAhead {
 public:
  CompileAhead(const std::vector<codegen::GeneratedSource>& sources, const std::string& arch);

 private:
  tuner::CompilePool pool_;
};

// `source` loaded through the run's binary cache; needs a current context.
cache::LoadedBinary load(const codegen::GeneratedSource& source, const std::string& arch);

// Verifies every valid configuration of the problem with tuner::Harness (random inputs from
// `seed`, the reference, NaN-poisoned outputs and guard bytes past them), expecting some
// configuration, each error within the harness's tolerance and every one run; prints how many
// ran and returns that. `keep`, when set, narrows them to those it accepts.
// In a compile-only run (GMJIT_TEST_COMPILE_ONLY=sm_90a, say; no GPU needed) it compiles them for
// that arch into the run's binary cache instead and checks nothing: the tier's time on the GPU
// is NVRTC's, so a cache filled here lets a lent machine spend its minutes on the checks
// (bench/pack_device.sh carries one). A compile error still fails the test.
std::size_t verify_every_config(const std::string& name, const std::string& dtype, const Shape& shape,
                                std::uint64_t seed, const std::function<bool(const Config&)>& keep = {});
// The same, seeded by the shape's first dimension in key order, so each shape gets its own inputs.
std::size_t verify_every_config(const std::string& name, const std::string& dtype, const Shape& shape);

}  // namespace gmjit::gpu_test
