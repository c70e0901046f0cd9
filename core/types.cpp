#include "gmjit/types.hpp"

#include <cerrno>
#include <cstdlib>

#include "gmjit/error.hpp"

namespace gmjit {

std::string format_assignments(const std::map<std::string, std::int64_t>& values) {
  std::string text;
  for (const auto& [key, value] : values) {
    if (!text.empty()) text += ',';
    text += key + '=' + std::to_string(value);
  }
  return text;
}

std::map<std::string, std::int64_t> parse_assignments(const std::string& text) {
  std::map<std::string, std::int64_t> values;
  if (text.empty()) return values;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = text.find(',', start);
    const std::string token = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const std::size_t eq = token.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == token.size()) {
      throw Error(ErrorKind::usage, 0, "malformed assignment '" + token + "' (expected key=value)");
    }
    const std::string key = token.substr(0, eq);
    const std::string value = token.substr(eq + 1);
    errno = 0;
    char* end = nullptr;
    const long long parsed = std::strtoll(value.c_str(), &end, 10);
    if (end == value.c_str() || *end != '\0' || errno == ERANGE) {
      throw Error(ErrorKind::usage, 0, "'" + token + "': value is not an integer");
    }
    if (!values.emplace(key, parsed).second) {
      throw Error(ErrorKind::usage, 0, "'" + token + "': key '" + key + "' given twice");
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return values;
}

}  // namespace gmjit
