#pragma once
// What gemm's generated sources include: the mma.sync tiles (gemm.cuh, gemm_mma), the Hopper
// family (gemm_wgmma.cuh, gemm_wgmma: TMA, wgmma, warp-specialized, persistent; sm_90a) and the
// skinny-M path (gemm_skinny.cuh, gemm_skinny); the descriptor (templates/gemm.cpp) instantiates
// one of them per configuration (its `path` and, on path 0, its `wgmma`).
#include "gmjit/gemm.cuh"
#include "gmjit/gemm_skinny.cuh"
#include "gmjit/gemm_wgmma.cuh"

namespace gmjit {
// gemm's `path` parameter: which kernel family a configuration instantiates (path 0 splits in two
// by `wgmma`).
enum class GemmPath : int { kMma = 0, kSkinny = 1 };
}  // namespace gmjit
