#pragma once
// One generator for every result-code check: CUDA Driver, NVRTC, nvJitLink and SQLite each
// define a two-line macro on top of it where their types are visible.

#include <string>

#include "gmjit/error.hpp"

// Evaluates `expr` once; on a result other than `ok` throws gmjit::Error of `kind` carrying the
// numeric code, `describe(result)`, the call's text and file:line.
#define GMJIT_CHECK_GEN(kind, expr, ok, describe)                                                \
  do {                                                                                           \
    const auto gmjit_result_ = (expr);                                                           \
    if (gmjit_result_ != (ok)) {                                                                 \
      throw ::gmjit::Error((kind), static_cast<int>(gmjit_result_), (describe)(gmjit_result_), \
                           #expr, __FILE__, __LINE__);                                           \
    }                                                                                            \
  } while (0)
