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

struct KernelInfo {
  std::string name;
  std::string summary;
  std::string header;         ///< the .cuh's include name, e.g. gmjit/sgemm.cuh
  std::string template_hash;  ///< hash of every header the template reaches
  std::vector<std::string> problem_keys;
  std::vector<std::string> dtypes;
  std::vector<ParamInfo> params;
  Config default_config;
  std::string constraints;  ///< the rules between parameters, in words
  bool user = false;        ///< registered at run time (register_kernel), not built in
};

/// Every kernel: the built-ins, then those registered with register_kernel.
std::vector<KernelInfo> list_kernels();

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
