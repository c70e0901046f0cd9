// gmjit::Runtime without a GPU: names, pointer conversions, and every check that must happen
// before the device or the cache is touched (they pass the same way on a GPU machine).
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "cache_test_support.hpp"
#include "gmjit/runtime.hpp"
#include "runtime_fixture.hpp"

namespace gmjit {
namespace {

namespace fs = std::filesystem;
using cache_test::capture_error;

TEST(RuntimeNames, MissPoliciesRoundTripAndUnknownNamesListThem) {
  for (const auto p : {MissPolicy::tune, MissPolicy::nearest, MissPolicy::default_config, MissPolicy::fail}) {
    EXPECT_EQ(parse_miss_policy(to_string(p)), p);
  }
  EXPECT_STREQ(to_string(MissPolicy::default_config), "default_config");
  const Error e = capture_error([] { parse_miss_policy("closest"); });
  EXPECT_EQ(e.kind(), ErrorKind::usage);
  EXPECT_NE(e.message().find("closest"), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("tune, nearest, default_config, fail"), std::string::npos) << e.message();
  EXPECT_STREQ(to_string(ConfigSource::cache), "cache");
  EXPECT_STREQ(to_string(ConfigSource::nearest), "nearest");
  EXPECT_STREQ(to_string(ConfigSource::default_config), "default_config");
  EXPECT_STREQ(to_string(ConfigSource::tuned), "tuned");
  EXPECT_STREQ(to_string(ErrorKind::cache_miss), "cache_miss");
}

TEST(RuntimeNames, DevicePtrTakesPointersAndIntegers) {
  float storage[2] = {};
  const float* constant = storage;
  const unsigned long long cu_deviceptr = 0x7f0000001000ULL;  // what CUdeviceptr is on 64-bit Linux
  const std::vector<DevicePtr> tensors = {storage, constant, cu_deviceptr, std::uint64_t{42}, nullptr, 0};
  EXPECT_EQ(tensors[0].address(), reinterpret_cast<std::uintptr_t>(storage));
  EXPECT_EQ(tensors[1].address(), reinterpret_cast<std::uintptr_t>(storage));
  EXPECT_EQ(tensors[2].address(), 0x7f0000001000ULL);
  EXPECT_EQ(tensors[3].address(), 42u);
  EXPECT_EQ(tensors[4].address(), 0u);
  EXPECT_EQ(tensors[5].address(), 0u);
  const Tensors view(tensors);
  EXPECT_EQ(view.size(), tensors.size());
  EXPECT_EQ(view[2].address(), cu_deviceptr);
}

class RuntimeChecks : public testing::RuntimeTest {};

TEST_F(RuntimeChecks, ConstructionTouchesNeitherDeviceNorCache) {
  Runtime runtime(options(MissPolicy::nearest));
  EXPECT_EQ(runtime.db_path(), db_.string());
  EXPECT_EQ(runtime.options().miss_policy, MissPolicy::nearest);
  EXPECT_FALSE(fs::exists(db_));
  const RuntimeStats s = runtime.stats();
  EXPECT_EQ(s.launches + s.db_lookups + s.loads + s.compiles, 0u);
  EXPECT_EQ(s.last_load.total_us, 0.0) << "no load yet, so no stage times";
}

TEST_F(RuntimeChecks, BadArgumentsAreUsageErrorsBeforeTheDeviceOrTheCache) {
  Runtime runtime(options(MissPolicy::default_config));
  const std::uint64_t a = 0x1000, b = 0x2000, c = 0x3000;
  const Shape gemm{{"m", 64}, {"n", 64}, {"k", 64}};

  Error e = capture_error([&] { runtime.launch("sgemm", gemm, {a, b}); });
  EXPECT_EQ(e.kind(), ErrorKind::usage);
  EXPECT_EQ(e.message(), "sgemm takes 3 tensors (A, B, C), got 2");

  e = capture_error([&] { runtime.launch("vector_add", {{"n", 10}}, {a, b, c, a}); });
  EXPECT_EQ(e.kind(), ErrorKind::usage);
  EXPECT_EQ(e.message(), "vector_add takes 3 tensors (a, b, c), got 4");

  e = capture_error([&] { runtime.launch("sgemv", gemm, {a, b, c}); });
  EXPECT_EQ(e.kind(), ErrorKind::usage);
  EXPECT_NE(e.message().find("unknown kernel 'sgemv'"), std::string::npos) << e.message();

  e = capture_error([&] { runtime.launch("sgemm", {{"m", 64}, {"n", 64}}, {a, b, c}); });
  EXPECT_EQ(e.kind(), ErrorKind::usage);
  EXPECT_NE(e.message().find("missing problem key 'k'"), std::string::npos) << e.message();

  e = capture_error([&] { runtime.launch("vector_add", {{"n", 0}}, {a, b, c}); });
  EXPECT_EQ(e.kind(), ErrorKind::usage);

  LaunchOptions half;
  half.dtype = "fp16";
  e = capture_error([&] { runtime.launch("sgemm", gemm, {a, b, c}, nullptr, half); });
  EXPECT_EQ(e.kind(), ErrorKind::usage);
  EXPECT_NE(e.message().find("fp16"), std::string::npos) << e.message();

  e = capture_error([&] { runtime.resolve("vector_add", {{"n", 10}, {"m", 3}}); });
  EXPECT_EQ(e.kind(), ErrorKind::usage);

  EXPECT_FALSE(fs::exists(db_)) << "a rejected call created the cache";
  const RuntimeStats s = runtime.stats();
  EXPECT_EQ(s.db_lookups, 0u);
  EXPECT_EQ(s.loads, 0u);
  EXPECT_EQ(s.launches, 0u);
}

TEST_F(RuntimeChecks, FailPolicyWithoutACacheFileRefusesAndCreatesNone) {
  Runtime runtime(options(MissPolicy::fail));
  const Error e = capture_error(
      [&] { runtime.launch("sgemm", {{"m", 64}, {"n", 128}, {"k", 32}}, {std::uint64_t{1}, std::uint64_t{2}, std::uint64_t{3}}); });
  EXPECT_EQ(e.kind(), ErrorKind::cache_miss);
  EXPECT_EQ(e.message().find('\n'), std::string::npos) << "one line: " << e.message();
  EXPECT_NE(e.message().find("sgemm fp32 k=32,m=64,n=128"), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("miss policy fail"), std::string::npos) << e.message();
  EXPECT_NE(e.message().find(db_.string()), std::string::npos) << e.message();
  // The command to run records into this cache (tests/nvrtc/test_cli_tune.cpp runs it).
  EXPECT_NE(e.message().find("`gmtune tune sgemm --shape k=32,m=64,n=128 --dtype fp32 --db " + db_.string() + "`"),
            std::string::npos)
      << e.message();
  EXPECT_FALSE(fs::exists(db_));
  EXPECT_EQ(runtime.stats().failed, 1u);

  // The per-call policy overrides the Runtime's; resolve() refuses the same way.
  Runtime lenient(options(MissPolicy::nearest));
  LaunchOptions fail;
  fail.miss_policy = MissPolicy::fail;
  EXPECT_EQ(capture_error([&] { lenient.resolve("vector_add", {{"n", 100}}, fail); }).kind(), ErrorKind::cache_miss);
  EXPECT_FALSE(fs::exists(db_));
}

// A histogram launch needs n alone: the Runtime normalizes it to the problem a sweep of n tunes
// (contention at its default) before it looks at the device or the cache, and the workspace is
// the Runtime's, so a caller passing one passes a tensor too many.
TEST_F(RuntimeChecks, HistogramResolvesFromNAloneAndTakesNoWorkspace) {
  Runtime runtime(options(MissPolicy::fail));
  Error e = capture_error([&] { runtime.resolve("histogram", {{"n", 1000}}); });
  EXPECT_EQ(e.kind(), ErrorKind::cache_miss) << e.message();
  EXPECT_NE(e.message().find("histogram u8 contention=1,i64_counts=0,n=1000"), std::string::npos) << e.message();
  e = capture_error([&] { runtime.resolve("histogram", {{"n", 1000}, {"contention", 90}}); });
  EXPECT_EQ(e.kind(), ErrorKind::cache_miss) << e.message();
  EXPECT_NE(e.message().find("histogram u8 contention=90,i64_counts=0,n=1000"), std::string::npos) << e.message();

  Runtime lenient(options(MissPolicy::default_config));
  const std::uint64_t x = 0x1000, counts = 0x2000, scratch = 0x3000;
  e = capture_error([&] { lenient.launch("histogram", {{"n", 1000}}, {x, counts, scratch}); });
  EXPECT_EQ(e.kind(), ErrorKind::usage);
  EXPECT_EQ(e.message(), "histogram takes 2 tensors (x, counts), got 3");
  e = capture_error([&] { lenient.launch("prefix_sum", {{"n", 1000}}, {x, counts, scratch}); });
  EXPECT_EQ(e.message(), "prefix_sum takes 2 tensors (x, y), got 3");
  e = capture_error([&] { lenient.launch("histogram", {{"contention", 5}}, {x, counts}); });
  EXPECT_EQ(e.kind(), ErrorKind::usage);
  EXPECT_FALSE(fs::exists(db_));
  EXPECT_EQ(lenient.stats().workspaces, 0u);
}

}  // namespace
}  // namespace gmjit
