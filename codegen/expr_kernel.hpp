#pragma once
/// @file expr_kernel.hpp
/// An expression program as a kernel of the catalog (issue 20): a KernelDescriptor whose problem
/// keys are rows and cols, whose parameters are the lowering's (block, items, vector,
/// threads_per_row), whose tensors are the program's inputs then outputs and whose reference is
/// expr::evaluate in float64. Registered like a user kernel, it takes every path a template takes
/// (Runtime's resolve and launch, the tuner's sessions and worker, sweeps, the binary cache);
/// codegen::specialize and Compiler::compile see KernelDescriptor::expression and lower through
/// LLVM (codegen/expr_lower.hpp) where a template goes through NVRTC.
#include <string>

#include "codegen/expr.hpp"
#include "codegen/expr_lower.hpp"
#include "templates/registry.hpp"

namespace gmjit::codegen::expr {

/// The tuned parameters with their domains, in search order.
const std::vector<templates::ParamDomain>& param_domains();
/// block=256, items=4, vector=1, threads_per_row=32.
const Config& default_config();
/// `config` (complete: every parameter of param_domains) as LowerParams.
LowerParams lower_params(const Config& config);

/// What decides the machine code beside the program and its parameters: the lowering's schema
/// and the LLVM identity (LLVM version, PTX ISA, libdevice hash, nvJitLink version), in one line.
std::string lowering_identity();

/// The name an expression kernel gets when the caller gives none: "expr_" and 8 hex digits of a
/// hash of the canonical text, so the same expression gets the same name in every process.
std::string default_kernel_name(const Program& program);

/// The descriptor of `program` named `name` (the same rules as a manifest's name). Its
/// `expression` is the canonical text; its header is a virtual one ("gmjit/expr/NAME.expr") whose
/// text is the canonical expression and lowering_identity(), so the template hash in every
/// problem key changes with either (specialize() writes both into each configuration's source,
/// which the compile key reads).
templates::KernelDescriptor describe(const std::string& name, const Program& program);

/// Parses `text` (inputs used without a declaration take `default_dtype`) and registers the kernel
/// as a user kernel, replacing an expression kernel of the same name; returns the catalog's
/// descriptor. Throws Error(usage) for text that does not parse, a name that is not one, or a name
/// a built-in or a manifest's kernel holds.
const templates::KernelDescriptor& register_kernel(const std::string& name, const std::string& text,
                                                   Dtype default_dtype = Dtype::f32);

/// What the compiler needs to lower one configuration: the program parsed back from the
/// canonical text a GeneratedSource carries.
LoweredKernel lower_canonical(const std::string& canonical, const Config& config, const std::string& arch);

}  // namespace gmjit::codegen::expr
