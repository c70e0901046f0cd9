#include "core/module.hpp"

#include <fmt/format.h>

namespace gmjit::detail {

Kernel::Kernel(CUfunction function, std::string lowered_name)
    : function_(function), lowered_name_(std::move(lowered_name)) {}

const KernelAttributes& Kernel::attributes() const {
  std::call_once(attributes_->queried, [this] {
    const auto& api = driver();
    auto attribute = [&](CUfunction_attribute which) {
      int value = 0;
      GMJIT_CU(api.cuFuncGetAttribute(&value, which, function_));
      return value;
    };
    KernelAttributes& a = attributes_->values;
    a.registers = attribute(CU_FUNC_ATTRIBUTE_NUM_REGS);
    a.static_shared_bytes = attribute(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES);
    a.local_bytes = attribute(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES);
    a.const_bytes = attribute(CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES);
    a.max_threads_per_block = attribute(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
    a.binary_version = attribute(CU_FUNC_ATTRIBUTE_BINARY_VERSION);
  });
  return attributes_->values;
}

void Kernel::reserve_dynamic_shared(unsigned bytes) {
  if (bytes <= reserved_dynamic_shared_) return;
  const int static_shared_bytes = attributes().static_shared_bytes;
  const auto& api = driver();
  CUdevice device = 0;
  int optin = 0;
  GMJIT_CU(api.cuCtxGetDevice(&device));
  GMJIT_CU(api.cuDeviceGetAttribute(&optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, device));
  const long long total = static_cast<long long>(bytes) + static_shared_bytes;
  if (total > optin) {
    throw Error(ErrorKind::device_limit, 0,
                fmt::format("{}: {} bytes of shared memory per block ({} static + {} dynamic) exceed the "
                            "device's opt-in limit of {}",
                            lowered_name_, total, static_shared_bytes, bytes, optin));
  }
  // The 48 KB a block gets without opting in covers static and dynamic shared memory together.
  if (total > 48 * 1024) {
    GMJIT_CU(api.cuFuncSetAttribute(function_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                    static_cast<int>(bytes)));
  }
  reserved_dynamic_shared_ = bytes;
}

void Kernel::allow_cluster(std::uint64_t blocks) {
  // Eight blocks is the portable cluster size; Hopper runs 16 once the kernel opts in.
  constexpr std::uint64_t kPortableClusterBlocks = 8;
  if (blocks <= kPortableClusterBlocks || non_portable_cluster_allowed_) return;
  GMJIT_CU(driver().cuFuncSetAttribute(function_, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1));
  non_portable_cluster_allowed_ = true;
}

Module::Module(const std::vector<char>& image) : Module(static_cast<const void*>(image.data())) {}

Module::Module(const void* image) { GMJIT_CU(driver().cuModuleLoadData(&module_, image)); }

Module::~Module() {
  if (module_ != nullptr) driver().cuModuleUnload(module_);
}

Kernel Module::kernel(const std::string& lowered_name) const {
  CUfunction function = nullptr;
  const CUresult result = driver().cuModuleGetFunction(&function, module_, lowered_name.c_str());
  if (result != CUDA_SUCCESS) {
    throw Error(ErrorKind::driver, result, cu_error_string(result) + ": no kernel '" + lowered_name + "' in module",
                "cuModuleGetFunction", __FILE__, __LINE__);
  }
  return Kernel(function, lowered_name);
}

namespace {

// Every device since sm_20 caps a block at 1024 threads; what a kernel's registers or launch bounds
// allow below that is asked of the driver only when a launch fails, so a first launch does not
// pay for the query.
constexpr std::uint64_t kMaxThreadsPerBlock = 1024;

Error too_many_threads(const Kernel& kernel, std::uint64_t threads) {
  return Error(ErrorKind::device_limit, 0,
               fmt::format("{}: {} threads per block, the compiled kernel allows 1..{} (registers: {})",
                           kernel.lowered_name(), threads, kernel.attributes().max_threads_per_block,
                           kernel.attributes().registers));
}

}  // namespace

void prepare_launch(Kernel& kernel, const LaunchGeometry& geometry) {
  const auto threads = geometry.threads_per_block();
  if (threads == 0 || threads > kMaxThreadsPerBlock) throw too_many_threads(kernel, threads);
  if (geometry.grid[0] == 0 || geometry.grid[1] == 0 || geometry.grid[2] == 0) {
    throw Error(ErrorKind::launch, 0, kernel.lowered_name() + ": empty grid");
  }
  for (int a = 0; a < 3; ++a) {
    if (geometry.cluster[a] == 0 || geometry.grid[a] % geometry.cluster[a] != 0) {
      throw Error(ErrorKind::launch, 0,
                  fmt::format("{}: a grid of {}x{}x{} blocks is not a whole number of {}x{}x{} clusters",
                              kernel.lowered_name(), geometry.grid[0], geometry.grid[1], geometry.grid[2],
                              geometry.cluster[0], geometry.cluster[1], geometry.cluster[2]));
    }
  }
  kernel.reserve_dynamic_shared(geometry.dynamic_shared_bytes);
  kernel.allow_cluster(geometry.blocks_per_cluster());
}

void launch_prepared(const Kernel& kernel, const LaunchGeometry& geometry, void** args, CUstream stream) {
  CUlaunchConfig config{};
  config.gridDimX = geometry.grid[0];
  config.gridDimY = geometry.grid[1];
  config.gridDimZ = geometry.grid[2];
  config.blockDimX = geometry.block[0];
  config.blockDimY = geometry.block[1];
  config.blockDimZ = geometry.block[2];
  config.sharedMemBytes = geometry.dynamic_shared_bytes;
  config.hStream = stream;
  CUlaunchAttribute cluster{};
  if (geometry.blocks_per_cluster() > 1) {
    cluster.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    cluster.value.clusterDim.x = geometry.cluster[0];
    cluster.value.clusterDim.y = geometry.cluster[1];
    cluster.value.clusterDim.z = geometry.cluster[2];
    config.attrs = &cluster;
    config.numAttrs = 1;
  }
  const CUresult result = driver().cuLaunchKernelEx(&config, kernel.get(), args, nullptr);
  if (result != CUDA_SUCCESS) {
    const auto threads = geometry.threads_per_block();
    if (threads > static_cast<std::uint64_t>(kernel.attributes().max_threads_per_block)) {
      throw too_many_threads(kernel, threads);
    }
    throw Error(ErrorKind::launch, result, cu_error_string(result) + " launching " + kernel.lowered_name(),
                "cuLaunchKernelEx", __FILE__, __LINE__);
  }
}

void launch(Kernel& kernel, const LaunchGeometry& geometry, KernelArgs& args, CUstream stream) {
  prepare_launch(kernel, geometry);
  launch_prepared(kernel, geometry, args.pointers(), stream);
}

}  // namespace gmjit::detail
