#pragma once
// The CUDA Driver API, loaded with dlopen("libcuda.so.1") on first use so that every binary
// starts on a machine without an NVIDIA driver and can say so instead of failing to load.

#include <cuda.h>

#include <string>

#include "core/check.hpp"

namespace gmjit::detail {

// Entry points resolved through cuGetProcAddress for the CUDA version these headers declare,
// so each pointer has exactly the ABI its decltype names (cuMemAlloc is cuMemAlloc_v2, ...).
#define GMJIT_DRIVER_FUNCTIONS(X)                                                            \
  X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName) X(cuGetErrorString) X(cuDeviceGetCount) \
  X(cuDeviceGet) X(cuDeviceGetName) X(cuDeviceGetAttribute) X(cuDeviceTotalMem)             \
  X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent)               \
  X(cuCtxGetCurrent) X(cuCtxGetDevice) X(cuCtxSynchronize) X(cuStreamCreate) X(cuStreamDestroy)               \
  X(cuStreamSynchronize) X(cuMemAlloc) X(cuMemFree) X(cuMemGetInfo) X(cuMemcpyHtoD)          \
  X(cuMemcpyDtoH) X(cuMemcpyDtoDAsync) X(cuMemsetD8Async) X(cuMemsetD32Async)               \
  X(cuModuleLoadData) X(cuModuleUnload) X(cuModuleGetFunction) X(cuFuncGetAttribute)        \
  X(cuFuncSetAttribute) X(cuLaunchKernel) X(cuLaunchKernelEx) X(cuEventCreate) X(cuEventDestroy) \
  X(cuEventRecord) X(cuEventSynchronize) X(cuEventElapsedTime) X(cuTensorMapEncodeTiled)

struct DriverApi {
#define GMJIT_DRIVER_MEMBER(name) decltype(&::name) name = nullptr;
  GMJIT_DRIVER_FUNCTIONS(GMJIT_DRIVER_MEMBER)
#undef GMJIT_DRIVER_MEMBER
};

// The loaded and initialized driver. Throws Error(driver) saying why when libcuda.so.1 cannot
// be loaded, cuInit fails, or no device is present.
const DriverApi& driver();

// Never throws; empty when the driver is usable.
std::string driver_unavailable_reason();

// "CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered".
std::string cu_error_string(CUresult result);

}  // namespace gmjit::detail

#define GMJIT_CU(expr) \
  GMJIT_CHECK_GEN(::gmjit::ErrorKind::driver, expr, CUDA_SUCCESS, ::gmjit::detail::cu_error_string)
