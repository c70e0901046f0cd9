// Sweeps over several devices, the parts that need no worker: the shared queue, the --devices
// list, the per-device progress lines and the CLI's usage errors.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "cli_runner.hpp"
#include "gmjit/tune.hpp"
#include "tools/gmtune_format.hpp"
#include "tuner/sweep_queue.hpp"
#include "unit/cache_test_support.hpp"

namespace gmjit {
namespace {

using cache_test::capture_error;
using testing::line_count;
using testing::run_gmtune;

std::vector<std::size_t> range(std::size_t count) {
  std::vector<std::size_t> all(count);
  for (std::size_t i = 0; i < count; ++i) all[i] = i;
  return all;
}

TEST(SweepQueue, HandsEveryProblemToExactlyOneDeviceOfItsGroup) {
  tuner::SweepQueue queue;
  queue.add_group("fingerprint-a", range(500));
  queue.add_group("fingerprint-b", range(300));
  EXPECT_EQ(queue.remaining(), 800u);
  // Four devices of fingerprint a and two of b take as fast as they can.
  std::vector<std::vector<std::size_t>> taken(6);
  std::vector<std::thread> devices;
  for (std::size_t d = 0; d < taken.size(); ++d) {
    devices.emplace_back([&, d] {
      const std::string group = d < 4 ? "fingerprint-a" : "fingerprint-b";
      while (const auto problem = queue.take(group)) taken[d].push_back(*problem);
    });
  }
  for (auto& device : devices) device.join();
  std::map<std::size_t, int> a, b;
  for (std::size_t d = 0; d < taken.size(); ++d) {
    for (std::size_t problem : taken[d]) ++(d < 4 ? a : b)[problem];
    // Each device's share stays in list order: the queue is first in, first out.
    EXPECT_TRUE(std::is_sorted(taken[d].begin(), taken[d].end())) << "device " << d;
  }
  EXPECT_EQ(a.size(), 500u);
  EXPECT_EQ(b.size(), 300u);
  for (const auto& [problem, times] : a) EXPECT_EQ(times, 1) << problem;
  for (const auto& [problem, times] : b) EXPECT_EQ(times, 1) << problem;
  EXPECT_EQ(queue.remaining(), 0u);
  EXPECT_FALSE(queue.take("fingerprint-a").has_value());
  EXPECT_FALSE(queue.take("no such group").has_value());
}

TEST(SweepQueue, AFastDeviceTakesMoreThanASlowOne) {
  tuner::SweepQueue queue;
  queue.add_group("g", range(40));
  std::atomic<std::size_t> slow_count{0}, fast_count{0};
  std::thread slow([&] {
    while (queue.take("g")) {
      ++slow_count;
      std::this_thread::sleep_for(std::chrono::milliseconds(40));
    }
  });
  std::thread fast([&] {
    while (queue.take("g")) {
      ++fast_count;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  slow.join();
  fast.join();
  EXPECT_EQ(slow_count + fast_count, 40u);
  EXPECT_GT(fast_count.load(), 2 * slow_count.load()) << "a static split would give each 20";
}

TEST(SweepQueue, StopEndsTheHandOut) {
  tuner::SweepQueue queue;
  queue.add_group("g", range(10));
  ASSERT_EQ(queue.take("g"), std::optional<std::size_t>(0));
  queue.stop();
  EXPECT_FALSE(queue.take("g").has_value());
  EXPECT_EQ(queue.remaining(), 9u) << "what was not handed out is left for the resumed sweep";
}

TEST(ParseDevices, OrdinalsInTheGivenOrder) {
  EXPECT_EQ(parse_devices("0"), std::vector<int>{0});
  EXPECT_EQ(parse_devices("3,0,1"), (std::vector<int>{3, 0, 1}));
  EXPECT_EQ(parse_devices("0,1,2,3,4,5,6,7").size(), 8u);
}

TEST(ParseDevices, MalformedListsAreUsageErrorsNamingTheList) {
  for (const char* text : {"", "x", "0,", ",0", "0,,1", "-1", "1.5", "1, 2", "al", "+1"}) {
    SCOPED_TRACE(text);
    const Error e = capture_error([&] { parse_devices(text); });
    EXPECT_EQ(e.kind(), ErrorKind::usage);
    EXPECT_NE(e.message().find(std::string("'") + text + "'"), std::string::npos) << e.message();
  }
}

// Two workers on one GPU exercise the whole multi-device machinery where only one GPU exists.
TEST(ParseDevices, ARepeatedOrdinalIsKept) { EXPECT_EQ(parse_devices("0,0"), (std::vector<int>{0, 0})); }

TEST(ParseDevices, AllOnTheSimulatedDeviceCountsItsNames) {
  ::unsetenv("GMJIT_SIMULATED_DEVICES");
  EXPECT_EQ(parse_devices("all", true), std::vector<int>{0});
  ::setenv("GMJIT_SIMULATED_DEVICES", "sim A,sim A,sim B", 1);
  EXPECT_EQ(parse_devices("all", true), (std::vector<int>{0, 1, 2}));
  ::unsetenv("GMJIT_SIMULATED_DEVICES");
}

TEST(GmtuneProgress, OneLinePerDeviceAndATotalLine) {
  gmtune::DeviceProgress d;
  d.device = 1;
  d.name = "NVIDIA H200";
  EXPECT_EQ(gmtune::format_device_line(d), "gpu1 NVIDIA H200: idle");
  d.problem = Problem{"sgemm", "fp32", {{"m", 16}, {"n", 6144}, {"k", 4096}}, "llama-3-8b"};
  d.state = "tuning (resuming after 12 recorded trials)";
  d.trials = 37;
  d.candidates = 196;
  EXPECT_EQ(gmtune::format_device_line(d), "gpu1 NVIDIA H200: sgemm fp32 k=4096,m=16,n=6144  trial 37/196");
  d.state = "done 0.1234 ms";
  EXPECT_EQ(gmtune::format_device_line(d), "gpu1 NVIDIA H200: sgemm fp32 k=4096,m=16,n=6144  done 0.1234 ms");
  EXPECT_LE(gmtune::format_device_line(d, 30).size(), 30u);

  const auto line = gmtune::format_sweep_line(5, 20, 2, 125, 300.0, 200);
  EXPECT_EQ(line, "[#####...............] 5/20 on 2 devices  2m05s elapsed, eta 5m00s");
  EXPECT_EQ(gmtune::format_sweep_line(0, 20, 1, 3, std::nullopt, 200), "[....................] 0/20 on 1 device  3s elapsed");
}

TEST(GmtuneProgress, EtaSharesTheRemainingProblemsAmongTheDevices) {
  // 2 problems took 20 s in all; 5 of 10 are left; 4 devices tune at once.
  EXPECT_DOUBLE_EQ(*gmtune::estimate_eta(2, 20, 5, 10, 4), 12.5);
  EXPECT_DOUBLE_EQ(*gmtune::estimate_eta(2, 20, 5, 10, 1), 50);
  EXPECT_FALSE(gmtune::estimate_eta(0, 0, 5, 10, 4).has_value());
}

TEST(CliSweepDevices, BadDeviceListIsUsageBeforeTheDevice) {
  for (const char* devices : {"0,-1", "x", "1,"}) {
    SCOPED_TRACE(devices);
    const auto result = run_gmtune(std::string("sweep --devices ") + devices, "GMJIT_CACHE=/nonexistent/never.db");
    EXPECT_EQ(result.status, 2) << result.err;
    EXPECT_EQ(line_count(result.err), 1) << result.err;
    EXPECT_NE(result.err.find("--devices"), std::string::npos) << result.err;
  }
  const auto both = run_gmtune("sweep --device 0 --devices 0,1", "GMJIT_CACHE=/nonexistent/never.db");
  EXPECT_EQ(both.status, 2) << both.err;
}

TEST(CliSweepDevices, HelpDocumentsDevicesAndPerDevice) {
  const auto help = run_gmtune("sweep --help");
  EXPECT_EQ(help.status, 0);
  EXPECT_NE(help.out.find("--devices"), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("--per-device"), std::string::npos) << help.out;
}

}  // namespace
}  // namespace gmjit
