// The cache's warm path: exact winner lookup, binary fetch by compile key, and lookup + fetch up
// to an unloaded module; with a GPU, also from opening the cache to the first launch of the tuned
// kernel. Medians over many calls, as a table. Not a test.
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>

#include "cache/store.hpp"
#include "codegen/compiler.hpp"
#include "gmjit/device.hpp"
#include "core/device.hpp"
#include "core/module.hpp"
#include "templates/registry.hpp"
#include "cache/binaries.hpp"
#include "cache/keys.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using namespace gmjit;

double micros(Clock::time_point from) { return std::chrono::duration<double, std::micro>(Clock::now() - from).count(); }

double median_us(int runs, const std::function<void()>& body) {
  std::vector<double> samples;
  for (int i = 0; i < runs; ++i) {
    const auto start = Clock::now();
    body();
    samples.push_back(micros(start));
  }
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

}  // namespace

int main() {
  char dir_template[] = "/tmp/gmjit-bench-cache-XXXXXX";
  const std::filesystem::path dir = mkdtemp(dir_template);
  const auto db = dir / "cache" / "gmjit.db";
  const auto status = driver_status();
  std::optional<detail::Context> context;
  DeviceInfo device;
  if (status.available) {
    context.emplace(0);
    device = detail::query_device(0);
  } else {
    device.name = "no device (build machine)";
    device.arch = "sm_90a";
  }

  // A cache as a sweep leaves it: many tuned problems, and the winner's cubin of the one we use.
  const auto& kernel = templates::find_kernel("sgemm");
  const std::string template_hash = templates::template_hash(kernel.header);
  const cache::DeviceRecord device_record{device.fingerprint(), device.name, device.arch, device.to_json()};
  const Config config{{"bm", 128}, {"bn", 128}, {"bk", 16}, {"tm", 8}, {"tn", 8}, {"vec", 1}, {"wm", 0}};
  const Shape target{{"m", 4096}, {"n", 4096}, {"k", 4096}};
  std::string target_key;
  {
    cache::Store store(db);
    for (int m = 16; m <= 16 * 1024; m *= 2) {
      for (int n = 256; n <= 32768; n *= 2) {
        const Shape shape{{"m", m}, {"n", n}, {"k", 4096}};
        const std::string key = cache::problem_key("sgemm", template_hash, "fp32", cache::kRowMajor, shape);
        cache::ProblemRecord problem{key, "sgemm", template_hash, "fp32", cache::kRowMajor, nlohmann::json(shape).dump()};
        std::vector<cache::TrialRecord> trials(8);
        for (std::size_t i = 0; i < trials.size(); ++i) {
          trials[i].config_json = nlohmann::json(config).dump();
          trials[i].status = "ok";
          trials[i].median_ms = 1.0 + static_cast<double>(i);
        }
        store.record_tuning(device_record, problem, trials, 0, "bench");
      }
    }
    target_key = cache::problem_key("sgemm", template_hash, "fp32", cache::kRowMajor, target);
    cache::ProblemRecord problem{target_key, "sgemm", template_hash, "fp32", cache::kRowMajor,
                                 nlohmann::json(target).dump()};
    std::vector<cache::TrialRecord> trials(1);
    trials[0].config_json = nlohmann::json(config).dump();
    trials[0].status = "ok";
    trials[0].median_ms = 2.9;
    store.record_tuning(device_record, problem, trials, 0, "bench");
    cache::store_binary(
        store,
        *codegen::shared_compiler().compile(codegen::specialize(kernel, target, "fp32", config), device.arch).module);
    codegen::shared_compiler().forget_modules();  // from here on nothing may come from NVRTC or memory
  }

  constexpr int kRuns = 2000;
  cache::Store store(db);
  std::string compile_key;
  std::size_t cubin_bytes = 0;
  // What a process on a warm cache does for a problem it has not launched yet.
  auto warm_path = [&]() -> std::vector<char> {
    const auto winner = store.find_winner(device_record.key, target_key);
    if (!winner) throw std::runtime_error("winner missing");
    const Config found = nlohmann::json::parse(winner->config_json).get<Config>();
    const auto source = codegen::specialize(kernel, target, "fp32", found);
    compile_key = codegen::compile_key(source, device.arch);
    auto binary = store.get_binary(compile_key);
    if (!binary) throw std::runtime_error("binary missing");
    cubin_bytes = binary->cubin.size();
    return std::move(binary->cubin);
  };
  warm_path();
  const double lookup = median_us(kRuns, [&] { store.find_winner(device_record.key, target_key); });
  const double fetch = median_us(kRuns, [&] { store.get_binary(compile_key); });
  const double warm = median_us(kRuns, [&] { warm_path(); });

  std::printf("cache warm path, %s, median of %d calls, cache holds %zu winners\n", device.name.c_str(), kRuns,
              store.winners().size());
  std::printf("%-58s %12s\n", "step", "us");
  std::printf("%-58s %12.1f\n", "exact winner lookup (device, problem)", lookup);
  std::printf("%-58s %12.1f\n", fmt::format("binary fetch by compile key ({:.0f} KiB cubin)", cubin_bytes / 1024.0).c_str(),
              fetch);
  std::printf("%-58s %12.1f\n", "lookup + compile key + fetch (up to an unloaded module)", warm);
  const double open = median_us(50, [&] { cache::Store reopened(db); });
  std::printf("%-58s %12.1f\n",
              fmt::format("open the cache ({:.0f} KiB file, unchanged since its last check)",
                          std::filesystem::file_size(db) / 1024.0).c_str(),
              open);

  if (status.available) {
    // From opening the cache to the tuned kernel's first launch having completed.
    std::vector<double> first_launch;
    detail::Stream stream;
    detail::DeviceBuffer a(4096ull * 4096 * 4), b(4096ull * 4096 * 4), c(4096ull * 4096 * 4);
    for (int i = 0; i < 20; ++i) {
      const auto start = Clock::now();
      cache::Store fresh(db);
      const auto winner = fresh.find_winner(device_record.key, target_key);
      const Config found = nlohmann::json::parse(winner->config_json).get<Config>();
      const auto source = codegen::specialize(kernel, target, "fp32", found);
      auto loaded = cache::load_through_cache(fresh, source, device.arch);
      if (!loaded.from_cache) throw std::runtime_error("the warm path compiled");
      detail::KernelArgs args;
      args.add(a.get()).add(b.get()).add(c.get()).add(4096).add(4096).add(4096);
      const double to_launch = micros(start);
      detail::launch(*loaded.kernel, kernel.geometry(found, target, templates::dtype_info("fp32")), args, stream.get());
      first_launch.push_back(to_launch);
      stream.synchronize();
    }
    const double first = first_launch.front();
    std::sort(first_launch.begin(), first_launch.end());
    std::printf("%-58s %12.1f\n", "open cache, lookup, fetch, load, launch: first in process", first);
    std::printf("%-58s %12.1f\n", "open cache, lookup, fetch, load, launch: median of 20",
                first_launch[first_launch.size() / 2]);
  } else {
    std::printf("first launch not measured: %s\n", status.reason.c_str());
  }
  std::filesystem::remove_all(dir);
  return 0;
}
