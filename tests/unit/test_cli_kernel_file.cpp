// User kernels reach every gmtune command: --kernel-file MANIFEST (before or after the
// subcommand, repeatable) and GMJIT_KERNEL_PATH register manifests before the command runs, and a
// bad manifest is a usage error naming the file and the field. Needs neither GPU nor NVRTC.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <utility>

#include "cli_runner.hpp"
#include "kernel_files.hpp"
#include "temp_dir.hpp"

namespace gmjit {
namespace {

namespace fs = std::filesystem;
using testing::line_count;
using testing::run_gmtune;
using testing::write_user_manifest;

class CliKernelFile : public testing::TempDirTest {
 protected:
  CliKernelFile() : TempDirTest("gmjit-cli-kernel-file") {}

  // Every command reads or creates caches only here, never the user's.
  std::string env(const std::string& more = {}) const {
    return "GMJIT_CACHE=" + (dir_ / "cache" / "gmjit.db").string() + " " + more;
  }

  // The summary of each kernel `gmtune list --json` lists, by name.
  std::map<std::string, std::string> listed(const std::string& arguments, const std::string& environment = {}) {
    const auto result = run_gmtune(arguments, env(environment));
    EXPECT_EQ(result.status, 0) << arguments << ": " << result.err;
    std::map<std::string, std::string> kernels;
    if (result.status != 0) return kernels;
    const auto doc = nlohmann::json::parse(result.out);
    for (const auto& k : doc["kernels"]) {
      kernels[k["name"].get<std::string>()] = k["summary"].get<std::string>();
    }
    return kernels;
  }
};

TEST_F(CliKernelFile, ListShowsKernelFilesGivenBeforeOrAfterTheSubcommand) {
  const std::string mine = write_user_manifest(dir_, "mine");
  const std::string other = write_user_manifest(dir_, "other");
  EXPECT_EQ(listed("list --json").count("mine"), 0u);
  EXPECT_EQ(listed("list --json --kernel-file " + mine).count("mine"), 1u);
  EXPECT_EQ(listed("--kernel-file " + mine + " list --json").count("mine"), 1u);
  const auto both = listed("list --json --kernel-file " + mine + " --kernel-file " + other);
  EXPECT_EQ(both.count("mine"), 1u);
  EXPECT_EQ(both.count("other"), 1u);
  EXPECT_EQ(both.count("sgemm"), 1u) << "the built-ins stay";
  const auto text = run_gmtune("list --kernel-file " + mine, env());
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("mine  (user/mine.cuh)"), std::string::npos) << text.out;
}

TEST_F(CliKernelFile, KernelPathRegistersEachManifestAndTheCommandLineWins) {
  fs::create_directories(dir_ / "env");
  const std::string mine = write_user_manifest(dir_ / "env", "mine", [](auto& m) { m["summary"] = "from the path"; });
  const std::string other = write_user_manifest(dir_ / "env", "other");
  const auto from_path = listed("list --json", "GMJIT_KERNEL_PATH=" + mine + "::" + other + ":");
  EXPECT_EQ(from_path.count("other"), 1u);
  ASSERT_EQ(from_path.count("mine"), 1u);
  EXPECT_EQ(from_path.at("mine"), "from the path");

  const std::string again = write_user_manifest(dir_, "mine", [](auto& m) { m["summary"] = "from the command"; });
  const auto both = listed("list --json --kernel-file " + again, "GMJIT_KERNEL_PATH=" + mine);
  ASSERT_EQ(both.count("mine"), 1u);
  EXPECT_EQ(both.at("mine"), "from the command");
}

TEST_F(CliKernelFile, ABadManifestIsUsageNamingTheFileAndTheField) {
  const std::string bad = write_user_manifest(dir_, "bad", [](auto& m) { m["tolerance"]["fp32"] = 0; });
  fs::create_directories(dir_ / "shapes");
  const std::string shapes = (dir_ / "shapes" / "bad.json").string();
  std::ofstream(shapes) << R"({"sweeps": [{"kernel": "bad", "dtype": "fp32", "shapes": [{"n": 4096}]}]})";
  const std::string commands[] = {"list", "list --json", "compile bad --shape n=64 --arch sm_90a",
                                  "tune bad --shape n=64 --no-record", "sweep --shapes " + shapes + " --dry-run",
                                  "show"};
  for (const auto& command : commands) {
    SCOPED_TRACE(command);
    for (const auto& [arguments, environment] :
         {std::pair<std::string, std::string>{command + " --kernel-file " + bad, ""},
          {command, "GMJIT_KERNEL_PATH=" + bad}}) {
      const auto result = run_gmtune(arguments, env(environment));
      EXPECT_EQ(result.status, 2) << environment << " " << arguments;
      EXPECT_EQ(line_count(result.err), 1) << result.err;
      EXPECT_NE(result.err.find(bad + ": kernel manifest: tolerance.fp32"), std::string::npos) << result.err;
      EXPECT_EQ(result.err.find("GMJIT_KERNEL_PATH") != std::string::npos, !environment.empty()) << result.err;
      EXPECT_TRUE(result.out.empty()) << result.out;
    }
  }
  EXPECT_FALSE(fs::exists(dir_ / "cache")) << "a refused command touched the cache";

  const std::string missing = (dir_ / "absent.json").string();
  const auto absent = run_gmtune("list --kernel-file " + missing, env());
  EXPECT_EQ(absent.status, 2);
  EXPECT_EQ(line_count(absent.err), 1) << absent.err;
  EXPECT_NE(absent.err.find(missing), std::string::npos) << absent.err;

  std::ofstream(dir_ / "garbage.json") << "{\"name\": ";
  const auto garbage = run_gmtune("list --kernel-file " + (dir_ / "garbage.json").string(), env());
  EXPECT_EQ(garbage.status, 2);
  EXPECT_EQ(line_count(garbage.err), 1) << garbage.err;
  EXPECT_NE(garbage.err.find("garbage.json: kernel manifest: not valid JSON"), std::string::npos) << garbage.err;
}

TEST_F(CliKernelFile, TuneNoRecordTakesNoCacheFile) {
  const auto result = run_gmtune("tune vector_add --shape n=64 --no-record --db " + (dir_ / "x.db").string(), env());
  EXPECT_EQ(result.status, 2) << result.err;
  EXPECT_NE(result.err.find("--db excludes --no-record"), std::string::npos) << result.err;
  EXPECT_FALSE(fs::exists(dir_ / "x.db"));
}

}  // namespace
}  // namespace gmjit
