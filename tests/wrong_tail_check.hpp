#pragma once
// What tuning tests/data/wrong_tail must report, on the simulated device (nvrtc tier) and on a
// GPU: tail=0 verified and the winner; tail=12 a wrong result whose relative L2 error stayed
// within `max_l2` (so the L2 check alone would have passed it), named by its first zero.
#include <gtest/gtest.h>

#include <cstdint>
#include <regex>
#include <string>

#include "gmjit/tune.hpp"

namespace gmjit::testing {

inline void check_wrong_tail_report(const TuneReport& report, std::int64_t n, double max_l2) {
  ASSERT_EQ(report.trials.size(), 2u);
  for (const auto& trial : report.trials) {
    SCOPED_TRACE(format_assignments(trial.config) + ": " + trial.detail);
    if (trial.config.at("tail") == 0) {
      EXPECT_EQ(trial.status, TrialStatus::ok);
      EXPECT_LE(trial.verify_error, 4.9e-4) << "one fp16 rounding, 2^-11 at most";
      continue;
    }
    EXPECT_EQ(trial.status, TrialStatus::wrong_result);
    EXPECT_GT(trial.verify_error, 0.0);
    EXPECT_LE(trial.verify_error, max_l2) << "the L2 check alone would have passed it";
    std::smatch match;
    const std::regex message("of " + std::to_string(n) +
                             R"( elements of c outside \|out - ref\| <= 0\.004 \+ 0\.004 \|ref\|; the first, )"
                             R"(element (\d+), is 0 against -?[0-9.]+)");
    ASSERT_TRUE(std::regex_search(trial.detail, match, message));
    const std::int64_t first = std::stoll(match[1].str());
    EXPECT_GE(first, n - 12);
    EXPECT_LT(first, n);
    std::printf("[ rejected ] %s\n", trial.detail.c_str());
  }
  ASSERT_TRUE(report.winner.has_value());
  EXPECT_EQ(report.trials[*report.winner].config.at("tail"), 0);
}

}  // namespace gmjit::testing
