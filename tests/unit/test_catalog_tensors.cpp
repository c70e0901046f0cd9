// The self-describing catalog: every built-in's tensors (name, role, dtype, element count as an
// expression over the problem keys) through KernelInfo and `gmtune list --json`, and the one
// normalization of a problem that gmjit::validate exposes.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "cache_test_support.hpp"
#include "cli_runner.hpp"
#include "gmjit/kernels.hpp"
#include "templates/registry.hpp"

namespace gmjit {
namespace {

using cache_test::capture_error;
using nlohmann::json;

// What a binding does with the catalog's JSON alone: evaluates an element-count expression. The
// built-ins use names, integers and products.
std::int64_t evaluate(const json& e, const Shape& shape) {
  if (e.is_number_integer()) return e.get<std::int64_t>();
  if (e.is_string()) return shape.at(e.get<std::string>());
  EXPECT_TRUE(e.is_array() && e.at(0) == "*") << e.dump();
  std::int64_t product = 1;
  for (std::size_t i = 1; i < e.size(); ++i) product *= evaluate(e[i], shape);
  return product;
}

// name: role dtype elements, per tensor in launch order ("-": the problem's dtype).
const std::map<std::string, std::vector<std::string>> kExpected = {
    {"vector_add", {"a: input - \"n\"", "b: input - \"n\"", "c: output - \"n\""}},
    {"sgemm", {"A: input - [\"*\",\"m\",\"k\"]", "B: input - [\"*\",\"k\",\"n\"]", "C: output - [\"*\",\"m\",\"n\"]"}},
    {"gemm", {"A: input - [\"*\",\"m\",\"k\"]", "B: input - [\"*\",\"k\",\"n\"]", "C: output - [\"*\",\"m\",\"n\"]"}},
    {"transpose", {"in: input - [\"*\",\"rows\",\"cols\"]", "out: output - [\"*\",\"rows\",\"cols\"]"}},
    {"grayscale", {"rgb: input - [\"*\",3,\"h\",\"w\"]", "out: output - [\"*\",\"h\",\"w\"]"}},
    {"softmax", {"x: input - [\"*\",\"rows\",\"cols\"]", "y: output - [\"*\",\"rows\",\"cols\"]"}},
    {"rmsnorm", {"x: input - [\"*\",\"rows\",\"cols\"]", "weight: input - \"cols\"", "y: output - [\"*\",\"rows\",\"cols\"]"}},
    {"layernorm",
     {"x: input - [\"*\",\"rows\",\"cols\"]", "weight: input - \"cols\"", "bias: input - \"cols\"",
      "y: output - [\"*\",\"rows\",\"cols\"]"}},
    {"histogram", {"x: input u8 \"n\"", "counts: output u32 256"}},
    {"vector_sum", {"x: input fp32 \"n\"", "y: output fp32 1"}},
    {"prefix_sum", {"x: input - \"n\"", "y: output - \"n\""}},
};

Shape sample_shape(const KernelInfo& k) {
  Shape shape;
  std::int64_t value = 3;
  for (const auto& key : k.problem_keys) shape[key] = (value += 4);
  for (const auto& key : templates::find_kernel(k.name).flag_keys) shape[key] = 1;  // gemm's trans_b
  return shape;
}

TEST(CatalogTensors, EveryBuiltInDescribesItsTensorsAndNoWorkspace) {
  std::set<std::string> seen;
  for (const auto& k : list_kernels()) {
    if (k.user) continue;
    SCOPED_TRACE(k.name);
    ASSERT_TRUE(kExpected.count(k.name)) << "a built-in without an expected tensor description";
    seen.insert(k.name);
    std::vector<std::string> described;
    for (const auto& t : k.tensors) {
      described.push_back(t.name + ": " + (t.output ? "output" : "input") + " " + (t.dtype.empty() ? "-" : t.dtype) +
                          " " + json::parse(t.elements_expression).dump());
    }
    EXPECT_EQ(described, kExpected.at(k.name));
    // The callable, the descriptor and the expression agree; a binding needs only the last.
    const Shape shape = sample_shape(k);
    const auto& descriptor = templates::find_kernel(k.name);
    const auto args = descriptor.tensors(validate(k.name, shape).shape);
    ASSERT_EQ(args.size(), k.tensors.size());
    for (std::size_t i = 0; i < args.size(); ++i) {
      EXPECT_EQ(k.tensors[i].elements(shape), args[i].elements) << k.tensors[i].name;
      EXPECT_EQ(evaluate(json::parse(k.tensors[i].elements_expression), shape), args[i].elements);
      EXPECT_EQ(k.tensors[i].name, args[i].name);
      EXPECT_NE(k.tensors[i].name, "workspace");
    }
    EXPECT_EQ(capture_error([&] { k.tensors[0].elements({}); }).kind(), ErrorKind::usage) << "a shape without keys";
  }
  EXPECT_EQ(seen.size(), kExpected.size()) << "an expected built-in is missing from the catalog";
}

TEST(CatalogTensors, HistogramsContentionIsADataKeyNotATensorProperty) {
  for (const auto& k : list_kernels()) {
    if (k.name != "histogram") {
      EXPECT_TRUE(k.data_keys.empty()) << k.name;
      continue;
    }
    EXPECT_EQ(k.problem_keys, (std::vector<std::string>{"n"}));
    ASSERT_EQ(k.data_keys.size(), 2u);
    EXPECT_EQ(k.data_keys[0].name, "contention");
    EXPECT_EQ(k.data_keys[0].default_value, 1);
    EXPECT_FALSE(k.data_keys[0].doc.empty());
    EXPECT_EQ(k.tensors.at(0).elements({{"n", 1000}}), 1000) << "sized from n alone";
    EXPECT_EQ(k.tensors.at(1).elements({{"n", 1000}, {"contention", 90}}), 256);
  }
}

TEST(Validate, FillsTheDefaultDtypeAndDataKeys) {
  Problem p = validate("vector_add", {{"n", 10}});
  EXPECT_EQ(p.kernel, "vector_add");
  EXPECT_EQ(p.dtype, "fp32");
  EXPECT_EQ(p.shape, (Shape{{"n", 10}}));
  EXPECT_EQ(validate("softmax", {{"rows", 2}, {"cols", 3}}, "bf16").dtype, "bf16");

  p = validate("histogram", {{"n", 4096}});
  EXPECT_EQ(p.dtype, "u8");
  EXPECT_EQ(p.shape, (Shape{{"n", 4096}, {"contention", 1}, {"i64_counts", 0}})) << "the defaults";
  EXPECT_EQ(validate("histogram", {{"n", 4096}, {"contention", 90}}).shape,
            (Shape{{"n", 4096}, {"contention", 90}, {"i64_counts", 0}}));
  // Normalizing twice changes nothing, so launch, tune and the cache agree on one key.
  EXPECT_EQ(validate(p.kernel, p.shape, p.dtype).shape, p.shape);
}

TEST(Validate, RefusesWhatNoKernelTakesWithUsageErrors) {
  const auto message_of = [](auto call) {
    const Error e = capture_error(call);
    EXPECT_EQ(e.kind(), ErrorKind::usage);
    return e.message();
  };
  EXPECT_NE(message_of([] { validate("sgemv", {{"n", 1}}); }).find("unknown kernel 'sgemv'"), std::string::npos);
  EXPECT_NE(message_of([] { validate("sgemm", {{"m", 1}, {"n", 1}}); }).find("missing problem key 'k'"),
            std::string::npos);
  EXPECT_NE(message_of([] { validate("vector_add", {{"n", 1}, {"m", 1}}); }).find("has no problem key 'm'"),
            std::string::npos);
  EXPECT_NE(message_of([] { validate("vector_add", {{"n", 0}}); }).find("sizes must be positive"), std::string::npos);
  EXPECT_NE(message_of([] { validate("histogram", {{"n", 8}, {"contention", 0}}); }).find("sizes must be positive"),
            std::string::npos);
  EXPECT_NE(message_of([] { validate("histogram", {{"contention", 10}}); }).find("missing problem key 'n'"),
            std::string::npos)
      << "a data key does not stand in for a tensor's size";
  EXPECT_NE(message_of([] { validate("sgemm", {{"m", 1}, {"n", 1}, {"k", 1}}, "fp16"); }).find("supports dtypes fp32"),
            std::string::npos);
  EXPECT_NE(message_of([] { validate("sgemm", {{"m", 1}, {"n", 1}, {"k", 1}}, "fp64"); }).find("unknown dtype"),
            std::string::npos);
}

TEST(CliList, JsonDescribesTensorsAndDataKeys) {
  const auto result = testing::run_gmtune("list --json");
  ASSERT_EQ(result.status, 0) << result.err;
  const auto doc = json::parse(result.out);
  std::size_t builtins = 0;
  for (const auto& k : doc.at("kernels")) {
    const std::string name = k.at("name").get<std::string>();
    if (!kExpected.count(name)) continue;
    ++builtins;
    SCOPED_TRACE(name);
    std::vector<std::string> described;
    for (const auto& t : k.at("tensors")) {
      described.push_back(t.at("name").get<std::string>() + ": " + t.at("role").get<std::string>() + " " +
                          (t.at("dtype").is_null() ? "-" : t.at("dtype").get<std::string>()) + " " +
                          t.at("elements").dump());
    }
    EXPECT_EQ(described, kExpected.at(name));
    if (name == "histogram") {
      EXPECT_EQ(k.at("problem_keys"), json::array({"n"}));
      EXPECT_EQ(k.at("data_keys").at(0).at("name"), "contention");
      EXPECT_EQ(k.at("data_keys").at(0).at("default"), 1);
      // A binding sizes counts from the JSON alone, for any n.
      EXPECT_EQ(evaluate(k.at("tensors").at(1).at("elements"), {{"n", 12345}}), 256);
      EXPECT_EQ(k.at("data_keys").at(1).at("name"), "i64_counts");
      EXPECT_EQ(k.at("tensors").at(1).at("dtype_flag"), (json{{"key", "i64_counts"}, {"dtype", "i64"}}));
      EXPECT_FALSE(k.at("tensors").at(0).contains("dtype_flag"));
      const json wide = json::parse(describe_kernel_json("histogram", {{"n", 5}, {"i64_counts", 1}}));
      EXPECT_EQ(wide.at("tensors").at(1).at("resolved_dtype"), "i64");
      EXPECT_EQ(wide.at("tensors").at(0).at("resolved_dtype"), "u8");
      const json narrow = json::parse(describe_kernel_json("histogram", {{"n", 5}}));
      EXPECT_EQ(narrow.at("tensors").at(1).at("resolved_dtype"), "u32");
    } else {
      EXPECT_TRUE(k.at("data_keys").empty());
    }
  }
  EXPECT_EQ(builtins, kExpected.size());
  const auto text = testing::run_gmtune("list");
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("tensors: in x[n] u8, out counts[256] u32 (i64_counts=1: i64)"), std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("tensors: in rgb[3*h*w], out out[h*w]"), std::string::npos) << text.out;
}

}  // namespace
}  // namespace gmjit
