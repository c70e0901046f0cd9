#include "core/log.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>
#include <mutex>

#include "gmjit/error.hpp"
#include "gmjit/log.hpp"

namespace gmjit {
namespace {

spdlog::level::level_enum parse_level(const std::string& text) {
  const auto level = spdlog::level::from_str(text);
  // from_str answers "off" for anything it does not know, so only a literal "off" means off.
  if (level == spdlog::level::off && text != "off") {
    throw Error(ErrorKind::usage, 0,
                "unknown log level '" + text + "' (trace, debug, info, warn, error, critical, off)");
  }
  return level;
}

}  // namespace

namespace detail {

spdlog::logger& logger() {
  static std::shared_ptr<spdlog::logger> instance = [] {
    auto created = std::make_shared<spdlog::logger>(
        "gmjit", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
    created->set_pattern("[%H:%M:%S.%e] [gmjit] [%l] %v");
    created->set_level(spdlog::level::warn);
    if (const char* env = std::getenv("GMJIT_LOG_LEVEL"); env != nullptr && *env != '\0') {
      try {
        created->set_level(parse_level(env));
      } catch (const Error& e) {
        created->warn("GMJIT_LOG_LEVEL ignored: {}", e.message());
      }
    }
    return created;
  }();
  return *instance;
}

}  // namespace detail

void set_log_level(const std::string& level) { detail::logger().set_level(parse_level(level)); }

}  // namespace gmjit
