#pragma once
// Stage timing for the load path's breakdown (RuntimeStats::last_load): microseconds between
// successive laps of a steady clock.

#include <chrono>

namespace gmjit::detail {

class Laps {
 public:
  using Clock = std::chrono::steady_clock;

  // Microseconds since the previous lap, or since construction.
  double lap() {
    const auto now = Clock::now();
    const double us = std::chrono::duration<double, std::micro>(now - last_).count();
    last_ = now;
    return us;
  }
  // Microseconds since construction; does not lap.
  double total() const { return std::chrono::duration<double, std::micro>(Clock::now() - start_).count(); }

 private:
  Clock::time_point start_ = Clock::now();
  Clock::time_point last_ = start_;
};

}  // namespace gmjit::detail
