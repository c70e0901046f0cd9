#pragma once
/// @file log.hpp
/// Logging control. libgmjit logs to stderr through spdlog (logger "gmjit"), never to stdout.

#include <string>

namespace gmjit {

/// Sets the level: trace, debug, info, warn, error, critical or off. Overrides GMJIT_LOG_LEVEL.
/// Throws Error(usage) for an unknown level.
void set_log_level(const std::string& level);

}  // namespace gmjit
