#pragma once
// A test fixture whose files live in a fresh private directory, removed after the test.

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cerrno>
#include <filesystem>
#include <string>
#include <system_error>

namespace gmjit::testing {

class TempDirTest : public ::testing::Test {
 protected:
  // `prefix` names the directory, /tmp/<prefix>-XXXXXX, so a leftover says which test left it.
  // Made in the constructor, so a derived fixture's SetUp can write there; a failure throws,
  // which gtest reports as the test's failure.
  explicit TempDirTest(const std::string& prefix) : dir_(make(prefix)) {}
  ~TempDirTest() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  const std::filesystem::path dir_;

 private:
  // mkdtemp makes the directory 0700, as the cache store requires of its own.
  static std::filesystem::path make(const std::string& prefix) {
    std::string pattern = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::system_error(errno, std::generic_category(), pattern);
    return pattern;
  }
};

}  // namespace gmjit::testing
