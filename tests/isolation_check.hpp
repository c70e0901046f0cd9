#pragma once
// The isolation test of issue 4, shared by the simulated (nvrtc tier) and the real (gpu tier)
// runs: tune the deliberately broken template of tests/data/broken and check that every failure
// mode is recorded with its own status, the winner is a correct configuration, and this process
// is still here to check it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>

#include "gmjit/kernels.hpp"
#include "gmjit/tune.hpp"

namespace gmjit::testing {

inline void check_broken_template_isolation(bool simulated) {
  // GMJIT_SOURCE_DIR in the environment points at a copied checkout, e.g. on a GPU machine.
  const char* source_dir = std::getenv("GMJIT_SOURCE_DIR");
  const std::string root = source_dir && *source_dir ? source_dir : GMJIT_SOURCE_DIR;
  const std::string name = register_kernel_file(root + "/tests/data/broken/broken.json");
  TuneOptions options;
  options.simulated_device = simulated;
  options.strategy = "exhaustive";
  options.watchdog_seconds = 4;
  options.max_seconds_per_candidate = 0.05;
  const TuneReport report = tune({name, "fp32", {{"n", 1000003}}, "isolation test"}, options);

  const std::map<std::int64_t, TrialStatus> expected{
      {0, TrialStatus::ok},      {1, TrialStatus::compile_failed}, {2, TrialStatus::invalid},
      {3, TrialStatus::crashed}, {4, TrialStatus::timeout},        {5, TrialStatus::wrong_result}};
  ASSERT_EQ(report.trials.size(), 18u);
  for (const auto& trial : report.trials) {
    const auto mode = trial.config.at("mode");
    EXPECT_EQ(to_string(trial.status), std::string(to_string(expected.at(mode))))
        << format_assignments(trial.config) << ": " << trial.detail;
    if (trial.status != TrialStatus::ok) EXPECT_FALSE(trial.detail.empty()) << format_assignments(trial.config);
  }
  ASSERT_TRUE(report.winner.has_value());
  EXPECT_EQ(report.trials[*report.winner].config.at("mode"), 0);
  EXPECT_EQ(report.trials[*report.winner].status, TrialStatus::ok);
  // Three crashes and three hangs each cost one worker.
  EXPECT_EQ(report.worker_restarts, 6u);
}

}  // namespace gmjit::testing
