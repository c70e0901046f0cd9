#include "gmjit/error.hpp"

#include <fmt/format.h>

#include <utility>

namespace gmjit {

const char* to_string(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::driver: return "driver";
    case ErrorKind::nvrtc: return "nvrtc";
    case ErrorKind::compile: return "compile";
    case ErrorKind::device_limit: return "device_limit";
    case ErrorKind::launch: return "launch";
    case ErrorKind::cache: return "cache";
    case ErrorKind::usage: return "usage";
    case ErrorKind::cache_miss: return "cache_miss";
  }
  return "unknown";
}

namespace {

std::string one_line(ErrorKind kind, int code, const std::string& message, const std::string& call,
                     const std::string& file, int line) {
  std::string text = fmt::format("{} error", to_string(kind));
  if (code != 0) text += fmt::format(" {}", code);
  text += ": " + message;
  if (!call.empty()) text += fmt::format(" [{}]", call);
  if (!file.empty()) text += fmt::format(" at {}:{}", file, line);
  return text;
}

}  // namespace

Error::Error(ErrorKind kind, int code, std::string message, std::string call, std::string file, int line,
             std::string log, std::vector<std::string> options)
    : std::runtime_error(one_line(kind, code, message, call, file, line)),
      kind_(kind),
      code_(code),
      message_(std::move(message)),
      call_(std::move(call)),
      file_(std::move(file)),
      line_(line),
      log_(std::move(log)),
      options_(std::move(options)) {}

}  // namespace gmjit
