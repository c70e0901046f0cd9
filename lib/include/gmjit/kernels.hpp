#pragma once
/// @file kernels.hpp
/// The kernel catalog: templates, their tuning parameters and problem keys.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "gmjit/types.hpp"

namespace gmjit {

struct ParamInfo {
  std::string name;
  std::vector<std::int64_t> values;  ///< the domain, in search order
  std::string doc;
};

/// One buffer argument of a kernel: what a caller allocates and passes to Runtime::launch, in
/// KernelInfo::tensors order. Workspaces are not tensors: the library owns them.
struct TensorInfo {
  std::string name;
  bool output = false;  ///< role: false for an input, true for an output
  std::string dtype;    ///< empty: the problem's dtype (histogram's counts are u32 whatever it is)
  /// Optional: a flag data key that, set to 1, makes the tensor `flag_dtype` instead of `dtype`
  /// (histogram's counts are i64 with `i64_counts=1`).
  std::string dtype_flag;
  std::string flag_dtype;
  /// The element count as JSON text of an expression over the problem keys, in the language of
  /// kernel manifests (README.md, "Bringing your own kernels"): `"n"`, `["*", "rows", "cols"]`,
  /// `256`. `gmtune list --json` prints it as JSON.
  std::string elements_expression;
  /// The element count at `shape`, normalized as validate() does. Throws Error(usage) for a shape
  /// validate() refuses.
  std::function<std::int64_t(const Shape& shape)> elements;
};

/// A problem key that is optional at launch, where it takes `default_value`; part of the problem
/// and of its cache key. Most are a property of the tuning data, not of any tensor (histogram's
/// `contention`); a flag among them may choose a tensor's dtype (TensorInfo::dtype_flag).
struct DataKeyInfo {
  std::string name;
  std::int64_t default_value = 0;
  std::string doc;
};

struct KernelInfo {
  std::string name;
  std::string summary;
  std::string header;         ///< the .cuh's include name, e.g. gmjit/sgemm.cuh
  std::string template_hash;  ///< hash of every header the template reaches
  std::vector<std::string> problem_keys;  ///< the tensors' sizes, each required
  std::vector<DataKeyInfo> data_keys;     ///< optional keys, with their defaults
  std::vector<TensorInfo> tensors;        ///< inputs, then outputs, in launch order
  std::vector<std::string> dtypes;
  std::vector<ParamInfo> params;
  Config default_config;
  std::string constraints;  ///< the rules between parameters, in words
  bool user = false;        ///< registered at run time (register_kernel), not built in
};

/// Every kernel: the built-ins, then those registered with register_kernel.
std::vector<KernelInfo> list_kernels();

/// list_kernels() as JSON text, `{"kernels": [...]}`, as `gmtune list --json` prints it.
std::string list_kernels_json();

/// One kernel's entry of list_kernels_json(). With a non-empty `shape` it also holds "problem"
/// (the dtype and shape validate() makes of them) and, for each tensor, "count" (its elements at
/// that shape) and "resolved_dtype": what a binding needs to allocate outputs and check sizes.
/// @throws Error(usage) for an unknown kernel, or a shape or dtype validate() refuses.
std::string describe_kernel_json(const std::string& kernel, const Shape& shape = {}, const std::string& dtype = {});

/// The normalized form of a problem, as every entry point (Runtime::launch, tune, sweep, compile,
/// shapes files, gmtune) takes it: `dtype` empty becomes the kernel's first dtype, data keys left
/// out take their defaults, and the result's label is empty. The normalized shape is what keys a
/// problem in the cache.
/// @throws Error(usage) naming the offending value: an unknown kernel or dtype, a missing problem
///   key, a key the kernel does not have, a size that is not positive.
Problem validate(const std::string& kernel, const Shape& shape, const std::string& dtype = {});

/// A reference computed on the host: each input tensor converted to double, in kernel argument
/// order, and the problem shape -> one vector per output tensor, in order.
using HostReference = std::function<std::vector<std::vector<double>>(const std::vector<std::vector<double>>& inputs,
                                                                     const Shape& shape)>;

/// Registers a kernel of your own: `cuh_source` is the .cuh text and `manifest_json` describes it
/// (format: README.md, "Bringing your own kernels"). The kernel then compiles, tunes, caches and
/// dumps exactly as a built-in does. Verification needs exactly one reference: the manifest's
/// "reference" (a CUDA kernel in the .cuh) or `host_reference`. Registering a name again replaces
/// that kernel; built-in names are refused.
/// @return the kernel's name
/// Throws Error(usage) naming the offending manifest field.
std::string register_kernel(const std::string& manifest_json, const std::string& cuh_source,
                            HostReference host_reference = {});

/// register_kernel with the manifest read from `manifest_path` and the .cuh its "header_file"
/// names (relative to the manifest's directory). Throws Error(usage), prefixed with the path,
/// when a file cannot be read or the manifest is invalid.
std::string register_kernel_file(const std::string& manifest_path);

}  // namespace gmjit
