// The cache's record of problems a sweep could not tune at all (schema 3): written with its
// device and problem, replaced by a later failure, removed by a winner, and added to a schema-2
// file by its migration.
#include <gtest/gtest.h>

#include "unit/cache_test_support.hpp"

namespace {

using namespace gmjit::cache_test;

DeviceRecord device() { return {"dev-h200", "NVIDIA H200", "sm_90a", R"({"sm_count":132})"}; }
ProblemRecord problem() { return {"p-huge", "gemm", "hash", "fp32", "row_major", R"({"n":34359738368})"}; }

class ProblemFailures : public CacheDirTest {};

TEST_F(ProblemFailures, RecordedReplacedAndRemovedByAWinner) {
  Store store(path_);
  EXPECT_FALSE(store.find_problem_failure("dev-h200", "p-huge").has_value());
  store.record_problem_failure(device(), problem(), "does not fit", "v1");
  store.record_problem_failure(device(), problem(), "does not fit, again", "v2");
  const auto failure = store.find_problem_failure("dev-h200", "p-huge");
  ASSERT_TRUE(failure.has_value());
  EXPECT_EQ(failure->reason, "does not fit, again");
  EXPECT_EQ(failure->library_version, "v2");
  EXPECT_GT(failure->failed_at, 0);
  EXPECT_FALSE(store.find_problem_failure("dev-other", "p-huge").has_value());
  EXPECT_TRUE(store.trials("dev-h200", "p-huge").empty()) << "a failure is not a trial";

  store.record_tuning(device(), problem(), {ok_trial(64, 1.0)}, 0, "v3");
  EXPECT_FALSE(store.find_problem_failure("dev-h200", "p-huge").has_value()) << "a winner ends the failure";
  EXPECT_EQ(store.verify().problems.size(), 0u);
}

TEST_F(ProblemFailures, ASchemaTwoFileGainsTheTable) {
  {
    Store store(path_);
    store.record_tuning(device(), problem(), {ok_trial(64, 1.0)}, 0, "v1");
  }
  {
    RawDb raw(path_);
    raw.exec("DROP TABLE problem_failures; PRAGMA user_version = 2;");
  }
  Store store(path_);
  store.record_problem_failure(device(), problem(), "refused", "v2");
  EXPECT_EQ(store.find_problem_failure("dev-h200", "p-huge")->reason, "refused");
  RawDb raw(path_);
  EXPECT_EQ(raw.integer("PRAGMA user_version"), Store::kSchemaVersion);
  EXPECT_EQ(raw.integer("SELECT count(*) FROM trials"), 1);
}

}  // namespace
