// The per-element bound on the device (gmjit/verify.cuh's compare): a kernel that writes 0 to the
// last 12 of 2^24 fp16 elements passes the relative L2 check and is rejected by the tuner all the
// same, with the first wrong element named.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "gmjit/kernels.hpp"
#include "gmjit/tune.hpp"
#include "require_gpu.hpp"
#include "wrong_tail_check.hpp"

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
  // wrong_tail.cuh: at most 2.1e-3 for any inputs, under the manifest's fp16 tolerance of 4e-3.
  testing::check_wrong_tail_report(report, n, 2.1e-3);
}

}  // namespace
}  // namespace gmjit
