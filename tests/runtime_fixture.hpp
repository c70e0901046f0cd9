#pragma once
// A Runtime's tests, with and without a GPU: each starts from a cache file that does not exist
// yet, in a private directory of its own.

#include <filesystem>

#include "gmjit/runtime.hpp"
#include "temp_dir.hpp"

namespace gmjit::testing {

class RuntimeTest : public TempDirTest {
 protected:
  RuntimeTest() : TempDirTest("gmjit-runtime-test"), db_(dir_ / "gmjit.db") {}

  RuntimeOptions options(MissPolicy policy) const {
    RuntimeOptions o;
    o.db_path = db_.string();
    o.miss_policy = policy;
    return o;
  }

  const std::filesystem::path db_;
};

}  // namespace gmjit::testing
