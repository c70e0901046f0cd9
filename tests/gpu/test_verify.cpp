// The per-element bound on the device (gmjit/verify.cuh's compare): a kernel that writes 0 to the
// last 12 of 2^24 fp16 elements passes the relative L2 check and is rejected by the tuner all the
// same, with the first wrong element named.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <regex>
#include <string>

#include "gmjit/kernels.hpp"
#include "gmjit/tune.hpp"
#include "require_gpu.hpp"

namespace gmjit {
namespace {

TEST(SM90_Verify, AZeroTailThatPassesTheL2ErrorIsRejected) {
  GMJIT_REQUIRE_SM90();
  // GMJIT_SOURCE_DIR in the environment points at a copied checkout, e.g. on a GPU machine.
  const char* source_dir = std::getenv("GMJIT_SOURCE_DIR");
  const std::string root = source_dir && *source_dir ? source_dir : GMJIT_SOURCE_DIR;
  const std::string name = register_kernel_file(root + "/tests/data/wrong_tail/wrong_tail.json");
  const std::int64_t n = std::int64_t{1} << 24;
  TuneOptions options;
  options.strategy = "exhaustive";
  options.max_seconds_per_candidate = 0.05;
  const TuneReport report = tune({name, "fp16", {{"n", n}}, "wrong tail"}, options);
  ASSERT_EQ(report.trials.size(), 2u);
  for (const auto& trial : report.trials) {
    SCOPED_TRACE(format_assignments(trial.config) + ": " + trial.detail);
    if (trial.config.at("tail") == 0) {
      EXPECT_EQ(trial.status, TrialStatus::ok);
      EXPECT_LE(trial.verify_error, std::ldexp(1.0, -11)) << "one fp16 rounding";
      continue;
    }
    EXPECT_EQ(trial.status, TrialStatus::wrong_result);
    // wrong_tail.cuh: at most 2.1e-3 for any inputs, under the manifest's fp16 tolerance of 4e-3,
    // so the L2 check alone would have accepted this kernel.
    EXPECT_GT(trial.verify_error, 0.0);
    EXPECT_LE(trial.verify_error, 2.1e-3);
    std::smatch match;
    ASSERT_TRUE(std::regex_search(trial.detail, match,
                                  std::regex(R"(of 16777216 elements of c outside \|out - ref\| <= 0\.004 \+ 0\.004 )"
                                             R"(\|ref\|; the first, element (\d+), is 0 against -?[0-9.]+)")));
    const std::int64_t first = std::stoll(match[1].str());
    EXPECT_GE(first, n - 12);
    EXPECT_LT(first, n);
    std::printf("[ rejected ] %s\n", trial.detail.c_str());
  }
  ASSERT_TRUE(report.winner.has_value());
  EXPECT_EQ(report.trials[*report.winner].config.at("tail"), 0);
}

}  // namespace
}  // namespace gmjit
