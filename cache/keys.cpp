#include "cache/keys.hpp"

#include <fmt/format.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace gmjit::cache {

std::string problem_key(const std::string& kernel, const std::string& template_hash, const std::string& dtype,
                        const std::string& layout, const Shape& shape) {
  const std::string canonical =
      fmt::format("{}|{}|{}|{}|{}", kernel, template_hash, dtype, layout, format_assignments(shape));
  return fmt::format("{:016x}", XXH3_64bits(canonical.data(), canonical.size()));
}

}  // namespace gmjit::cache
