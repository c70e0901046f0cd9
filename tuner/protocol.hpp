#pragma once
// The pipe protocol between a tuning process and its worker: a frame is a JSON header and an
// optional binary payload (a cubin, reference outputs), each preceded by its length as a
// little-endian u64. Both ends read with a deadline, so a silent peer is noticed, never waited on.

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace gmjit::tuner {

struct Frame {
  nlohmann::json header;
  std::vector<char> payload;
};

// Largest header or payload accepted: a corrupted length must not allocate the machine away.
inline constexpr std::uint64_t kMaxFrameBytes = std::uint64_t{1} << 32;

// Writes the whole frame; throws Error(launch) when the peer has gone (EPIPE) or the fd fails.
void write_frame(int fd, const Frame& frame);

enum class ReadResult { frame, closed, timed_out };

// Reads one frame. `timeout_seconds` < 0 waits forever. A peer that closes mid-frame reads as
// closed; a malformed length or header throws Error(launch).
ReadResult read_frame(int fd, Frame& frame, double timeout_seconds);

}  // namespace gmjit::tuner
