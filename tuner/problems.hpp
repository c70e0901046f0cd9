#pragma once
// What the shapes-file reader and the sweep share about a problem.

#include <string>

#include "gmjit/tune.hpp"

namespace gmjit::tuner {

// Throws Error(usage) prefixed with `where` when the kernel, its dtype or the shape is unknown
// or malformed, so a long list names the entry at fault.
void check_problem(const Problem& problem, const std::string& where);

}  // namespace gmjit::tuner
