#pragma once
// Every storage dtype (fp32, fp16, bf16, u8, u32, i64 below 2^53) widened to double, which holds each exactly:
// the reference kernels compute in double, and verification compares in double.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace gmjit {

__device__ inline double to_double(float x) { return static_cast<double>(x); }
__device__ inline double to_double(__half x) { return static_cast<double>(__half2float(x)); }
__device__ inline double to_double(__nv_bfloat16 x) { return static_cast<double>(__bfloat162float(x)); }
__device__ inline double to_double(unsigned char x) { return static_cast<double>(x); }
__device__ inline double to_double(unsigned int x) { return static_cast<double>(x); }
__device__ inline double to_double(long long x) { return static_cast<double>(x); }

}  // namespace gmjit
