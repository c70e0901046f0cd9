#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "cli_runner.hpp"
#include "gmjit/device.hpp"

namespace gmjit {
namespace {

using testing::line_count;
using testing::run_gmtune;

TEST(Cli, ListShowsEveryKernelWithDomains) {
  const auto result = run_gmtune("list --json");
  ASSERT_EQ(result.status, 0) << result.err;
  const auto doc = nlohmann::json::parse(result.out);
  std::set<std::string> names;
  for (const auto& k : doc["kernels"]) {
    names.insert(k["name"].get<std::string>());
    EXPECT_FALSE(k["params"].empty());
  }
  EXPECT_TRUE(names.count("sgemm"));
  EXPECT_TRUE(names.count("vector_add"));
  EXPECT_EQ(run_gmtune("list").status, 0);
}

struct BadInput {
  const char* arguments;
  const char* token;  // the reason must name it
};

TEST(Cli, BadCompileInputIsExitTwoWithOneLineAndNothingWritten) {
  const BadInput cases[] = {
      {"compile nosuch --shape n=1", "nosuch"},
      {"compile vector_add --shape m=1", "m=1"},
      {"compile sgemm --shape m=64,n=64", "'k'"},
      {"compile sgemm --shape m=64,n=64,k=64 --config bm=48", "bm=48"},
      {"compile sgemm --shape m=64,n=64,k=64 --config bm=32,tm=8,bn=32,tn=8", "bm=32"},
      {"compile sgemm --shape m=64,n=63,k=64 --config vec=1", "vec=1"},
      {"compile sgemm --shape m=64,n=64,k=64 --config bm", "bm"},
      {"compile sgemm --shape m=64,n=x,k=64", "n=x"},
      {"compile vector_add --shape n=16 --dtype fp64", "fp64"},
  };
  const auto out = std::filesystem::temp_directory_path() / ("gmtune-bad-" + std::to_string(::getpid()));
  for (const auto& c : cases) {
    SCOPED_TRACE(c.arguments);
    std::filesystem::remove_all(out);
    const auto result = run_gmtune(std::string(c.arguments) + " --arch sm_90a --out " + out.string());
    EXPECT_EQ(result.status, 2);
    EXPECT_EQ(line_count(result.err), 1) << result.err;
    EXPECT_NE(result.err.find(c.token), std::string::npos) << result.err;
    EXPECT_TRUE(result.out.empty()) << result.out;
    EXPECT_FALSE(std::filesystem::exists(out));
  }
}

TEST(Cli, UnknownSubcommandOrOptionIsUsage) {
  EXPECT_EQ(run_gmtune("frobnicate").status, 2);
  EXPECT_EQ(run_gmtune("list --bogus").status, 2);
  EXPECT_EQ(run_gmtune("").status, 2);
  EXPECT_EQ(run_gmtune("sweep --preset nosuch --dry-run").status, 2);
}

TEST(Cli, SweepDryRunListsThePreset) {
  const auto dir = std::filesystem::temp_directory_path() / ("gmtune-dry-" + std::to_string(::getpid()));
  const auto result = run_gmtune("sweep --dry-run --db " + (dir / "gmjit.db").string());
  ASSERT_EQ(result.status, 0) << result.err;
  EXPECT_NE(result.out.find("sgemm"), std::string::npos);
  EXPECT_EQ(line_count(result.out), 4) << "one problem a line: " << result.out;
  EXPECT_NE(result.err.find("4 problems"), std::string::npos) << "the count goes to stderr: " << result.err;
  EXPECT_FALSE(std::filesystem::exists(dir));
}

TEST(Cli, SweepOfTheSharedShapesFileNamesUnknownKernels) {
  const std::string shapes = std::string(GMJIT_SOURCE_DIR) + "/tests/data/shapes_bad_kernel.json";
  const auto result = run_gmtune("sweep --shapes " + shapes);
  EXPECT_EQ(result.status, 2);
  EXPECT_NE(result.err.find("sweep 1"), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("nosuch"), std::string::npos) << result.err;
}

TEST(Cli, WithoutADeviceGpuCommandsStopWithOneLine) {
  if (driver_status().available) GTEST_SKIP() << "a device is present; covered by the gpu tier";
  const auto db = std::filesystem::temp_directory_path() / ("gmtune-nogpu-" + std::to_string(::getpid()) + ".db");
  for (const std::string& args : std::vector<std::string>{"sweep --db " + db.string(), "tune vector_add --shape n=1024", "devices",
                                 "compile sgemm --shape m=64,n=64,k=64"}) {
    SCOPED_TRACE(args);
    const auto result = run_gmtune(args);
    EXPECT_EQ(result.status, 1);
    EXPECT_EQ(line_count(result.err), 1) << result.err;
    EXPECT_NE(result.err.find("gmtune: "), std::string::npos);
  }
  EXPECT_FALSE(std::filesystem::exists(db)) << "no cache file without a device";
}

}  // namespace
}  // namespace gmjit
