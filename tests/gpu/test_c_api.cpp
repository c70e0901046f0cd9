// The C API on a live device: a kernel launched by name through gmjit_launch with buffers sized
// from gmjit_describe matches the host reference (random nonzero inputs, NaN-poisoned output), and
// gmjit_tune records a winner that gmjit_resolve then serves from the cache.
#include "gmjit/gmjit.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/device.hpp"
#include "require_gpu.hpp"
#include "runtime_fixture.hpp"

namespace gmjit {
namespace {

std::string take(char* text) {
  std::string out = text ? text : "";
  gmjit_free(text);
  return out;
}

class CApiGpu : public testing::RuntimeTest {
 protected:
  void TearDown() override {
    if (runtime_) EXPECT_EQ(gmjit_runtime_close(runtime_), GMJIT_OK) << gmjit_last_error();
  }
  gmjit_runtime* open(gmjit_miss_policy policy) {
    EXPECT_EQ(gmjit_runtime_open(0, db_.c_str(), policy, &runtime_), GMJIT_OK) << gmjit_last_error();
    return runtime_;
  }
  gmjit_runtime* runtime_ = nullptr;
};

TEST_F(CApiGpu, VectorAddThroughTheCApiMatchesTheReference) {
  GMJIT_REQUIRE_DEVICE();
  detail::Context context(0);
  const char* keys[] = {"n"};
  const int64_t values[] = {(1 << 20) + 3};  // an odd tail
  char* json = nullptr;
  ASSERT_EQ(gmjit_describe("vector_add", "fp32", keys, values, 1, &json), GMJIT_OK) << gmjit_last_error();
  const auto description = nlohmann::json::parse(take(json));
  const auto& tensors = description.at("tensors");
  ASSERT_EQ(tensors.size(), 3u);

  std::mt19937 rng(7);
  std::uniform_real_distribution<float> value(0.25f, 1.0f);
  std::vector<std::vector<float>> inputs;
  std::vector<detail::DeviceBuffer> buffers;
  for (const auto& t : tensors) {
    const auto count = t.at("count").get<std::size_t>();
    buffers.emplace_back(count * sizeof(float));
    if (t.at("role") == "input") {
      inputs.emplace_back(count);
      for (auto& x : inputs.back()) x = (rng() & 1) ? value(rng) : -value(rng);
      buffers.back().upload(inputs.back().data(), count * sizeof(float));
    } else {
      buffers.back().fill_bytes(0xFF, nullptr);  // NaN
    }
  }
  std::vector<uint64_t> pointers;
  for (const auto& b : buffers) pointers.push_back(static_cast<uint64_t>(b.get()));

  open(GMJIT_MISS_DEFAULT_CONFIG);
  ASSERT_EQ(gmjit_launch(runtime_, "vector_add", "fp32", keys, values, 1, pointers.data(), pointers.size(), nullptr),
            GMJIT_OK)
      << gmjit_last_error();
  context.synchronize();
  std::vector<float> got(values[0]);
  buffers.back().download(got.data(), got.size() * sizeof(float));
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double want = static_cast<double>(inputs[0][i]) + inputs[1][i];
    if (!(std::fabs(got[i] - want) <= 1e-6 * std::fabs(want))) ++wrong;
  }
  EXPECT_EQ(wrong, 0u);

  ASSERT_EQ(gmjit_resolve(runtime_, "vector_add", "fp32", keys, values, 1, &json), GMJIT_OK) << gmjit_last_error();
  EXPECT_EQ(nlohmann::json::parse(take(json)).at("source"), "default_config");
}

TEST_F(CApiGpu, TuneRecordsAWinnerThatResolveServesFromTheCache) {
  GMJIT_REQUIRE_DEVICE();
  const char* keys[] = {"n"};
  const int64_t values[] = {1 << 22};
  open(GMJIT_MISS_FAIL);
  char* json = nullptr;
  ASSERT_EQ(gmjit_tune(runtime_, "vector_add", nullptr, keys, values, 1, "model", 4, 0, &json), GMJIT_OK)
      << gmjit_last_error();
  const auto report = nlohmann::json::parse(take(json));
  ASSERT_FALSE(report.at("winner").is_null());
  const auto winner = report.at("trials").at(report.at("winner").get<std::size_t>()).at("config");
  EXPECT_GE(report.at("evaluations").get<int>(), 1);
  EXPECT_LE(report.at("evaluations").get<int>(), 4);

  gmjit_runtime* fresh = nullptr;
  ASSERT_EQ(gmjit_runtime_open(0, db_.c_str(), GMJIT_MISS_FAIL, &fresh), GMJIT_OK);
  ASSERT_EQ(gmjit_resolve(fresh, "vector_add", nullptr, keys, values, 1, &json), GMJIT_OK) << gmjit_last_error();
  const auto resolution = nlohmann::json::parse(take(json));
  EXPECT_EQ(resolution.at("source"), "cache");
  EXPECT_EQ(resolution.at("config"), winner);
  EXPECT_EQ(gmjit_runtime_close(fresh), GMJIT_OK);
}

}  // namespace
}  // namespace gmjit
