#pragma once
/// @file gmjit.hpp
/// libgmjit: CUDA C++ kernel templates specialized at run time through NVRTC, autotuned on the
/// live GPU, with the winners kept in a SQLite cache. Include this one header.

#include "gmjit/cache.hpp"
#include "gmjit/compile.hpp"
#include "gmjit/device.hpp"
#include "gmjit/error.hpp"
#include "gmjit/expression.hpp"
#include "gmjit/kernels.hpp"
#include "gmjit/log.hpp"
#include "gmjit/runtime.hpp"
#include "gmjit/tune.hpp"
#include "gmjit/types.hpp"

namespace gmjit {

/// The library's version, "major.minor.patch".
const char* version();

}  // namespace gmjit
