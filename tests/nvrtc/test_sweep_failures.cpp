// One bad problem does not end a sweep (issue 15, item 9): a problem whose setup the worker refuses
// is recorded as failed, in the progress, the summary and the cache, while the other problems get
// their winners on every device, and gmtune exits 1 naming it. On two simulated devices, through
// the real gmtune, workers and cache.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "cache/keys.hpp"
#include "cache/store.hpp"
#include "cli_runner.hpp"
#include "gmjit/kernels.hpp"
#include "gmjit/tune.hpp"
#include "temp_dir.hpp"
#include "templates/registry.hpp"
#include "tuner/worker.hpp"

namespace {

namespace fs = std::filesystem;
using gmjit::testing::run_gmtune;

// 2^35 fp32 elements in each of three tensors: 384 GiB, beyond the simulated H200's 141 GiB,
// while the kernel's own bound (n < 2^40) accepts it, so the problem passes every check up to
// the worker's.
constexpr std::int64_t kTooLarge = std::int64_t{1} << 35;

std::string source_dir() {
  const char* dir = std::getenv("GMJIT_SOURCE_DIR");
  return dir && *dir ? dir : GMJIT_SOURCE_DIR;
}

std::string key_of(const std::string& kernel, const std::string& header, std::int64_t n) {
  return gmjit::cache::problem_key(kernel, gmjit::templates::template_hash(header), "fp32", gmjit::cache::kRowMajor,
                                   {{"n", n}});
}

class SweepFailures : public gmjit::testing::TempDirTest {
 protected:
  SweepFailures() : TempDirTest("gmjit-sweep-failures") {}
  const std::string manifest_ = source_dir() + "/tests/data/broken/broken.json";
  const std::string shapes_ = (dir_ / "shapes.json").string();
  const std::string db_ = (dir_ / "c.db").string();
};

TEST_F(SweepFailures, AProblemTheWorkerRefusesIsRecordedAndTheOthersAreTuned) {
  ASSERT_EQ(gmjit::register_kernel_file(manifest_), "broken");
  // The refused problem sits between the others, so work after it shows the sweep went on.
  std::ofstream(shapes_) << nlohmann::json{
      {"sweeps",
       {{{"kernel", "vector_add"}, {"dtype", "fp32"}, {"shapes", {{{"n", 4096}}}}},
        {{"kernel", "broken"}, {"dtype", "fp32"}, {"shapes", {{{"n", kTooLarge}}}}},
        {{"kernel", "vector_add"}, {"dtype", "fp32"}, {"shapes", {{{"n", 8192}}, {{"n", 12288}}}}}}}}
                                .dump();
  const std::string environment =
      "GMJIT_SIMULATED_DEVICE=1 GMJIT_SIMULATED_DEVICES='gmjit simulated H200,gmjit simulated H200'";
  const auto result = run_gmtune("--kernel-manifest " + manifest_ + " sweep --json --budget 4 --devices all --shapes " +
                                     shapes_ + " --db " + db_,
                                 environment);
  EXPECT_EQ(result.status, 1) << result.out << result.err;
  const auto summary = nlohmann::json::parse(result.out, nullptr, false);
  ASSERT_FALSE(summary.is_discarded()) << "no summary: the sweep stopped\n" << result.out << result.err;
  EXPECT_EQ(summary["tuned"], 3) << summary.dump(2);
  EXPECT_EQ(summary["failed"], 1);
  ASSERT_EQ(summary["failures"].size(), 1u) << summary.dump(2);
  const auto& failure = summary["failures"][0];
  EXPECT_EQ(failure["problem"]["kernel"], "broken");
  EXPECT_EQ(failure["problem"]["shape"]["n"], kTooLarge);
  EXPECT_NE(failure["reason"].get<std::string>().find("GiB of device memory"), std::string::npos) << failure.dump();

  // The end of the run names it, and the progress showed it failing.
  const std::string named = "failed on gpu" + std::to_string(failure["device"].get<int>()) +
                            ": broken fp32 n=" + std::to_string(kTooLarge);
  EXPECT_NE(result.err.find("gmtune: " + named), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("broken fp32 n=" + std::to_string(kTooLarge) + ": failed: "), std::string::npos) << result.err;

  gmjit::cache::Store store(db_);
  const std::string device = gmjit::tuner::simulated_device(0).fingerprint();
  for (std::int64_t n : {4096, 8192, 12288}) {
    EXPECT_TRUE(store.find_winner(device, key_of("vector_add", "gmjit/vector_add.cuh", n)).has_value()) << n;
  }
  const std::string broken = key_of("broken", "user/broken.cuh", kTooLarge);
  EXPECT_FALSE(store.find_winner(device, broken).has_value());
  EXPECT_TRUE(store.trials(device, broken).empty()) << "nothing ran: the worker refused the problem itself";
  const auto recorded = store.find_problem_failure(device, broken);
  ASSERT_TRUE(recorded.has_value()) << "the failure is in the cache";
  EXPECT_EQ(recorded->reason, failure["reason"].get<std::string>());

  // A second run tries the failed problem again, and only it.
  const auto again = run_gmtune("--kernel-manifest " + manifest_ + " sweep --json --budget 4 --devices all --shapes " +
                                    shapes_ + " --db " + db_,
                                environment);
  EXPECT_EQ(again.status, 1) << again.err;
  const auto second = nlohmann::json::parse(again.out, nullptr, false);
  ASSERT_FALSE(second.is_discarded()) << again.out << again.err;
  EXPECT_EQ(second["skipped"], 3);
  EXPECT_EQ(second["failed"], 1);
}

}  // namespace
