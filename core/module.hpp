#pragma once
// Loaded code: a module from a cubin, a kernel in it by its lowered name, its attributes, and a
// typed launch on a stream.

#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "gmjit/types.hpp"
#include "core/driver.hpp"
#include "core/kernel_args.hpp"

namespace gmjit::detail {

struct KernelAttributes {
  int registers = 0;
  int static_shared_bytes = 0;
  int local_bytes = 0;
  int const_bytes = 0;
  int max_threads_per_block = 0;
  int binary_version = 0;  // the SASS target, e.g. 90
};

class Kernel {
 public:
  Kernel(CUfunction function, std::string lowered_name);

  CUfunction get() const { return function_; }
  const std::string& lowered_name() const { return lowered_name_; }
  // Queried on first use, not at load: a launch needs none of them (the block limit is checked
  // against 1024, and against the kernel's own only when a launch fails). On the H200 this did not
  // shrink a first sgemm load (230 -> 201-218 us; bench/NOTES.md), so the six queries were not
  // where the load's time goes.
  const KernelAttributes& attributes() const;

  // Kernels may use more than 48 KiB of dynamic shared memory only after opting in; throws
  // Error(device_limit) when static + dynamic exceeds what the device allows.
  void reserve_dynamic_shared(unsigned bytes);
  // Clusters of more than 8 blocks need the kernel's opt-in; the launch then says whether the
  // device runs them (Error(launch)).
  void allow_cluster(std::uint64_t blocks);

 private:
  CUfunction function_;
  std::string lowered_name_;
  struct LazyAttributes {
    std::once_flag queried;
    KernelAttributes values;
  };
  std::unique_ptr<LazyAttributes> attributes_ = std::make_unique<LazyAttributes>();
  unsigned reserved_dynamic_shared_ = 0;
  bool non_portable_cluster_allowed_ = false;
};

class Module {
 public:
  // `image` is a cubin (or PTX text, which the driver then compiles).
  explicit Module(const std::vector<char>& image);
  // An image the caller keeps alive until the constructor returns (a mapped file).
  explicit Module(const void* image);
  ~Module();
  Module(Module&& other) noexcept : module_(std::exchange(other.module_, nullptr)) {}
  Module& operator=(Module&&) = delete;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Throws Error(driver) naming the kernel when the module has no such function.
  Kernel kernel(const std::string& lowered_name) const;

 private:
  CUmodule module_ = nullptr;
};

// Checks the geometry against the kernel's limits (Error(device_limit)), then launches
// asynchronously; launch failures surface as Error(launch).
void launch(Kernel& kernel, const LaunchGeometry& geometry, KernelArgs& args, CUstream stream);

// launch() in two halves, for a caller that launches one geometry many times: the checks and the
// shared-memory and cluster opt-ins once, then cuLaunchKernelEx alone (with the cluster
// dimensions as its launch attribute). `args` points at each argument's bytes.
void prepare_launch(Kernel& kernel, const LaunchGeometry& geometry);
void launch_prepared(const Kernel& kernel, const LaunchGeometry& geometry, void** args, CUstream stream);

}  // namespace gmjit::detail
