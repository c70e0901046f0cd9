// Search logic and the worker protocol, without a device or NVRTC.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <thread>

#include "gmjit/error.hpp"
#include "templates/registry.hpp"
#include "tuner/harness.hpp"
#include "tuner/protocol.hpp"
#include "tuner/search.hpp"
#include "tuner/strategies/searcher.hpp"
#include "tuner/worker.hpp"

namespace {

using gmjit::Config;
using gmjit::TrialReport;
using gmjit::TrialStatus;

TrialReport ok_trial(std::int64_t value, double median, double ci = 0.2) {
  TrialReport t;
  t.config = {{"x", value}};
  t.median_ms = median;
  t.ci_percent = ci;
  return t;
}

TEST(Summarize, MedianSpreadAndConfidenceInterval) {
  std::vector<double> samples;
  for (int i = 100; i >= 1; --i) samples.push_back(i);  // any order
  const auto t = gmjit::tuner::summarize(samples);
  EXPECT_EQ(t.repetitions, 100);
  EXPECT_DOUBLE_EQ(t.median_ms, 50.5);
  // Order statistics 50 -+ 9.8 of 100: samples 41 and 60 (1-based), so a half-width of 9.5.
  EXPECT_NEAR(t.ci_percent, 100.0 * 9.5 / 50.5, 1e-9);
  EXPECT_NEAR(t.spread, (76.0 - 26.0) / 50.5, 1e-9);
  const auto constant = gmjit::tuner::summarize(std::vector<double>(20, 2.0));
  EXPECT_DOUBLE_EQ(constant.ci_percent, 0.0);
}

TEST(Summarize, ConfidenceNarrowsWithMoreSamples) {
  std::vector<double> few, many;
  for (int i = 0; i < 10; ++i) few.push_back(1.0 + 0.01 * (i % 5));
  for (int i = 0; i < 400; ++i) many.push_back(1.0 + 0.01 * (i % 5));
  EXPECT_GE(gmjit::tuner::summarize(few).ci_percent, gmjit::tuner::summarize(many).ci_percent);
}

TEST(BatchSize, OnlyShortKernelsAreBatched) {
  gmjit::tuner::MeasureOptions options;
  EXPECT_EQ(gmjit::tuner::batch_size(0.5, options), 1);
  EXPECT_EQ(gmjit::tuner::batch_size(0.02, options), 1);
  EXPECT_EQ(gmjit::tuner::batch_size(0.005, options), 20);
  EXPECT_EQ(gmjit::tuner::batch_size(1e-6, options), options.max_batch);
}

TEST(Choose, FastestWinsWhenClearlyFaster) {
  const auto c = gmjit::tuner::choose({ok_trial(1, 2.0), ok_trial(2, 1.0), ok_trial(3, 1.5)}, std::nullopt);
  ASSERT_TRUE(c.winner && c.runner_up);
  EXPECT_EQ(*c.winner, 1u);
  EXPECT_EQ(*c.runner_up, 2u);
}

TEST(Choose, WithinNoiseTheSimplerConfigurationStays) {
  // Trial 0 is 0.3% slower, inside the 0.5% floor: it comes first in domain order, so it wins.
  const auto c = gmjit::tuner::choose({ok_trial(1, 1.003), ok_trial(2, 1.0)}, std::nullopt);
  EXPECT_EQ(*c.winner, 0u);
  EXPECT_EQ(*c.runner_up, 1u);
}

TEST(Choose, WithinNoiseTheIncumbentStays) {
  const std::vector<TrialReport> trials{ok_trial(1, 1.0), ok_trial(2, 1.004), ok_trial(3, 1.2)};
  EXPECT_EQ(*gmjit::tuner::choose(trials, Config{{"x", 2}}).winner, 1u);
  // Beyond the noise, the incumbent loses.
  EXPECT_EQ(*gmjit::tuner::choose(trials, Config{{"x", 3}}).winner, 0u);
}

TEST(Choose, WideConfidenceWidensTheTieBand) {
  const std::vector<TrialReport> trials{ok_trial(1, 1.02, 5.0), ok_trial(2, 1.0, 0.2)};
  EXPECT_EQ(*gmjit::tuner::choose(trials, std::nullopt).winner, 0u);
}

// bf16 8192^3 on an H100: a pingpong tile (earlier in domain order) re-timed at 1.71 ms with an
// 18% confidence interval against a cooperative one at 1.46 ms; the band stops at 3%.
TEST(Choose, ANoisyTrialDoesNotWinOnItsOwnUncertainty) {
  const std::vector<TrialReport> trials{ok_trial(1, 1.709, 18.0), ok_trial(2, 1.4615, 0.4)};
  EXPECT_EQ(*gmjit::tuner::choose(trials, std::nullopt).winner, 1u);
  EXPECT_EQ(*gmjit::tuner::choose(trials, Config{{"x", 1}}).winner, 1u) << "nor as the incumbent";
  // Within the ceiling the simpler configuration still stays.
  EXPECT_EQ(*gmjit::tuner::choose({ok_trial(1, 1.025, 18.0), ok_trial(2, 1.0, 0.4)}, std::nullopt).winner, 0u);
}

TEST(Choose, FailedTrialsNeverWin) {
  auto wrong = ok_trial(1, 0.1);
  wrong.status = TrialStatus::wrong_result;
  auto crashed = ok_trial(2, 0.05);
  crashed.status = TrialStatus::crashed;
  const auto c = gmjit::tuner::choose({wrong, crashed, ok_trial(3, 1.0)}, std::nullopt);
  EXPECT_EQ(*c.winner, 2u);
  EXPECT_FALSE(c.runner_up.has_value());
  EXPECT_FALSE(gmjit::tuner::choose({wrong, crashed}, std::nullopt).winner.has_value());
}

// The order a registered strategy hands candidates out in, asked two at a time.
std::vector<std::size_t> visit_order(const std::string& strategy, const std::vector<Config>& configs,
                                     const std::vector<double>& estimates, std::uint64_t seed,
                                     const std::vector<Config>& nearest = {}) {
  gmjit::tuner::SearchSpace space;
  space.candidates = configs;
  space.estimate_ms = [&](const Config& c) { return estimates.at(static_cast<std::size_t>(c.at("x"))); };
  space.nearest_winners = [&](std::size_t) { return nearest; };
  space.seed = seed;
  const auto searcher = gmjit::tuner::find_strategy(strategy).make(space);
  std::vector<std::size_t> order;
  for (auto next = searcher->ask(2); !next.empty(); next = searcher->ask(2)) {
    order.insert(order.end(), next.begin(), next.end());
  }
  return order;
}

TEST(VisitOrder, EachStrategy) {
  const std::vector<Config> configs{{{"x", 0}}, {{"x", 1}}, {{"x", 2}}, {{"x", 3}}, {{"x", 4}}};
  const std::vector<double> estimates{5, 1, 3, 1, 2};
  EXPECT_EQ(visit_order("exhaustive", configs, estimates, 1), (std::vector<std::size_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(visit_order("model", configs, estimates, 1), (std::vector<std::size_t>{1, 3, 4, 2, 0}));
  const auto random = visit_order("random", configs, estimates, 7);
  EXPECT_EQ(random, visit_order("random", configs, estimates, 7));
  EXPECT_NE(random, visit_order("random", configs, estimates, 8));
  EXPECT_EQ(visit_order("transfer", configs, estimates, 1, {{{"x", 2}}, {{"x", 9}}}),
            (std::vector<std::size_t>{2, 1, 3, 4, 0}));
}

TEST(EstimateMs, SgemmModelPrefersLargeTilesOnALargeProblemAndSmallOnesOnASmallOne) {
  const auto& sgemm = gmjit::templates::find_kernel("sgemm");
  const auto& fp32 = gmjit::templates::dtype_info("fp32");
  const auto device = gmjit::tuner::simulated_device(0);
  const Config big{{"bm", 128}, {"bn", 128}, {"bk", 16}, {"tm", 8}, {"tn", 8}, {"vec", 1}, {"wm", 0}};
  const Config small{{"bm", 32}, {"bn", 32}, {"bk", 16}, {"tm", 4}, {"tn", 4}, {"vec", 1}, {"wm", 0}};
  const gmjit::Shape large{{"m", 4096}, {"n", 4096}, {"k", 4096}};
  const gmjit::Shape tiny{{"m", 256}, {"n", 256}, {"k", 4096}};
  EXPECT_LT(gmjit::tuner::estimate_ms(sgemm, big, large, fp32, device),
            gmjit::tuner::estimate_ms(sgemm, small, large, fp32, device));
  // 256x256 in 128x128 tiles is 4 blocks on 132 SMs.
  EXPECT_GT(gmjit::tuner::estimate_ms(sgemm, big, tiny, fp32, device),
            gmjit::tuner::estimate_ms(sgemm, small, tiny, fp32, device));
}

TEST(DeviceJson, RoundTrips) {
  const auto device = gmjit::tuner::simulated_device(3);
  const auto back = gmjit::tuner::device_from_json(gmjit::tuner::device_to_json(device));
  EXPECT_EQ(back.fingerprint(), device.fingerprint());
  EXPECT_EQ(back.ordinal, 3);
}

class Pipe : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds_), 0); }
  void TearDown() override {
    for (int fd : fds_) {
      if (fd >= 0) ::close(fd);
    }
  }
  int fds_[2] = {-1, -1};
};

TEST_F(Pipe, FrameRoundTripWithPayload) {
  gmjit::tuner::Frame sent{{{"op", "trial"}, {"id", 7}}, std::vector<char>(100000, 'x')};
  std::thread writer([&] { gmjit::tuner::write_frame(fds_[0], sent); });
  gmjit::tuner::Frame got;
  EXPECT_EQ(gmjit::tuner::read_frame(fds_[1], got, 5.0), gmjit::tuner::ReadResult::frame);
  writer.join();
  EXPECT_EQ(got.header, sent.header);
  EXPECT_EQ(got.payload, sent.payload);
}

TEST_F(Pipe, SilentPeerTimesOut) {
  gmjit::tuner::Frame got;
  EXPECT_EQ(gmjit::tuner::read_frame(fds_[1], got, 0.05), gmjit::tuner::ReadResult::timed_out);
}

TEST_F(Pipe, ClosedPeerReadsAsClosedEvenMidFrame) {
  const unsigned char partial[4] = {10, 0, 0, 0};
  ASSERT_EQ(::write(fds_[0], partial, 4), 4);
  ::close(fds_[0]);
  fds_[0] = -1;
  gmjit::tuner::Frame got;
  EXPECT_EQ(gmjit::tuner::read_frame(fds_[1], got, 1.0), gmjit::tuner::ReadResult::closed);
}

TEST_F(Pipe, AbsurdLengthIsRejectedNotAllocated) {
  const unsigned char huge[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f};
  ASSERT_EQ(::write(fds_[0], huge, 8), 8);
  gmjit::tuner::Frame got;
  EXPECT_THROW(gmjit::tuner::read_frame(fds_[1], got, 1.0), gmjit::Error);
}

TEST_F(Pipe, WritingToADeadPeerThrowsInsteadOfRaisingSigpipe) {
  ::close(fds_[1]);
  fds_[1] = -1;
  gmjit::tuner::Frame frame{{{"op", "x"}}, std::vector<char>(1 << 20, 'y')};
  EXPECT_THROW(gmjit::tuner::write_frame(fds_[0], frame), gmjit::Error);
}

TEST(StrategyNames, ParseAndPrint) {
  for (const char* name : {"exhaustive", "random", "model", "transfer"}) {
    EXPECT_EQ(gmjit::tuner::find_strategy(name).name, name);
    EXPECT_FALSE(gmjit::strategy_summary(name).empty()) << name;
  }
  EXPECT_THROW(gmjit::strategy_summary("genetic"), gmjit::Error);
  EXPECT_EQ(gmjit::parse_trial_status("timeout"), TrialStatus::timeout);
  EXPECT_THROW(gmjit::parse_trial_status("meh"), gmjit::Error);
}

}  // namespace

namespace {

TEST(Bf16, RoundsToNearestEvenAndRoundTrips) {
  using gmjit::tuner::bf16_to_float;
  using gmjit::tuner::float_to_bf16;
  for (float v : {0.0f, 1.0f, -2.5f, 0.0625f, std::ldexp(1.0f, 127), std::ldexp(-1.5f, -100)}) EXPECT_EQ(bf16_to_float(float_to_bf16(v)), v);
  EXPECT_EQ(float_to_bf16(1.0f + 1.0f / 256), float_to_bf16(1.0f));            // halfway: to even
  EXPECT_EQ(float_to_bf16(1.0f + 3.0f / 256), float_to_bf16(1.0f + 1.0f / 64));  // halfway: to even, up
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(RandomInputs, NeverZeroSeededAndDistinctPerTensor) {
  const auto& kernel = gmjit::templates::find_kernel("vector_add");
  for (const char* name : {"fp32", "fp16", "bf16"}) {
    const auto& dtype = gmjit::templates::dtype_info(name);
    const auto a = gmjit::tuner::random_inputs(kernel, {{"n", 4096}}, dtype, 5);
    ASSERT_EQ(a.size(), 2u);
    EXPECT_EQ(a, gmjit::tuner::random_inputs(kernel, {{"n", 4096}}, dtype, 5));
    EXPECT_NE(a, gmjit::tuner::random_inputs(kernel, {{"n", 4096}}, dtype, 6));
    EXPECT_NE(a[0], a[1]);
    int negative = 0;
    for (std::int64_t i = 0; i < 4096; ++i) {
      const double v = gmjit::tuner::element(dtype, a[0].data(), i);
      EXPECT_GE(std::abs(v), 0.0625 * 0.99) << name;
      EXPECT_LT(std::abs(v), 1.0 + 1e-6) << name;
      negative += v < 0;
    }
    EXPECT_GT(negative, 1800);
    EXPECT_LT(negative, 2300);
  }
}

// Large tensors are filled in ranges on several threads: element i must not depend on where the
// ranges split, so a tensor is a prefix of any longer one with the same seed.
TEST(RandomInputs, ElementsDoNotDependOnHowTheFillIsSplit) {
  const auto& kernel = gmjit::templates::find_kernel("vector_add");
  const auto& bf16 = gmjit::templates::dtype_info("bf16");
  const std::int64_t sizes[] = {1000, (std::int64_t{3} << 20) + 7, (std::int64_t{5} << 20) + 3};
  std::vector<std::vector<std::vector<unsigned char>>> filled;
  for (std::int64_t n : sizes) filled.push_back(gmjit::tuner::random_inputs(kernel, {{"n", n}}, bf16, 11));
  for (std::size_t longer = 1; longer < filled.size(); ++longer) {
    for (std::size_t input = 0; input < 2; ++input) {
      const auto& shorter = filled[longer - 1][input];
      const auto& whole = filled[longer][input];
      ASSERT_LT(shorter.size(), whole.size());
      EXPECT_TRUE(std::equal(shorter.begin(), shorter.end(), whole.begin()))
          << "input " << input << " at " << sizes[longer - 1] << " elements differs from the start of "
          << sizes[longer];
    }
  }
}

}  // namespace
