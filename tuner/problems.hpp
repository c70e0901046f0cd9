#pragma once
// What the shapes-file reader and the sweep share about a problem.

#include <string>

#include "gmjit/tune.hpp"

namespace gmjit::tuner {

// Normalizes `problem` in place (templates::normalize_problem: the default dtype, data keys at
// their defaults); throws Error(usage) prefixed with `where` when the kernel, its dtype or the
// shape is unknown or malformed, so a long list names the entry at fault.
void normalize_problem(Problem& problem, const std::string& where);

}  // namespace gmjit::tuner
