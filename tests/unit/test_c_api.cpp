// The C API (gmjit/gmjit.h) without a device: statuses and the per-thread reason for bad input,
// null handles that are errors rather than crashes, and the catalog descriptions a binding builds on.
#include "gmjit/gmjit.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "gmjit/device.hpp"
#include "gmjit/gmjit.hpp"
#include "kernel_files.hpp"
#include "temp_dir.hpp"

namespace {

// Takes ownership of a string the C API returned.
std::string take(char* text) {
  std::string out = text ? text : "";
  gmjit_free(text);
  return out;
}

struct CShape {
  std::vector<const char*> keys;
  std::vector<int64_t> values;
  CShape(std::initializer_list<std::pair<const char*, int64_t>> pairs) {
    for (const auto& [k, v] : pairs) {
      keys.push_back(k);
      values.push_back(v);
    }
  }
};

nlohmann::json describe(const char* kernel, const CShape& shape, const char* dtype = nullptr) {
  char* json = nullptr;
  const auto status = gmjit_describe(kernel, dtype, shape.keys.data(), shape.values.data(), shape.keys.size(), &json);
  EXPECT_EQ(status, GMJIT_OK) << gmjit_last_error();
  return nlohmann::json::parse(take(json));
}

class CApi : public gmjit::testing::TempDirTest {
 protected:
  CApi() : TempDirTest("gmjit-c-api-test") {}
};

TEST_F(CApi, VersionsAgreeWithTheHeaderAndTheCppLibrary) {
  EXPECT_EQ(gmjit_api_version(), GMJIT_API_VERSION);
  EXPECT_STREQ(gmjit_version(), gmjit::version());
}

TEST_F(CApi, NullHandlesAndOutputsAreUsageErrorsNamingTheArgument) {
  EXPECT_EQ(gmjit_runtime_close(nullptr), GMJIT_ERROR_USAGE);
  EXPECT_STREQ(gmjit_last_error(), "usage error: runtime is null");
  EXPECT_EQ(gmjit_launch(nullptr, "vector_add", nullptr, nullptr, nullptr, 0, nullptr, 0, nullptr), GMJIT_ERROR_USAGE);
  EXPECT_NE(std::string(gmjit_last_error()).find("runtime is null"), std::string::npos);
  EXPECT_EQ(gmjit_runtime_open(0, nullptr, GMJIT_MISS_NEAREST, nullptr), GMJIT_ERROR_USAGE);
  EXPECT_EQ(gmjit_list_kernels(nullptr), GMJIT_ERROR_USAGE);
  char* json = reinterpret_cast<char*>(0x1);  // a stale value the call must clear
  EXPECT_EQ(gmjit_describe(nullptr, nullptr, nullptr, nullptr, 0, &json), GMJIT_ERROR_USAGE);
  EXPECT_EQ(json, nullptr);
  EXPECT_NE(std::string(gmjit_last_error()).find("kernel is null"), std::string::npos);
  EXPECT_EQ(gmjit_register_kernel(nullptr, "", nullptr), GMJIT_ERROR_USAGE);
  EXPECT_EQ(gmjit_compile("vector_add", nullptr, nullptr, nullptr, 1, nullptr, nullptr, 0, "sm_90a", nullptr, nullptr),
            GMJIT_ERROR_USAGE);
  EXPECT_NE(std::string(gmjit_last_error()).find("shape: keys or values are null"), std::string::npos);
}

TEST_F(CApi, TheLastErrorBelongsToTheThreadAndASuccessClearsIt) {
  ASSERT_EQ(gmjit_runtime_close(nullptr), GMJIT_ERROR_USAGE);
  std::string other_before, other_after;
  std::thread([&] {
    other_before = gmjit_last_error();
    char* json = nullptr;
    EXPECT_EQ(gmjit_list_kernels(&json), GMJIT_OK);
    gmjit_free(json);
    other_after = gmjit_last_error();
  }).join();
  EXPECT_EQ(other_before, "");
  EXPECT_EQ(other_after, "");
  EXPECT_STREQ(gmjit_last_error(), "usage error: runtime is null");
  char* json = nullptr;
  ASSERT_EQ(gmjit_list_kernels(&json), GMJIT_OK);
  gmjit_free(json);
  EXPECT_STREQ(gmjit_last_error(), "");
}

TEST_F(CApi, ListKernelsIsTheCatalog) {
  char* json = nullptr;
  ASSERT_EQ(gmjit_list_kernels(&json), GMJIT_OK);
  const auto doc = nlohmann::json::parse(take(json));
  const auto kernels = gmjit::list_kernels();
  ASSERT_EQ(doc.at("kernels").size(), kernels.size());
  for (std::size_t i = 0; i < kernels.size(); ++i) EXPECT_EQ(doc["kernels"][i].at("name"), kernels[i].name);
}

TEST_F(CApi, DescribeGivesEachTensorsRoleDtypeAndCountAtAShape) {
  const auto add = describe("vector_add", {{"n", 1023}}, "fp16");
  EXPECT_EQ(add.at("problem").at("dtype"), "fp16");
  ASSERT_EQ(add.at("tensors").size(), 3u);
  for (const auto& t : add["tensors"]) {
    EXPECT_EQ(t.at("count"), 1023);
    EXPECT_EQ(t.at("resolved_dtype"), "fp16");
  }
  EXPECT_EQ(add["tensors"][2].at("role"), "output");

  // A histogram resolves from n alone; its counts are u32 whatever the input dtype.
  const auto histogram = describe("histogram", {{"n", 1000}});
  EXPECT_EQ(histogram.at("problem").at("shape").at("n"), 1000);
  const auto& counts = histogram.at("tensors").back();
  EXPECT_EQ(counts.at("role"), "output");
  EXPECT_EQ(counts.at("resolved_dtype"), "u32");
  EXPECT_EQ(counts.at("count"), 256);

  // Without a shape: the kernel's entry alone.
  const auto sgemm = describe("sgemm", {});
  EXPECT_FALSE(sgemm.contains("problem"));
  EXPECT_EQ(sgemm.at("problem_keys"), nlohmann::json({"m", "n", "k"}));
  EXPECT_FALSE(sgemm.at("params").empty());
}

TEST_F(CApi, BadProblemsAreUsageErrorsWithTheCppMessage) {
  char* json = nullptr;
  const CShape unknown_key{{"rows", 4}};
  EXPECT_EQ(gmjit_describe("vector_add", nullptr, unknown_key.keys.data(), unknown_key.values.data(), 1, &json),
            GMJIT_ERROR_USAGE);
  EXPECT_EQ(json, nullptr);
  EXPECT_NE(std::string(gmjit_last_error()).find("rows"), std::string::npos) << gmjit_last_error();

  EXPECT_EQ(gmjit_describe("no_such_kernel", nullptr, nullptr, nullptr, 0, &json), GMJIT_ERROR_USAGE);
  EXPECT_NE(std::string(gmjit_last_error()).find("no_such_kernel"), std::string::npos) << gmjit_last_error();

  const CShape repeated{{"n", 4}, {"n", 8}};
  EXPECT_EQ(gmjit_describe("vector_add", nullptr, repeated.keys.data(), repeated.values.data(), 2, &json),
            GMJIT_ERROR_USAGE);
  EXPECT_NE(std::string(gmjit_last_error()).find("'n' repeats"), std::string::npos) << gmjit_last_error();

  gmjit_runtime* runtime = reinterpret_cast<gmjit_runtime*>(0x1);
  EXPECT_EQ(gmjit_runtime_open(0, nullptr, static_cast<gmjit_miss_policy>(99), &runtime), GMJIT_ERROR_USAGE);
  EXPECT_EQ(runtime, nullptr);
  EXPECT_EQ(gmjit_runtime_open(-1, nullptr, GMJIT_MISS_NEAREST, &runtime), GMJIT_ERROR_USAGE);
}

TEST_F(CApi, ALaunchWithTheWrongTensorsFailsBeforeTheDevice) {
  gmjit_runtime* runtime = nullptr;
  ASSERT_EQ(gmjit_runtime_open(0, (dir_ / "gmjit.db").c_str(), GMJIT_MISS_DEFAULT_CONFIG, &runtime), GMJIT_OK);
  const CShape shape{{"n", 1024}};
  const std::uint64_t two[] = {0x1000, 0x2000};
  EXPECT_EQ(gmjit_launch(runtime, "vector_add", nullptr, shape.keys.data(), shape.values.data(), 1, two, 2, nullptr),
            GMJIT_ERROR_USAGE);
  EXPECT_NE(std::string(gmjit_last_error()).find("3 tensors"), std::string::npos) << gmjit_last_error();
  EXPECT_EQ(gmjit_launch(runtime, "vector_add", nullptr, shape.keys.data(), shape.values.data(), 1, nullptr, 3, nullptr),
            GMJIT_ERROR_USAGE);
  EXPECT_NE(std::string(gmjit_last_error()).find("tensors is null"), std::string::npos);
  if (!gmjit::driver_status().available) {
    // Well-formed, so it reaches the driver, which is absent here: a status, not a crash.
    const std::uint64_t three[] = {0x1000, 0x2000, 0x3000};
    EXPECT_EQ(gmjit_launch(runtime, "vector_add", nullptr, shape.keys.data(), shape.values.data(), 1, three, 3, nullptr),
              GMJIT_ERROR_DRIVER);
    EXPECT_NE(std::string(gmjit_last_error()).find("driver error"), std::string::npos) << gmjit_last_error();
  }
  EXPECT_EQ(gmjit_runtime_close(runtime), GMJIT_OK);
}

TEST_F(CApi, RegistersAUserKernelFromAManifestFileAndDescribesIt) {
  const std::string manifest = gmjit::testing::write_user_manifest(dir_, "c_api_user");
  char* name = nullptr;
  ASSERT_EQ(gmjit_register_kernel_file(manifest.c_str(), &name), GMJIT_OK) << gmjit_last_error();
  EXPECT_EQ(take(name), "c_api_user");
  char* json = nullptr;
  ASSERT_EQ(gmjit_describe("c_api_user", nullptr, nullptr, nullptr, 0, &json), GMJIT_OK);
  EXPECT_EQ(nlohmann::json::parse(take(json)).at("name"), "c_api_user");

  EXPECT_EQ(gmjit_register_kernel("{}", "", &name), GMJIT_ERROR_USAGE);
  EXPECT_EQ(name, nullptr);
  EXPECT_EQ(gmjit_register_kernel_file((dir_ / "absent.json").c_str(), &name), GMJIT_ERROR_USAGE);
  EXPECT_NE(std::string(gmjit_last_error()).find("absent.json"), std::string::npos) << gmjit_last_error();
}

}  // namespace
