#pragma once
/// @file kernels.hpp
/// The kernel catalog: templates, their tuning parameters and problem keys.

#include <cstdint>
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
  std::string header;         ///< the embedded .cuh, e.g. gmjit/sgemm.cuh
  std::string template_hash;  ///< hash of every header the template reaches
  std::vector<std::string> problem_keys;
  std::vector<std::string> dtypes;
  std::vector<ParamInfo> params;
  Config default_config;
  std::string constraints;  ///< the rules between parameters, in words
};

/// Every built-in kernel.
std::vector<KernelInfo> list_kernels();

}  // namespace gmjit
