#include "tuner/protocol.hpp"

#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "gmjit/error.hpp"

namespace gmjit::tuner {
namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void fail(const std::string& what) { throw Error(ErrorKind::launch, 0, "worker pipe: " + what); }

void write_all(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
    if (n < 0 && errno == ENOTSOCK) n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail(fmt::format("write failed: {}", std::strerror(errno)));
    }
    data += n;
    size -= static_cast<std::size_t>(n);
  }
}

void write_length(int fd, std::uint64_t length) {
  unsigned char bytes[8];
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<unsigned char>(length >> (8 * i));
  write_all(fd, reinterpret_cast<const char*>(bytes), 8);
}

// Reads exactly `size` bytes before `deadline` (none when unset). Returns closed on EOF before
// the first byte of a frame or anywhere inside it.
ReadResult read_all(int fd, char* data, std::size_t size, const std::optional<Clock::time_point>& deadline) {
  while (size > 0) {
    int wait_ms = -1;
    if (deadline) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - Clock::now()).count();
      if (left <= 0) return ReadResult::timed_out;
      wait_ms = static_cast<int>(std::min<long long>(left, 1 << 30));
    }
    pollfd pfd{fd, POLLIN, 0};
    const int ready = ::poll(&pfd, 1, wait_ms);
    if (ready < 0) {
      if (errno == EINTR) continue;
      fail(fmt::format("poll failed: {}", std::strerror(errno)));
    }
    if (ready == 0) return ReadResult::timed_out;
    const ssize_t n = ::read(fd, data, size);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      fail(fmt::format("read failed: {}", std::strerror(errno)));
    }
    if (n == 0) return ReadResult::closed;
    data += n;
    size -= static_cast<std::size_t>(n);
  }
  return ReadResult::frame;
}

ReadResult read_length(int fd, std::uint64_t& length, const std::optional<Clock::time_point>& deadline) {
  unsigned char bytes[8];
  const ReadResult result = read_all(fd, reinterpret_cast<char*>(bytes), 8, deadline);
  if (result != ReadResult::frame) return result;
  length = 0;
  for (int i = 0; i < 8; ++i) length |= std::uint64_t{bytes[i]} << (8 * i);
  if (length > kMaxFrameBytes) fail(fmt::format("frame of {} bytes is larger than any valid message", length));
  return result;
}

}  // namespace

void write_frame(int fd, const Frame& frame) {
  // Text that is not UTF-8 (a compiler log quoting a user's Latin-1 source) goes over as U+FFFD
  // rather than failing the frame; a source altered so compiles under another key, which the
  // compile pool notices and compiles in its own process instead.
  const std::string header = frame.header.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  write_length(fd, header.size());
  write_all(fd, header.data(), header.size());
  write_length(fd, frame.payload.size());
  write_all(fd, frame.payload.data(), frame.payload.size());
}

ReadResult read_frame(int fd, Frame& frame, double timeout_seconds) {
  std::optional<Clock::time_point> deadline;
  if (timeout_seconds >= 0) {
    deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_seconds));
  }
  std::uint64_t length = 0;
  if (ReadResult r = read_length(fd, length, deadline); r != ReadResult::frame) return r;
  std::string header(length, '\0');
  if (ReadResult r = read_all(fd, header.data(), header.size(), deadline); r != ReadResult::frame) return r;
  if (ReadResult r = read_length(fd, length, deadline); r != ReadResult::frame) return r;
  frame.payload.assign(length, '\0');
  if (ReadResult r = read_all(fd, frame.payload.data(), frame.payload.size(), deadline); r != ReadResult::frame) {
    return r;
  }
  try {
    frame.header = nlohmann::json::parse(header);
  } catch (const nlohmann::json::exception& e) {
    fail(fmt::format("malformed header ({})", e.what()));
  }
  return ReadResult::frame;
}

}  // namespace gmjit::tuner
