#pragma once
/// @file expr_lower.hpp
/// Lowers an expression program (codegen/expr.hpp) to one GPU kernel through LLVM 19's NVPTX back
/// end (issue 20): LLVM IR built with IRBuilder -> PTX (codegen/nvptx.hpp) -> cubin (nvJitLink,
/// codegen/jitlink.hpp). This header names no LLVM type.
///
/// Kernel ABI. The kernel's parameters are, in order: one global pointer per program input in
/// Program::inputs() order (declared but unused inputs included; a full input holds rows * cols
/// elements, a row input cols), one global pointer per output in Program::outputs() order (rows *
/// cols elements each), then `i64 rows, i64 cols`. Every tensor is row-major, contiguous and holds
/// its storage dtype: fp32 = float, fp16 = IEEE half, bf16 = bfloat16. Each pointer must be aligned
/// to vector * its element size (cudaMalloc's 256 bytes always are). An output may be the very
/// buffer of a full input of the same dtype (in place: each element is read before the same thread
/// writes it, and no other thread reads it after); any other overlap is undefined. The kernel
/// requires exactly the block of geometry() (it is compiled with .reqntid), and any grid works
/// (every loop strides over the grid); geometry() caps the grid at kMaxGrid.
///
/// Math is f32 whatever the storage dtype: f16/bf16 values are widened on load, rounded (to
/// nearest even) only at an explicit cast and at the store. Transcendentals come from libdevice;
/// only fadd/fsub/fmul carry a fast-math flag, `contract` (fused multiply-add). Two places trade an
/// ulp or two for speed: sigmoid (and silu) divide through div.full.f32, and a division by a
/// per-row or scalar value multiplies by its reciprocal, computed once per row (or kernel).
///
/// Pointwise programs (no reduction) walk the rows * cols elements in one flat grid-stride loop;
/// programs with reductions give each row to a group of threads_per_row threads (one warp, or the
/// whole block) and make passes() + 1 passes over it: pass p accumulates the reductions of
/// reduction_depth p, the last computes and stores the outputs.

#include <cstdint>
#include <string>
#include <vector>

#include "codegen/expr.hpp"
#include "gmjit/types.hpp"

namespace gmjit::codegen::expr {

/// The largest grid geometry() gives; the kernels stride over the rest.
inline constexpr unsigned kMaxGrid = 65535;
/// The largest `items` a kernel unrolls.
inline constexpr int kMaxItems = 16;

/// How a program is mapped onto threads: the tunable part of a lowered kernel.
struct LowerParams {
  int block = 256;  ///< threads per block: a multiple of 32 in [32, 1024]
  int items = 4;    ///< chunks of `vector` elements each thread handles per loop step, 1..kMaxItems
  int vector = 1;   ///< elements per load and store: 1, 2, 4, or 8 where every tensor is 16-bit (one 16-byte
                    ///< access); cols % vector == 0 when > 1
  /// Programs with reductions: the threads that share one row, 32 (a warp per row, combined with
  /// shuffles) or == block (a block per row: shuffles, then shared memory across the warps).
  /// Ignored by pointwise programs.
  int threads_per_row = 32;
};

/// Why `params` cannot lower `program` whatever the problem size, naming the rule; empty when
/// they can.
std::string violation(const Program& program, const LowerParams& params);
/// The same, and the rules the problem size adds (rows, cols >= 1, rows * cols < 2^62, cols a
/// multiple of vector when vector > 1); empty when the kernel computes this problem.
std::string violation(const Program& program, const LowerParams& params, std::int64_t rows, std::int64_t cols);

/// The launch of a kernel lowered with `params` for a [rows, cols] problem: block = params.block,
/// grid = the blocks that give every thread one loop step (pointwise: rows * cols / vector chunks
/// over block * items threads' chunks; reductions: rows over block / threads_per_row rows per
/// block), at most kMaxGrid, no dynamic shared memory. Throws Error(usage) with violation()'s text.
LaunchGeometry geometry(const Program& program, const LowerParams& params, std::int64_t rows, std::int64_t cols);

struct LoweredKernel {
  std::string name;  ///< the .entry name: "gmjit_expr_" + a hash of the program and the params
  LowerParams params;
  std::string arch;  ///< "sm_90a"
  std::string ir;    ///< the LLVM IR as built (before libdevice and O3), for dumps
  std::string ptx;
  std::vector<char> cubin;
  bool reduces = false;  ///< the row kernel (the program has reductions)
  int passes = 0;        ///< row passes: Program::passes() + 1 for the row kernel, else 1
  /// As geometry(); the problem size is not part of the kernel.
  LaunchGeometry geometry(const Program& program, std::int64_t rows, std::int64_t cols) const {
    return expr::geometry(program, params, rows, cols);
  }
};

/// Lowers `program` with `params` for `arch` ("sm_90a") to PTX and a cubin. Throws Error(usage)
/// with violation(program, params)'s text for params that cannot lower it, or for an arch LLVM
/// cannot target; Error(compile) when LLVM or nvJitLink rejects what was built (a bug here).
LoweredKernel lower(const Program& program, const LowerParams& params, const std::string& arch);

}  // namespace gmjit::codegen::expr
