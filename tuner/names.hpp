#pragma once
// The names of an enum's values, from one table per enum that both to_string and the parser
// read, so the two cannot drift apart and a usage error lists exactly the names that parse
// (cutlass's profiler keeps its enum<->string tables the same way).

#include <fmt/format.h>

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "gmjit/error.hpp"

namespace gmjit::tuner {

// Error(usage): "unknown <what> '<name>' (<plural>: a, b, c)".
inline Error unknown_name(const char* what, const char* plural, const std::string& name,
                          const std::vector<std::string>& names) {
  return Error(ErrorKind::usage, 0, fmt::format("unknown {} '{}' ({}: {})", what, name, plural, fmt::join(names, ", ")));
}

template <typename Enum, std::size_t N>
struct EnumNames {
  const char* what;    // in errors: "unknown <what> 'x'"
  const char* plural;  // in errors, before the list of names
  std::pair<Enum, const char*> names[N];

  const char* name(Enum value) const {
    for (const auto& [entry, known] : names) {
      if (entry == value) return known;
    }
    return "unknown";
  }

  // Throws unknown_name() for a name that is not in the table.
  Enum parse(const std::string& name) const {
    std::vector<std::string> known;
    for (const auto& [entry, text] : names) {
      if (name == text) return entry;
      known.emplace_back(text);
    }
    throw unknown_name(what, plural, name, known);
  }
};

}  // namespace gmjit::tuner
