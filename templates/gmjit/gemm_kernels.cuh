#pragma once
// What gemm's generated sources include: the tensor-core tiles (gemm.cuh, gemm_mma) and the
// skinny-M path (gemm_skinny.cuh, gemm_skinny); the descriptor (templates/gemm.cpp) instantiates
// one of them per configuration (its `path`).
#include "gmjit/gemm.cuh"
#include "gmjit/gemm_skinny.cuh"

namespace gmjit {
// gemm's `path` parameter: which of the two kernels a configuration instantiates.
enum class GemmPath : int { kMma = 0, kSkinny = 1 };
}  // namespace gmjit
