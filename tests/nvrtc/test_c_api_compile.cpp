// gmjit_compile: what `gmtune compile --out` writes, through the C API, for sm_90a without a GPU.
#include "gmjit/gmjit.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "temp_dir.hpp"

namespace {

class CApiCompile : public gmjit::testing::TempDirTest {
 protected:
  CApiCompile() : TempDirTest("gmjit-c-api-compile") {}
};

TEST_F(CApiCompile, WritesSourcePtxCubinLogAndResourcesAndReturnsTheReport) {
  const char* shape_keys[] = {"n"};
  const int64_t shape_values[] = {1000};
  const char* config_keys[] = {"block", "items"};
  const int64_t config_values[] = {128, 2};
  const auto out = dir_ / "out";
  char* json = nullptr;
  ASSERT_EQ(gmjit_compile("vector_add", "fp32", shape_keys, shape_values, 1, config_keys, config_values, 2, "sm_90a",
                          out.c_str(), &json),
            GMJIT_OK)
      << gmjit_last_error();
  const std::string report(json);
  gmjit_free(json);
  const auto doc = nlohmann::json::parse(report);
  EXPECT_EQ(doc.at("kernel"), "vector_add");
  EXPECT_EQ(doc.at("arch"), "sm_90a");
  EXPECT_EQ(doc.at("config").at("block"), 128);
  EXPECT_EQ(doc.at("config").at("items"), 2);
  EXPECT_GT(doc.at("cubin_bytes").get<int>(), 0);

  std::set<std::string> extensions;
  for (const auto& entry : std::filesystem::directory_iterator(out)) {
    EXPECT_GT(entry.file_size(), 0u) << entry.path();
    extensions.insert(entry.path().extension().string());
  }
  for (const char* wanted : {".cu", ".ptx", ".cubin", ".log", ".json"}) EXPECT_TRUE(extensions.count(wanted)) << wanted;
  std::stringstream written;
  written << std::ifstream(out / "resources.json").rdbuf();
  EXPECT_EQ(written.str(), report);
}

TEST_F(CApiCompile, AValueOutsideTheDomainIsAUsageErrorAndWritesNothing) {
  const char* shape_keys[] = {"n"};
  const int64_t shape_values[] = {1000};
  const char* config_keys[] = {"block"};
  const int64_t config_values[] = {99999};
  const auto out = dir_ / "out";
  char* json = reinterpret_cast<char*>(0x1);
  EXPECT_EQ(gmjit_compile("vector_add", nullptr, shape_keys, shape_values, 1, config_keys, config_values, 1, "sm_90a",
                          out.c_str(), &json),
            GMJIT_ERROR_USAGE);
  EXPECT_EQ(json, nullptr);
  EXPECT_NE(std::string(gmjit_last_error()).find("99999"), std::string::npos) << gmjit_last_error();
  EXPECT_FALSE(std::filesystem::exists(out));
}

}  // namespace
