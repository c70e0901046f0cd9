#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "codegen/compiler.hpp"
#include "gmjit/error.hpp"
#include "gmjit/kernels.hpp"
#include "templates/manifest.hpp"
#include "templates/registry.hpp"

namespace gmjit::templates {
namespace {

using nlohmann::json;

constexpr const char* kSource =
    "#pragma once\nnamespace demo { template <typename T, int B> __global__ void k() {} }\n";

// A complete, valid manifest the tests below change one field at a time.
json base_manifest(const std::string& name = "demo_scale") {
  json manifest = json::parse(R"({
    "name": "demo_scale",
    "summary": "y = a * x",
    "header": "demo/scale.cuh",
    "problem_keys": ["n", "m"],
    "dtypes": ["fp32", "fp16"],
    "params": [{"name": "block", "values": [64, 128, 256], "doc": "threads per block"},
               {"name": "items", "values": [1, 2, 4]}],
    "default_config": {"block": 128},
    "constraints": [{"rule": ["<=", ["*", "block", "items"], 256], "message": "block * items must be <= 256"}],
    "name_expression": "demo::scale<{T}, {block}, {items}>",
    "geometry": {"grid": [["ceil_div", "n", ["*", "block", "items"]], "m"], "block": ["block"],
                 "shared_bytes": ["*", "block", "elem_bytes"]},
    "tensors": [{"name": "x", "elements": ["*", "n", "m"], "output": false},
                {"name": "y", "elements": ["*", "n", "m"], "output": true}],
    "scalars": [{"name": "count", "type": "i64", "value": ["*", "n", "m"]}],
    "reference": {"name_expression": "demo::scale_reference<{T}>", "grid": [["ceil_div", "n", 256]], "block": [256]},
    "tolerance": {"fp32": 1e-6, "fp16": 1e-3}
  })");
  manifest["name"] = name;
  return manifest;
}

KernelDescriptor parse(const json& manifest) { return parse_manifest(manifest.dump(), kSource); }

std::string usage_message(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::usage) << e.what();
    return e.message();
  }
  ADD_FAILURE() << "no usage error";
  return {};
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

const std::string kBrokenManifest = std::string(GMJIT_SOURCE_DIR) + "/tests/data/broken/broken.json";

TEST(Manifest, ParsesEveryField) {
  const auto manifest = base_manifest();
  const KernelDescriptor d = parse(manifest);
  EXPECT_EQ(d.name, "demo_scale");
  EXPECT_EQ(d.summary, "y = a * x");
  EXPECT_EQ(d.header, "demo/scale.cuh");
  EXPECT_EQ(d.problem_keys, (std::vector<std::string>{"n", "m"}));
  EXPECT_EQ(d.dtypes, (std::vector<std::string>{"fp32", "fp16"}));
  ASSERT_EQ(d.params.size(), 2u);
  EXPECT_EQ(d.params[0].name, "block");
  EXPECT_EQ(d.params[0].values, (std::vector<std::int64_t>{64, 128, 256}));
  EXPECT_EQ(d.params[0].doc, "threads per block");
  EXPECT_EQ(d.params[1].doc, "");
  EXPECT_EQ(d.default_config, (Config{{"block", 128}, {"items", 1}})) << "unlisted parameters take their first value";
  EXPECT_EQ(d.constraints_doc, "block * items must be <= 256");
  EXPECT_EQ(d.manifest_json, manifest.dump());
  EXPECT_EQ(d.header_source, kSource);
  EXPECT_EQ(d.reference_header, "demo/scale.cuh") << "the CUDA reference lives in the user's header";
  EXPECT_FALSE(d.host_reference);
  EXPECT_DOUBLE_EQ(d.tolerance(dtype_info("fp32"), {}), 1e-6);
  EXPECT_DOUBLE_EQ(d.tolerance(dtype_info("fp16"), {}), 1e-3);
}

TEST(Manifest, OptionalFieldsHaveDefaults) {
  json manifest = base_manifest();
  for (const char* field : {"summary", "params", "default_config", "constraints", "scalars", "reference"}) {
    manifest.erase(field);
  }
  manifest["name_expression"] = "demo::scale<{T}>";
  manifest["geometry"] = json::parse(R"({"grid": ["n"], "block": [32]})");
  const KernelDescriptor d = parse(manifest);
  EXPECT_TRUE(d.params.empty());
  EXPECT_EQ(all_configs(d).size(), 1u);
  EXPECT_EQ(d.constraints_doc, "none beyond the domains");
  EXPECT_FALSE(d.reference_expression);
  EXPECT_FALSE(d.reference_geometry);
  detail::KernelArgs args;
  d.add_scalars(args, {{"n", 4}, {"m", 2}});
  EXPECT_EQ(args.size(), 0u);
  const auto g = d.geometry({}, {{"n", 4}, {"m", 2}}, dtype_info("fp32"));
  EXPECT_EQ(g.dynamic_shared_bytes, 0u);
  EXPECT_EQ(g.grid[1], 1u);
}

struct BadCase {
  const char* field;  // what the message must name, as "kernel manifest: FIELD: "
  std::function<void(json&)> change;
};

TEST(Manifest, EveryValidationErrorNamesItsField) {
  const std::vector<BadCase> cases = {
      {"name", [](json& j) { j.erase("name"); }},
      {"name", [](json& j) { j["name"] = "9lives"; }},
      {"name", [](json& j) { j["name"] = 3; }},
      {"paramz", [](json& j) { j["paramz"] = json::array(); }},
      {"summary", [](json& j) { j["summary"] = 1; }},
      {"header", [](json& j) { j.erase("header"); }},
      {"header", [](json& j) { j["header"] = "gmjit/mine.cuh"; }},
      {"header", [](json& j) { j["header"] = "/abs/olute.cuh"; }},
      {"header", [](json& j) { j["header"] = "with space.cuh"; }},
      {"header_file", [](json& j) { j["header_file"] = 7; }},
      {"problem_keys", [](json& j) { j["problem_keys"] = json::array(); }},
      {"problem_keys", [](json& j) { j["problem_keys"] = "n"; }},
      {"problem_keys[0]", [](json& j) { j["problem_keys"] = json::array({1}); }},
      {"problem_keys[1]",
       [](json& j) {
         j["problem_keys"] = json::array({"n", "n"});
       }},
      {"problem_keys[0]", [](json& j) { j["problem_keys"] = json::array({"elem_bytes"}); }},
      {"dtypes", [](json& j) { j["dtypes"] = json::array(); }},
      {"dtypes[1]",
       [](json& j) {
         j["dtypes"] = json::array({"fp32", "fp64"});
       }},
      {"dtypes[1]",
       [](json& j) {
         j["dtypes"] = json::array({"fp32", "fp32"});
       }},
      {"params", [](json& j) { j["params"] = json::object(); }},
      {"params[0]", [](json& j) { j["params"][0] = "block"; }},
      {"params[0].name", [](json& j) { j["params"][0].erase("name"); }},
      {"params[0].name", [](json& j) { j["params"][0]["name"] = "T"; }},
      {"params[1].name", [](json& j) { j["params"][1]["name"] = "n"; }},
      {"params[1].name", [](json& j) { j["params"][1]["name"] = "block"; }},
      {"params[0].values", [](json& j) { j["params"][0]["values"] = json::array(); }},
      {"params[0].values[1]",
       [](json& j) {
         j["params"][0]["values"] = json::array({64, "x"});
       }},
      {"params[0].values[1]",
       [](json& j) {
         j["params"][0]["values"] = json::array({64, 1.5});
       }},
      {"params[0].values[1]",
       [](json& j) {
         j["params"][0]["values"] = json::array({64, 64});
       }},
      {"params[0].doc", [](json& j) { j["params"][0]["doc"] = false; }},
      {"params[0].range", [](json& j) { j["params"][0]["range"] = 1; }},
      {"default_config", [](json& j) { j["default_config"] = json::array(); }},
      {"default_config.block", [](json& j) { j["default_config"]["block"] = 7; }},
      {"default_config.block", [](json& j) { j["default_config"]["block"] = "128"; }},
      {"default_config.warps", [](json& j) { j["default_config"]["warps"] = 1; }},
      {"constraints[0].rule", [](json& j) { j["constraints"][0].erase("rule"); }},
      {"constraints[0].rule[0]",
       [](json& j) {
         j["constraints"][0]["rule"] = json::array({"**", "n", 2});
       }},
      {"constraints[0].rule",
       [](json& j) {
         j["constraints"][0]["rule"] = json::array({"ceil_div", "n"});
       }},
      {"constraints[0].rule",
       [](json& j) {
         j["constraints"][0]["rule"] = json::array({"not", 1, 2});
       }},
      {"constraints[0].rule", [](json& j) { j["constraints"][0]["rule"] = json::array(); }},
      {"constraints[0].rule", [](json& j) { j["constraints"][0]["rule"] = true; }},
      {"constraints[0].rule[2]",
       [](json& j) {
         j["constraints"][0]["rule"] = json::array({"<", "n", "blok"});
       }},
      {"constraints[0].rule[1]",
       [](json& j) {
         j["constraints"][0]["rule"] = json::array({"<", "elem_bytes", 4});
       }},
      {"constraints[0].rule[2][1]",
       [](json& j) {
         j["constraints"][0]["rule"] = json::array({"<", "n", json::array({"-", 2.5})});
       }},
      {"constraints[0].message", [](json& j) { j["constraints"][0].erase("message"); }},
      {"constraints[0].message", [](json& j) { j["constraints"][0]["message"] = ""; }},
      {"name_expression", [](json& j) { j.erase("name_expression"); }},
      {"name_expression", [](json& j) { j["name_expression"] = "demo::scale<{T}, {blok}>"; }},
      {"name_expression", [](json& j) { j["name_expression"] = "demo::scale<{T}, {}>"; }},
      {"name_expression", [](json& j) { j["name_expression"] = "demo::scale<{1}>"; }},
      {"name_expression", [](json& j) { j["name_expression"] = "demo::scale<{T:d}>"; }},
      {"name_expression", [](json& j) { j["name_expression"] = "demo::scale<{T>"; }},
      {"name_expression", [](json& j) { j["name_expression"] = "demo::scale<{elem_bytes}>"; }},
      {"geometry", [](json& j) { j.erase("geometry"); }},
      {"geometry.grid", [](json& j) { j["geometry"].erase("grid"); }},
      {"geometry.grid", [](json& j) { j["geometry"]["grid"] = json::array(); }},
      {"geometry.grid",
       [](json& j) {
         j["geometry"]["grid"] = json::array({1, 1, 1, 1});
       }},
      {"geometry.block[0][2]",
       [](json& j) {
         j["geometry"]["block"] = json::array({json::array({"*", "block", 1.5})});
       }},
      {"geometry.shared_bytes", [](json& j) { j["geometry"]["shared_bytes"] = "smem"; }},
      {"geometry.cluster", [](json& j) { j["geometry"]["cluster"] = json::array({2}); }},
      {"tensors", [](json& j) { j["tensors"] = json::array(); }},
      {"tensors", [](json& j) { j["tensors"][1]["output"] = false; }},
      {"tensors[0].name", [](json& j) { j["tensors"][0]["name"] = "a b"; }},
      {"tensors[1].name", [](json& j) { j["tensors"][1]["name"] = "x"; }},
      {"tensors[0].elements", [](json& j) { j["tensors"][0]["elements"] = "block"; }},
      {"tensors[0].elements", [](json& j) { j["tensors"][0].erase("elements"); }},
      {"tensors[0].output", [](json& j) { j["tensors"][0]["output"] = 0; }},
      {"tensors[2]",
       [](json& j) {
         j["tensors"].push_back({{"name", "z"}, {"elements", "n"}, {"output", false}});
       }},
      {"scalars[0].name", [](json& j) { j["scalars"][0]["name"] = "x"; }},
      {"scalars[0].type", [](json& j) { j["scalars"][0]["type"] = "u8"; }},
      {"scalars[0].value", [](json& j) { j["scalars"][0]["value"] = "items"; }},
      {"scalars[0].value", [](json& j) { j["scalars"][0]["value"] = 18446744073709551615ull; }},
      {"reference", [](json& j) { j["reference"] = "demo::ref"; }},
      {"reference.name_expression", [](json& j) { j["reference"]["name_expression"] = "demo::ref<{block}>"; }},
      {"reference.grid[0]", [](json& j) { j["reference"]["grid"] = json::array({"block"}); }},
      {"reference.block", [](json& j) { j["reference"].erase("block"); }},
      {"reference.shared_bytes", [](json& j) { j["reference"]["shared_bytes"] = 0; }},
      {"tolerance", [](json& j) { j["tolerance"] = 1e-6; }},
      {"tolerance.fp16", [](json& j) { j["tolerance"].erase("fp16"); }},
      {"tolerance.fp32", [](json& j) { j["tolerance"]["fp32"] = -1; }},
      {"tolerance.fp32", [](json& j) { j["tolerance"]["fp32"] = "tight"; }},
      {"tolerance.bf16", [](json& j) { j["tolerance"]["bf16"] = 1e-2; }},
  };
  for (const auto& c : cases) {
    json manifest = base_manifest();
    c.change(manifest);
    SCOPED_TRACE(manifest.dump());
    const std::string message = usage_message([&] { parse(manifest); });
    EXPECT_EQ(message.rfind(std::string("kernel manifest: ") + c.field + ": ", 0), 0u)
        << "expected field " << c.field << ", got: " << message;
  }
  EXPECT_NE(usage_message([] { parse_manifest("{\"name\": ", kSource); }).find("not valid JSON"), std::string::npos);
  EXPECT_NE(usage_message([] { parse_manifest("[1]", kSource); }).find("(top level)"), std::string::npos);
  EXPECT_NE(usage_message([] { parse_manifest(base_manifest().dump(), ""); }).find("header: "), std::string::npos);
}

TEST(Manifest, UnknownNamesListWhatTheFieldMayUse) {
  json manifest = base_manifest();
  manifest["tensors"][0]["elements"] = "block";
  const std::string message = usage_message([&] { parse(manifest); });
  EXPECT_NE(message.find("unknown name 'block' (this field may use: n, m)"), std::string::npos) << message;
}

// Evaluates `expression` through a scalar argument, which may take any 64-bit value.
std::int64_t evaluate(const json& expression, const Shape& shape = {{"n", 10}, {"m", 3}}) {
  json manifest = base_manifest();
  manifest["scalars"] = json::array({{{"name", "v"}, {"type", "i64"}, {"value", expression}}});
  const KernelDescriptor d = parse(manifest);
  detail::KernelArgs args;
  d.add_scalars(args, shape);
  EXPECT_EQ(args.size(), 1u);
  long long value = 0;
  std::memcpy(&value, args.pointers()[0], sizeof value);
  return value;
}

TEST(Manifest, ExpressionsEvaluateEveryOperation) {
  const std::vector<std::pair<const char*, std::int64_t>> cases = {
      {R"(42)", 42},
      {R"("n")", 10},
      {R"(["+", "n", "m", 1])", 14},
      {R"(["-", "n"])", -10},
      {R"(["-", "n", "m"])", 7},
      {R"(["*", "n", "m", 2])", 60},
      {R"(["/", "n", "m"])", 3},
      {R"(["/", ["-", "n"], "m"])", -3},
      {R"(["%", "n", "m"])", 1},
      {R"(["ceil_div", "n", "m"])", 4},
      {R"(["ceil_div", "n", 5])", 2},
      {R"(["ceil_div", ["-", "n"], "m"])", -3},
      {R"(["ceil_div", ["-", "n"], ["-", "m"]])", 4},
      {R"(["min", "n", "m", 5])", 3},
      {R"(["max", "m", "n", 5])", 10},
      {R"(["<", "m", "n"])", 1},
      {R"(["<", "n", "m"])", 0},
      {R"(["<=", "n", 10])", 1},
      {R"([">", "n", 10])", 0},
      {R"([">=", "n", 10])", 1},
      {R"(["==", "n", 10])", 1},
      {R"(["!=", "n", 10])", 0},
      {R"(["and", 1, ["<", "m", "n"], 7])", 1},
      {R"(["and", 1, 0])", 0},
      {R"(["or", 0, 0])", 0},
      {R"(["or", 0, 5])", 1},
      {R"(["not", 0])", 1},
      {R"(["not", 7])", 0},
      // Short-circuit: the division by zero is never evaluated.
      {R"(["and", ["!=", "m", 3], ["/", "n", 0]])", 0},
      {R"(["or", 1, ["/", "n", 0]])", 1},
      {R"(["*", ["ceil_div", "n", 4], ["min", "m", 2], ["+", 1, ["==", "n", 10]]])", 12},
  };
  for (const auto& [text, expected] : cases) EXPECT_EQ(evaluate(json::parse(text)), expected) << text;
}

TEST(Manifest, EvaluationErrorsNameTheFieldAndTheValues) {
  const std::string zero = usage_message([] { evaluate(json::parse(R"(["/", "n", ["-", "m", "m"]])")); });
  EXPECT_NE(zero.find("scalars[0].value"), std::string::npos) << zero;
  EXPECT_NE(zero.find("division by zero"), std::string::npos) << zero;
  EXPECT_NE(zero.find("m=3,n=10"), std::string::npos) << zero;
  EXPECT_NE(usage_message([] { evaluate(json::parse(R"(["*", "n", 4611686018427387904])")); }).find("overflow"),
            std::string::npos);
  EXPECT_NE(usage_message([] { evaluate(json::parse(R"(["%", "n", 0])")); }).find("division by zero"),
            std::string::npos);
  EXPECT_NE(usage_message([] { evaluate(json::parse(R"(["-", ["-", -9223372036854775807, 1]])")); }).find("overflow"),
            std::string::npos);
}

TEST(Manifest, ScalarsTakeTheirDeclaredTypes) {
  json manifest = base_manifest();
  manifest["scalars"] = json::parse(R"([{"name": "a", "type": "i32", "value": "n"},
                                        {"name": "b", "type": "i64", "value": ["*", "n", 1099511627776]},
                                        {"name": "c", "type": "f32", "value": ["-", "m"]}])");
  const KernelDescriptor d = parse(manifest);
  detail::KernelArgs args;
  d.add_scalars(args, {{"n", 10}, {"m", 3}});
  ASSERT_EQ(args.size(), 3u);
  int a = 0;
  long long b = 0;
  float c = 0;
  std::memcpy(&a, args.pointers()[0], sizeof a);
  std::memcpy(&b, args.pointers()[1], sizeof b);
  std::memcpy(&c, args.pointers()[2], sizeof c);
  EXPECT_EQ(a, 10);
  EXPECT_EQ(b, 10995116277760LL);
  EXPECT_EQ(c, -3.0f);
  detail::KernelArgs big;
  const std::string message = usage_message([&] { d.add_scalars(big, {{"n", 1LL << 31}, {"m", 3}}); });
  EXPECT_NE(message.find("scalars[0].value"), std::string::npos) << message;
  EXPECT_NE(message.find("i32"), std::string::npos) << message;
}

TEST(Manifest, NameExpressionsFormatNamedPlaceholders) {
  json manifest = base_manifest();
  manifest["name_expression"] = "demo::scale<{T}, {block}, {items}, {n}> /* {dtype} {block:#x} */";
  const KernelDescriptor d = parse(manifest);
  EXPECT_EQ(d.name_expression({{"block", 128}, {"items", 2}}, {{"n", 10}, {"m", 3}}, dtype_info("fp16")),
            "demo::scale<__half, 128, 2, 10> /* fp16 0x80 */");
  EXPECT_EQ(d.reference_expression(dtype_info("fp32"), {}), "demo::scale_reference<float>");
  const auto generated = codegen::specialize(d, {{"n", 10}, {"m", 3}}, "fp32", d.default_config);
  EXPECT_EQ(generated.name_expression, "demo::scale<float, 128, 1, 10> /* fp32 0x80 */");
  EXPECT_NE(generated.source.find("#include \"demo/scale.cuh\""), std::string::npos);
  const auto reference = codegen::specialize_reference(d, {{"n", 10}, {"m", 3}}, "fp16");
  EXPECT_EQ(reference.header, "demo/scale.cuh");
  EXPECT_EQ(reference.name_expression, "demo::scale_reference<__half>");
}

TEST(Manifest, ConstraintsRejectConfigsWhoseRuleIsZero) {
  json manifest = base_manifest();
  manifest["constraints"].push_back({{"rule", json::parse(R"(["==", ["%", "n", ["*", "block", "items"]], 0])")},
                                     {"message", "n must be whole blocks"}});
  const KernelDescriptor d = parse(manifest);
  EXPECT_EQ(d.constraints_doc, "block * items must be <= 256; n must be whole blocks");
  const Shape shape{{"n", 512}, {"m", 1}};
  EXPECT_EQ(d.violation({{"block", 128}, {"items", 2}}, shape), "");
  EXPECT_EQ(d.violation({{"block", 256}, {"items", 2}}, shape), "block * items must be <= 256");
  EXPECT_EQ(d.violation({{"block", 128}, {"items", 1}}, {{"n", 500}, {"m", 1}}), "n must be whole blocks");
  // 3 x 3 domains, of which block * items <= 256 leaves 64x{1,2,4}, 128x{1,2}, 256x{1}.
  EXPECT_EQ(all_configs(d).size(), 9u);
  EXPECT_EQ(valid_configs(d, shape).size(), 6u);
  const std::string message = usage_message([&] {
    resolve_config(d, {{"n", 500}, {"m", 1}}, "fp32", {{"block", 64}, {"items", 1}});
  });
  EXPECT_NE(message.find("n must be whole blocks"), std::string::npos) << message;
}

TEST(Manifest, AConstraintThatCannotBeEvaluatedRejectsTheConfig) {
  json manifest = base_manifest();
  manifest["constraints"] = json::parse(R"([{"rule": ["<", ["/", "n", ["-", "block", 64]], 100], "message": "few"}])");
  const KernelDescriptor d = parse(manifest);
  const std::string why = d.violation({{"block", 64}, {"items", 1}}, {{"n", 10}, {"m", 1}});
  EXPECT_NE(why.find("division by zero"), std::string::npos) << why;
  EXPECT_EQ(d.violation({{"block", 128}, {"items", 1}}, {{"n", 10}, {"m", 1}}), "");
}

TEST(Manifest, GeometryTensorsAndReference) {
  json manifest = base_manifest();
  manifest["geometry"]["block"] = json::parse(R"([["/", "block", 2], 2, ["min", "items", 2]])");
  const KernelDescriptor d = parse(manifest);
  const Shape shape{{"n", 1000}, {"m", 5}};
  const auto g = d.geometry({{"block", 128}, {"items", 4}}, shape, dtype_info("fp16"));
  EXPECT_EQ(g.grid[0], 2u);  // ceil(1000 / 512)
  EXPECT_EQ(g.grid[1], 5u);
  EXPECT_EQ(g.grid[2], 1u) << "dimensions not given are 1";
  EXPECT_EQ(g.block[0], 64u);
  EXPECT_EQ(g.block[1], 2u);
  EXPECT_EQ(g.block[2], 2u);
  EXPECT_EQ(g.dynamic_shared_bytes, 256u) << "block * elem_bytes of fp16";
  EXPECT_EQ(d.geometry({{"block", 128}, {"items", 4}}, shape, dtype_info("fp32")).dynamic_shared_bytes, 512u);

  const auto tensors = d.tensors(shape);
  ASSERT_EQ(tensors.size(), 2u);
  EXPECT_EQ(tensors[0].name, "x");
  EXPECT_EQ(tensors[0].elements, 5000);
  EXPECT_FALSE(tensors[0].output);
  EXPECT_EQ(tensors[1].name, "y");
  EXPECT_TRUE(tensors[1].output);

  const auto r = d.reference_geometry(shape);
  EXPECT_EQ(r.grid[0], 4u);
  EXPECT_EQ(r.block[0], 256u);
  EXPECT_EQ(r.dynamic_shared_bytes, 0u);

  json zero = base_manifest();
  zero["geometry"]["grid"] = json::parse(R"([["-", "n", 1000]])");
  const std::string message = usage_message([&] {
    parse(zero).geometry({{"block", 64}, {"items", 1}}, shape, dtype_info("fp32"));
  });
  EXPECT_NE(message.find("geometry.grid[0]"), std::string::npos) << message;
  EXPECT_NE(message.find("outside [1, "), std::string::npos) << message;
  json empty = base_manifest();
  empty["tensors"][0]["elements"] = json::parse(R"(["-", "n", 1000])");
  EXPECT_NE(usage_message([&] { parse(empty).tensors(shape); }).find("tensors[0].elements"), std::string::npos);
}

TEST(Manifest, BrokenTemplateManifestParses) {
  const std::string manifest = read_text(kBrokenManifest);
  const std::string source = read_text(std::string(GMJIT_SOURCE_DIR) + "/tests/data/broken/broken.cuh");
  ASSERT_FALSE(manifest.empty());
  ASSERT_FALSE(source.empty());
  const KernelDescriptor d = parse_manifest(manifest, source);
  EXPECT_EQ(d.name, "broken");
  EXPECT_EQ(d.header, "user/broken.cuh");
  EXPECT_EQ(all_configs(d).size(), 18u);
  EXPECT_EQ(valid_configs(d, {{"n", 1000}}).size(), 18u);
  const Shape shape{{"n", 1000}};
  EXPECT_EQ(d.name_expression({{"mode", 3}, {"block", 64}}, shape, dtype_info("fp32")), "user::broken<float, 3, 64>");
  EXPECT_EQ(d.geometry({{"mode", 2}, {"block", 64}}, shape, dtype_info("fp32")).dynamic_shared_bytes, 300u * 1024);
  EXPECT_EQ(d.geometry({{"mode", 0}, {"block", 64}}, shape, dtype_info("fp32")).dynamic_shared_bytes, 0u);
  EXPECT_EQ(d.geometry({{"mode", 0}, {"block", 64}}, shape, dtype_info("fp32")).grid[0], 16u);
  EXPECT_EQ(d.geometry({{"mode", 0}, {"block", 64}}, {{"n", 1LL << 32}}, dtype_info("fp32")).grid[0], 65535u);
  EXPECT_EQ(d.reference_expression(dtype_info("fp32"), {}), "user::broken_reference<float>");
  EXPECT_EQ(d.tensors(shape).size(), 3u);
  EXPECT_NE(d.violation(d.default_config, {{"n", 1LL << 40}}), "");
}

TEST(ManifestRegistry, FindKernelAndCatalogSeeUserKernels) {
  const auto before = catalog().size();
  const KernelDescriptor& d = register_manifest_kernel(base_manifest("demo_visible").dump(), kSource);
  EXPECT_EQ(d.name, "demo_visible");
  EXPECT_EQ(&find_kernel("demo_visible"), &catalog().back());
  EXPECT_EQ(catalog().size(), before + 1);
  EXPECT_TRUE(is_user_kernel("demo_visible"));
  EXPECT_FALSE(is_user_kernel("sgemm"));
  EXPECT_EQ(find_header("demo/scale.cuh"), std::optional<std::string>(kSource));
  EXPECT_NO_THROW(resolve_config(find_kernel("demo_visible"), {{"n", 4}, {"m", 4}}, "fp16", {{"items", 2}}));
}

TEST(ManifestRegistry, RegisteringTheSameNameAgainReplacesIt) {
  json first = base_manifest("demo_replaced");
  first["header"] = "demo/replaced.cuh";
  const KernelDescriptor& old = register_manifest_kernel(first.dump(), kSource);
  const auto size = catalog().size();
  json second = first;
  second["summary"] = "second version";
  const std::string new_source = std::string(kSource) + "// v2\n";
  const KernelDescriptor& now = register_manifest_kernel(second.dump(), new_source);
  EXPECT_EQ(catalog().size(), size);
  EXPECT_EQ(find_kernel("demo_replaced").summary, "second version");
  EXPECT_EQ(&find_kernel("demo_replaced"), &now);
  EXPECT_EQ(old.summary, "y = a * x") << "a reference taken before stays valid";
  EXPECT_EQ(find_header("demo/replaced.cuh"), std::optional<std::string>(new_source));
}

TEST(ManifestRegistry, BuiltInsAndTheirHeadersAreNotReplaced) {
  EXPECT_EQ(usage_message([] {
              register_manifest_kernel(base_manifest("sgemm").dump(), kSource);
            }).rfind("name: 'sgemm' is a built-in kernel", 0),
            0u);
  json taken = base_manifest("demo_header_owner");
  taken["header"] = "demo/owned.cuh";
  register_manifest_kernel(taken.dump(), kSource);
  json thief = taken;
  thief["name"] = "demo_header_thief";
  const std::string message = usage_message([&] { register_manifest_kernel(thief.dump(), kSource); });
  EXPECT_NE(message.find("header: 'demo/owned.cuh' already holds kernel 'demo_header_owner'"), std::string::npos)
      << message;
  EXPECT_EQ(find_kernel("sgemm").header, "gmjit/sgemm.cuh");
}

TEST(ManifestApi, HostReferenceIsWiredIntoTheDescriptor) {
  json manifest = base_manifest("demo_host_reference");
  manifest["header"] = "demo/host_reference.cuh";
  manifest.erase("reference");
  const HostReference scale_by_two = [](const std::vector<std::vector<double>>& inputs, const Shape& shape) {
    std::vector<double> out(inputs.at(0).size());
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = 2 * inputs[0][i] + static_cast<double>(shape.at("m"));
    return std::vector<std::vector<double>>{out};
  };
  EXPECT_EQ(register_kernel(manifest.dump(), kSource, scale_by_two), "demo_host_reference");
  const auto& d = find_kernel("demo_host_reference");
  EXPECT_FALSE(d.reference_expression);
  ASSERT_TRUE(d.host_reference);
  const auto out = d.host_reference({{1.0, 2.5}}, {{"n", 2}, {"m", 3}});
  EXPECT_EQ(out, (std::vector<std::vector<double>>{{5.0, 8.0}}));
  const std::string no_reference = usage_message([&] {
    codegen::specialize_reference(d, {{"n", 2}, {"m", 1}}, "fp32");
  });
  EXPECT_NE(no_reference.find("host reference"), std::string::npos) << no_reference;

  // A registration needs exactly one reference.
  EXPECT_EQ(usage_message([&] { register_kernel(manifest.dump(), kSource); }).rfind("kernel manifest: reference: ", 0),
            0u);
  EXPECT_EQ(usage_message([&] {
              register_kernel(base_manifest("demo_two_references").dump(), kSource, scale_by_two);
            }).rfind("kernel manifest: reference: ", 0),
            0u);
}

TEST(ManifestApi, ListKernelsMarksUserKernels) {
  json manifest = base_manifest("demo_listed");
  manifest["header"] = "demo/listed.cuh";
  register_kernel(manifest.dump(), kSource);
  bool built_in = false, user = false;
  for (const auto& info : list_kernels()) {
    if (info.name == "sgemm") built_in = !info.user;
    if (info.name == "demo_listed") {
      user = info.user;
      EXPECT_EQ(info.header, "demo/listed.cuh");
      EXPECT_EQ(info.template_hash, template_hash("demo/listed.cuh"));
      EXPECT_EQ(info.params.size(), 2u);
      EXPECT_EQ(info.constraints, "block * items must be <= 256");
    }
  }
  EXPECT_TRUE(built_in);
  EXPECT_TRUE(user);
}

TEST(ManifestApi, RegisterKernelFileReadsTheHeaderBesideTheManifest) {
  EXPECT_EQ(register_kernel_file(kBrokenManifest), "broken");
  EXPECT_NE(find_header("user/broken.cuh")->find("broken_reference"), std::string::npos);
  EXPECT_NE(find_kernel("broken").header_source.find("mode 1 fails to compile on purpose"), std::string::npos);

  const auto dir = std::filesystem::temp_directory_path() / ("gmjit-manifest-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto missing = (dir / "absent.json").string();
  std::string message = usage_message([&] { register_kernel_file(missing); });
  EXPECT_NE(message.find(missing), std::string::npos) << message;

  json manifest = base_manifest("demo_from_file");
  manifest["header"] = "demo/from_file.cuh";
  std::ofstream(dir / "no_header.json") << manifest.dump();
  message = usage_message([&] { register_kernel_file((dir / "no_header.json").string()); });
  EXPECT_NE(message.find("header_file: missing"), std::string::npos) << message;

  manifest["header_file"] = "kernels/scale.cuh";
  std::ofstream(dir / "absent_header.json") << manifest.dump();
  message = usage_message([&] { register_kernel_file((dir / "absent_header.json").string()); });
  EXPECT_NE(message.find((dir / "kernels/scale.cuh").string()), std::string::npos) << message;

  std::filesystem::create_directories(dir / "kernels");
  std::ofstream(dir / "kernels/scale.cuh") << kSource;
  std::ofstream(dir / "good.json") << manifest.dump();
  EXPECT_EQ(register_kernel_file((dir / "good.json").string()), "demo_from_file");
  EXPECT_EQ(find_header("demo/from_file.cuh"), std::optional<std::string>(kSource));

  manifest["tolerance"]["fp32"] = 0;
  std::ofstream(dir / "bad.json") << manifest.dump();
  message = usage_message([&] { register_kernel_file((dir / "bad.json").string()); });
  EXPECT_EQ(message.rfind((dir / "bad.json").string() + ": kernel manifest: tolerance.fp32: ", 0), 0u) << message;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gmjit::templates
