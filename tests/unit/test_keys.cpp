#include <gtest/gtest.h>

#include "templates/registry.hpp"
#include "cache/keys.hpp"

namespace gmjit {
namespace {

TEST(Keys, ProblemKeyChangesWithEveryPart) {
  const Shape shape{{"m", 16}, {"n", 4096}, {"k", 4096}};
  const std::string hash = templates::template_hash("gmjit/sgemm.cuh");
  const std::string key = cache::problem_key("sgemm", hash, "fp32", cache::kRowMajor, shape);
  EXPECT_EQ(key, cache::problem_key("sgemm", hash, "fp32", cache::kRowMajor, shape));
  EXPECT_NE(key, cache::problem_key("sgemm", hash, "fp16", cache::kRowMajor, shape));
  EXPECT_NE(key, cache::problem_key("sgemm", hash, "fp32", "col_major", shape));
  EXPECT_NE(key, cache::problem_key("vector_add", hash, "fp32", cache::kRowMajor, shape));
  Shape other = shape;
  other["m"] = 17;
  EXPECT_NE(key, cache::problem_key("sgemm", hash, "fp32", cache::kRowMajor, other));
}

TEST(Keys, OneTemplateByteChangesTheProblemKey) {
  const Shape shape{{"n", 1024}};
  const std::string name = "gmjit/vector_add.cuh";
  const std::string original = *templates::find_header(name);
  const auto key_now = [&] {
    return cache::problem_key("vector_add", templates::template_hash(name), "fp32", cache::kRowMajor, shape);
  };
  const std::string before = key_now();
  std::string edited = original;
  edited.back() = edited.back() == '\n' ? ' ' : '\n';
  templates::register_header(name, edited);
  const std::string after = key_now();
  templates::register_header(name, original);
  EXPECT_NE(before, after);
  EXPECT_EQ(before, key_now());
}

}  // namespace
}  // namespace gmjit
