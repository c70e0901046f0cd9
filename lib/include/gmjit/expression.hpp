#pragma once
/// @file expression.hpp
/// Kernels libgmjit writes itself: a fused pointwise or row-reduction kernel generated from an
/// expression such as `out = silu(a) * b` or `y = x * rsqrt(mean(x * x) + 1e-6) * w`, lowered to
/// LLVM IR and compiled through LLVM's NVPTX back end to PTX, then to a cubin by nvJitLink (no GPU
/// needed). The expression language is in README.md ("Expressions").

#include <cstdint>
#include <string>
#include <vector>

#include "gmjit/compile.hpp"
#include "gmjit/kernels.hpp"
#include "gmjit/types.hpp"

namespace gmjit {

struct ExpressionRequest {
  /// The text form: optional declarations (`w: bf16[cols]`), then `name = expr` outputs,
  /// separated by `;` or newlines.
  std::string expression;
  /// The dtype of inputs the text uses without declaring them: fp32, fp16 or bf16.
  std::string dtype = "fp32";
  /// rows and cols, both required: every tensor is [rows, cols] or, for a row input, [cols].
  Shape shape;
  Config config;     ///< parameters (expression_params()) not given take their defaults
  std::string arch;  ///< e.g. sm_90a; empty: the arch of device 0 (needs a GPU)
};

/// One tensor argument of a generated kernel, in argument order.
struct ExpressionTensor {
  std::string name;
  bool output = false;
  std::string dtype;         ///< fp32, fp16 or bf16
  bool row_vector = false;   ///< [cols], broadcast over the rows; otherwise [rows, cols]
  std::int64_t elements = 0; ///< at the request's shape
};

struct ExpressionCompileResult {
  std::string canonical;  ///< the expression as the compile key reads it (parse() gives it back)
  std::string arch;
  Shape shape;
  Config config;  ///< complete, defaults filled in
  /// Inputs, then outputs: the kernel takes their pointers in this order, then rows and cols (i64).
  std::vector<ExpressionTensor> tensors;
  std::string kernel_name;  ///< the .entry
  std::string llvm_ir;      ///< as generated, before libdevice is linked and O3 runs
  std::string ptx;
  std::vector<char> cubin;
  ResourceUsage resources;  ///< read from the cubin (spill sizes unknown: spills_known false)
  LaunchGeometry geometry;  ///< at the request's shape
  /// Covers the canonical expression, the parameters, the arch, the LLVM version, the PTX ISA,
  /// libdevice's hash and nvJitLink's version: the key the Runtime's binary cache files the same
  /// configuration of a registered expression under.
  std::string compile_key;
  double compile_ms = 0;
};

/// The parameters a generated kernel is tuned over, with their domains and defaults.
std::vector<ParamInfo> expression_params();

/// Registers `expression` as a kernel of the catalog, so that it is resolved, tuned, cached, swept
/// and launched by name like a template (Runtime::launch, gmjit::tune, `gmtune sweep`): problem
/// keys rows and cols, parameters expression_params(), tensors the inputs in the text's order
/// then the outputs (list_kernels() describes them), scalars rows and cols added by the launch.
/// Its reference is the expression evaluated in float64 on the host. `name` empty: "expr_" and 8
/// hex digits of the canonical text's hash. Registering a name again replaces that expression
/// (its problem keys change with the text, so no winner of the old one is served for it).
/// @return the kernel's name
/// @throws Error(usage) for text that does not parse or type-check, an unknown dtype, a name that
///   is not an identifier or belongs to a built-in or a manifest's kernel.
std::string register_expression(const std::string& name, const std::string& expression,
                                 const std::string& dtype = "fp32");

/// Parses, checks and compiles an expression for a problem.
/// @throws Error(usage) for text that does not parse or type-check (the message names the column),
///   a shape without rows and cols, an unknown parameter, a value outside its domain or one the
///   problem rules out (vector must divide cols); Error(compile) when LLVM or nvJitLink rejects
///   what was generated.
ExpressionCompileResult compile_expression(const ExpressionRequest& request);

/// Writes `result` into `directory` (created if missing) as `gmtune compile --expr --out` does:
/// the kernel's .ll, .ptx and .cubin, resources.json, and the .sass when a disassembler is
/// installed. Throws Error(usage) naming a file it cannot write.
CompileOutputs write_expression_outputs(const ExpressionCompileResult& result, const std::string& directory);

/// Identity, tensors, geometry and resources of a compile as a JSON object.
std::string expression_json(const ExpressionCompileResult& result);

}  // namespace gmjit
