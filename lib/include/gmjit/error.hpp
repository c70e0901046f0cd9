#pragma once
/// @file error.hpp
/// The one exception type libgmjit throws.

#include <stdexcept>
#include <string>
#include <vector>

namespace gmjit {

/// What failed: which layer a gmjit::Error comes from.
enum class ErrorKind {
  driver,        ///< a CUDA Driver API call (or no driver at all)
  nvrtc,         ///< an NVRTC or nvJitLink call itself failed
  compile,       ///< a kernel failed to compile; log() holds the whole NVRTC log
  device_limit,  ///< a configuration exceeds what the device offers
  launch,        ///< a kernel launch or its execution failed
  cache,         ///< the SQLite cache
  usage,         ///< bad input from the caller (unknown kernel, malformed shape, ...)
  cache_miss,    ///< no tuned winner for a problem, and the Runtime's miss policy forbids any other
};

/// "driver", "nvrtc", ... as used in messages and in the cache.
const char* to_string(ErrorKind kind);

/// Every failure in libgmjit surfaces as this exception; nothing aborts the caller.
class Error : public std::runtime_error {
 public:
  /// @param code   the numeric result of the failing call (CUresult, nvrtcResult, SQLite code), 0 if none
  /// @param call   the failing call's source text, or a short description
  Error(ErrorKind kind, int code, std::string message, std::string call = {}, std::string file = {},
        int line = 0, std::string log = {}, std::vector<std::string> options = {});

  ErrorKind kind() const noexcept { return kind_; }
  int code() const noexcept { return code_; }
  /// The message alone, without kind, call or location.
  const std::string& message() const noexcept { return message_; }
  const std::string& call() const noexcept { return call_; }
  const std::string& file() const noexcept { return file_; }
  int line() const noexcept { return line_; }
  /// The complete compiler log (kind compile or nvrtc), otherwise empty.
  const std::string& log() const noexcept { return log_; }
  /// The compiler options of the failed compile, otherwise empty.
  const std::vector<std::string>& options() const noexcept { return options_; }

 private:
  ErrorKind kind_;
  int code_;
  std::string message_;
  std::string call_;
  std::string file_;
  int line_;
  std::string log_;
  std::vector<std::string> options_;
};

}  // namespace gmjit
