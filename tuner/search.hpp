#pragma once
// Search logic that needs no device: the analytic cost model and the rule that picks a winner
// from measured trials. The strategies, which decide what to measure, are in tuner/strategies/.

#include <cstdint>
#include <optional>
#include <vector>

#include "gmjit/device.hpp"
#include "gmjit/tune.hpp"
#include "templates/registry.hpp"

namespace gmjit::tuner {

// Estimated milliseconds of one launch: the slower of moving the work's bytes at DRAM bandwidth
// and its flops at the FMA peak scaled by the loop's efficiency, divided by the fraction of the
// last wave's SM slots that do work and by a latency-hiding factor from resident warps.
double estimate_ms(const templates::KernelDescriptor& kernel, const Config& config, const Shape& shape,
                   const templates::DtypeInfo& dtype, const DeviceInfo& device);

struct Choice {
  std::optional<std::size_t> winner;
  std::optional<std::size_t> runner_up;
};

// The fastest ok trial wins, except that a trial whose median is within the measurement noise
// of the fastest (the larger of the two CI half-widths, at least `min_noise_percent` and at most
// `max_noise_percent`) is preferred when it is the incumbent, and otherwise the earliest such
// trial in `trials` order (domain order: the simpler configuration). The ceiling keeps a trial
// that could not be timed precisely from winning over a clearly faster one on its own
// uncertainty: a pingpong tile re-timed at 1.71 ms with an 18% spread won bf16 8192^3 over
// cooperative tiles timed at 1.46-1.52 ms (bench/NOTES.md, thirteenth session). Deterministic
// for the same measurements.
Choice choose(const std::vector<TrialReport>& trials, const std::optional<Config>& incumbent,
              double min_noise_percent = 0.5, double max_noise_percent = 3.0);

}  // namespace gmjit::tuner
