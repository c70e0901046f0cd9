#pragma once
// Reads what a kernel needs from the cubin itself (its ELF .nv.info attributes and sections), so
// the resource report does not depend on ptxas printing one.

#include <string>
#include <vector>

#include "gmjit/types.hpp"

namespace gmjit::codegen {

// Registers, stack frame and static shared memory of `lowered_name`. Spill sizes are not in the
// cubin: they stay 0 and `spills_known` is false. Throws Error(compile) for a malformed image or
// a kernel it does not contain.
ResourceUsage read_cubin_resources(const std::vector<char>& cubin, const std::string& lowered_name);

}  // namespace gmjit::codegen
