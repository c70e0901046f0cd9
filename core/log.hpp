#pragma once
// The library's logger, named "gmjit". It writes to stderr only: the library never writes to
// stdout, which belongs to the application (and to gmtune's tables and JSON).

#include <spdlog/spdlog.h>

namespace gmjit::detail {

/// Created on first use; its level comes from GMJIT_LOG_LEVEL (trace, debug, info, warn, error,
/// critical, off), default warn, unless gmjit::set_log_level() was called.
spdlog::logger& logger();

}  // namespace gmjit::detail
