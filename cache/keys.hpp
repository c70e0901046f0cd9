#pragma once
// The keys that decide what a cached winner is valid for (docs/ARCHITECTURE.md, Keys).

#include <string>

#include "gmjit/types.hpp"

namespace gmjit::cache {

// All built-in templates take dense row-major operands.
inline constexpr const char* kRowMajor = "row_major";

// Hash of kernel, template hash (every header byte it reaches), dtype, layout and shape.
std::string problem_key(const std::string& kernel, const std::string& template_hash, const std::string& dtype,
                        const std::string& layout, const Shape& shape);

}  // namespace gmjit::cache
