// Input gmtune cannot serve is a usage error, exit 2 with one line, and what it prints from a
// shapes file cannot break its output.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli_runner.hpp"

namespace gmjit {
namespace {

using testing::line_count;
using testing::run_gmtune;

std::filesystem::path temp_path(const std::string& name) {
  return std::filesystem::temp_directory_path() / ("gmtune-bounds-" + std::to_string(::getpid()) + "-" + name);
}

TEST(CliBounds, AnUnknownArchIsExitTwoWithOneLine) {
  for (const std::string arch : {"sm_12345", "sm_9x", "compute_90", "garbage"}) {
    SCOPED_TRACE(arch);
    const auto result = run_gmtune("compile vector_add --shape n=1024 --arch " + arch);
    EXPECT_EQ(result.status, 2) << result.err;
    EXPECT_EQ(line_count(result.err), 1) << result.err;
    EXPECT_NE(result.err.find("unknown target '" + arch + "'"), std::string::npos) << result.err;
    EXPECT_NE(result.err.find("sm_90"), std::string::npos) << "names the targets NVRTC knows: " << result.err;
    EXPECT_EQ(result.err.find(".cpp"), std::string::npos) << "no source path: " << result.err;
    EXPECT_TRUE(result.out.empty()) << result.out;
  }
}

TEST(CliBounds, SizesBeyondAKernelAreExitTwo) {
  const std::string huge = "4611686018427387904";  // 2^62
  const std::vector<std::string> commands{"compile sgemm --shape m=" + huge + ",n=" + huge + ",k=" + huge,
                                         "compile vector_add --shape n=" + huge,
                                         "compile softmax --shape rows=2,cols=" + huge,
                                         "compile histogram --shape n=4294967296,contention=0"};
  for (const std::string& args : commands) {
    SCOPED_TRACE(args);
    const auto result = run_gmtune(args + " --arch sm_90a");
    EXPECT_EQ(result.status, 2) << result.err;
    EXPECT_EQ(line_count(result.err), 1) << result.err;
    EXPECT_TRUE(result.out.empty()) << result.out;
  }
}

TEST(CliBounds, GcSizesAreCli11SizeValues) {
  // gmtune refuses a cache in a directory others can write, such as /tmp itself.
  const auto dir = temp_path("gc");
  std::filesystem::create_directories(dir);
  std::filesystem::permissions(dir, std::filesystem::perms::owner_all);
  const auto db = dir / "gmjit.db";
  for (const std::string size : {"1M", "1MiB", "512kb", "2G", "0", "1048576"}) {
    const auto result = run_gmtune("gc --max-size " + size + " --db " + db.string());
    EXPECT_EQ(result.status, 0) << size << ": " << result.err;
  }
  for (const std::string size : {"lots", "-5", "1Q"}) {
    const auto result = run_gmtune("gc --max-size " + size + " --db " + db.string());
    EXPECT_EQ(result.status, 2) << size << ": " << result.out;
    EXPECT_EQ(line_count(result.err), 1) << result.err;
    EXPECT_NE(result.err.find("--max-size"), std::string::npos) << result.err;
  }
  std::filesystem::remove_all(dir);
}

TEST(CliBounds, ANegativeDeviceIsExitTwo) {
  const auto db = temp_path("device.db");
  const std::vector<std::string> commands{"tune vector_add --shape n=1024 --device -1",
                                         "sweep --dry-run --device -1 --db " + db.string()};
  for (const std::string& args : commands) {
    SCOPED_TRACE(args);
    const auto result = run_gmtune(args);
    EXPECT_EQ(result.status, 2) << result.err;
    EXPECT_EQ(line_count(result.err), 1) << result.err;
    EXPECT_NE(result.err.find("--device"), std::string::npos) << result.err;
  }
  EXPECT_FALSE(std::filesystem::exists(db));
}

TEST(CliBounds, LabelsFromAShapesFilePrintEscaped) {
  const auto shapes = temp_path("shapes.json");
  {
    std::ofstream out(shapes);
    out << R"({"format": "gmtune shapes v1", "sweeps": [{"kernel": "vector_add", "dtype": "fp32", "shapes": [)"
        << R"({"n": 1024, "from": "two\nlines \u001b[31mred\u001b[0m\ttab"}]}]})";
  }
  const auto db = temp_path("labels.db");
  const auto result = run_gmtune("sweep --dry-run --shapes " + shapes.string() + " --db " + db.string());
  ASSERT_EQ(result.status, 0) << result.err;
  EXPECT_EQ(line_count(result.out), 1) << result.out;
  EXPECT_EQ(result.out.find('\x1b'), std::string::npos) << "no escape sequence reaches the terminal";
  EXPECT_NE(result.out.find(R"(two\nlines \x1b[31mred\x1b[0m\ttab)"), std::string::npos) << result.out;
  std::filesystem::remove(shapes);
}

}  // namespace
}  // namespace gmjit
