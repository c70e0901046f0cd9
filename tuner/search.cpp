#include "tuner/search.hpp"

#include <algorithm>
#include <cmath>

namespace gmjit::tuner {
namespace {

// Per-SM limits of the compute capabilities the model knows; others get Hopper's.
struct SmLimits {
  int max_threads = 2048;
  int max_blocks = 32;
  int registers = 65536;
  int shared_bytes = 233472;
  double fma_lanes = 128;     // fp32 FMA per clock
  double clock_ghz = 1.7;
  double dram_gbps = 4000;    // whole device
  double l2_gbps = 8000;      // whole device, reads that hit
  // DRAM latency under load: bytes in flight of dram_gbps x this draw the whole bandwidth.
  double dram_latency_s = 1.5e-6;
  // Float atomics to distinct addresses, whole device. On the H200, split-K's partial sums (one
  // atomicAdd per element of C per slice) cost about 15 us per million: bf16 512x4096x4096 at
  // split 4 and fp16 2048^3 at split 2 (8.4 million each) took 0.12-0.13 ms more than their
  // tiles' flops (bench/NOTES.md, seventh session).
  double atomics_per_s = 6.5e10;
};

SmLimits limits_for(const DeviceInfo& device) {
  SmLimits l;
  if (device.cc_major == 8 && device.cc_minor == 0) {
    l.max_blocks = 32, l.shared_bytes = 167936, l.fma_lanes = 64, l.clock_ghz = 1.4, l.dram_gbps = 1900;
    l.l2_gbps = 4000;
  } else if (device.cc_major < 9) {
    l.max_threads = 1536, l.max_blocks = 16, l.shared_bytes = 102400, l.clock_ghz = 1.7, l.dram_gbps = 900;
    l.l2_gbps = 2000;
  }
  if (device.shared_optin_bytes > 0) l.shared_bytes = std::max(l.shared_bytes, device.shared_optin_bytes);
  return l;
}

}  // namespace

double estimate_ms(const templates::KernelDescriptor& kernel, const Config& config, const Shape& shape,
                   const templates::DtypeInfo& dtype, const DeviceInfo& device) {
  const SmLimits sm = limits_for(device);
  const LaunchGeometry g = kernel.geometry(config, shape, dtype);
  templates::Work work;
  if (kernel.work) {
    work = kernel.work(config, shape, dtype);
  } else {
    for (const auto& t : kernel.tensors(shape)) {
      work.bytes += static_cast<double>(t.elements) * templates::tensor_dtype(t, dtype).bytes;
    }
  }
  const double threads = static_cast<double>(g.threads_per_block());
  const int warps_per_block = static_cast<int>(std::ceil(threads / 32));
  int resident = std::min(sm.max_blocks, sm.max_threads / std::max(1, warps_per_block * 32));
  const std::int64_t shared = std::max<std::int64_t>(work.shared_bytes, g.dynamic_shared_bytes);
  if (shared > 0) resident = std::min<int>(resident, static_cast<int>(sm.shared_bytes / (shared + 1024)));
  const int regs_per_block = std::max(1, warps_per_block * 32 * std::min(255, ((work.registers + 7) / 8) * 8));
  resident = std::min(resident, sm.registers / regs_per_block);
  if (resident <= 0) return 1e9;  // does not fit on an SM at all

  const double blocks = static_cast<double>(g.grid[0]) * g.grid[1] * g.grid[2];
  const double slots = static_cast<double>(resident) * device.sm_count;
  const double waves = std::ceil(blocks / slots);
  const double wave_efficiency = blocks / (waves * slots);
  // Fewer than 16 resident warps per SM leave DRAM and FMA latency partly exposed.
  const double resident_warps = std::min(blocks / device.sm_count, static_cast<double>(resident)) * warps_per_block;
  const double hiding = std::min(1.0, std::max(0.05, resident_warps / std::max(1, work.latency_warps)));

  const double memory_s = work.bytes / (sm.dram_gbps * 1e9 * std::max(0.01, work.memory_efficiency));
  const double l2_s = work.l2_bytes / (sm.l2_gbps * 1e9);
  const double peak_flops = device.sm_count * sm.fma_lanes * 2 * sm.clock_ghz * 1e9;
  const double compute_s = work.flops / (peak_flops * std::max(0.01, work.compute_efficiency));
  // Atomics queue in L2 behind each other, not behind the loop: their time adds.
  const double atomics_s = work.atomics / sm.atomics_per_s;
  const double launch_s = 3e-6;
  const double parallel = std::max(0.01, wave_efficiency) * hiding;
  const double memory_share =
      work.bytes_in_flight > 0
          ? std::max(0.01, std::min(1.0, work.bytes_in_flight / (sm.dram_gbps * 1e9 * sm.dram_latency_s)))
          : parallel;
  const double throughput_s = std::max({memory_s / memory_share, l2_s / parallel, compute_s / parallel});
  return 1e3 * (launch_s + atomics_s + work.tail_s + std::max(work.serial_s, throughput_s));
}

Choice choose(const std::vector<TrialReport>& trials, const std::optional<Config>& incumbent,
              double min_noise_percent, double max_noise_percent) {
  Choice choice;
  std::optional<std::size_t> fastest;
  for (std::size_t i = 0; i < trials.size(); ++i) {
    if (trials[i].status != TrialStatus::ok) continue;
    if (!fastest || trials[i].median_ms < trials[*fastest].median_ms) fastest = i;
  }
  if (!fastest) return choice;
  const auto& best = trials[*fastest];
  auto within_noise = [&](const TrialReport& t) {
    const double noise =
        std::min(max_noise_percent, std::max({min_noise_percent, best.ci_percent, t.ci_percent})) / 100.0;
    return t.median_ms <= best.median_ms * (1.0 + noise);
  };
  std::optional<std::size_t> pick;
  for (std::size_t i = 0; i < trials.size(); ++i) {
    const auto& t = trials[i];
    if (t.status != TrialStatus::ok || !within_noise(t)) continue;
    if (incumbent && t.config == *incumbent) {
      pick = i;
      break;
    }
    if (!pick) pick = i;
  }
  choice.winner = pick;
  for (std::size_t i = 0; i < trials.size(); ++i) {
    if (i == *pick || trials[i].status != TrialStatus::ok || trials[i].config == trials[*pick].config) continue;
    if (!choice.runner_up || trials[i].median_ms < trials[*choice.runner_up].median_ms) choice.runner_up = i;
  }
  return choice;
}

}  // namespace gmjit::tuner
