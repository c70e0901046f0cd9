#pragma once
// Helpers the descriptor tests share: tables of configurations and what the descriptor must say
// of them, usage errors, and the checks of what softmax, rmsnorm and layernorm have in common
// because templates/row_kernel.cpp describes all three (problem keys, access-width rules, name
// expressions, geometry); each row kernel's own tests run these beside their own numbers.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "codegen/compiler.hpp"
#include "core/kernel_args.hpp"
#include "gmjit/error.hpp"
#include "templates/registry.hpp"

namespace gmjit::testing {

// The message of the usage error `action` throws; records a failure when it throws none.
inline std::string usage_message(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::usage);
    return e.message();
  }
  ADD_FAILURE() << "no usage error";
  return {};
}

// A scalar argument as the kernel reads it.
template <typename T>
T scalar_at(detail::KernelArgs& args, std::size_t index) {
  T value{};
  std::memcpy(&value, args.pointers()[index], sizeof value);
  return value;
}

// What violation() must say of a configuration at a shape: "" where it is valid, otherwise a
// piece of the reason.
struct Verdict {
  Config config;
  Shape shape;
  std::string says;
};

inline void expect_verdicts(const templates::KernelDescriptor& k, const std::vector<Verdict>& verdicts) {
  for (const auto& v : verdicts) {
    const std::string why = k.violation(v.config, v.shape);
    const std::string at = format_assignments(v.config) + " at " + format_assignments(v.shape);
    if (v.says.empty()) {
      EXPECT_EQ(why, "") << at;
    } else {
      EXPECT_NE(why.find(v.says), std::string::npos) << at << ": " << why;
    }
  }
}

struct NameCase {
  Config config;
  Shape shape;
  std::string dtype;
  std::string name;
};

inline void expect_names(const templates::KernelDescriptor& k, const std::vector<NameCase>& cases) {
  for (const auto& c : cases) {
    EXPECT_EQ(k.name_expression(c.config, c.shape, templates::dtype_info(c.dtype)), c.name)
        << format_assignments(c.config) << " at " << format_assignments(c.shape) << " " << c.dtype;
  }
}

inline std::size_t count_if_valid(const templates::KernelDescriptor& k, const Shape& s,
                                  const std::function<bool(const Config&)>& predicate) {
  const auto configs = templates::valid_configs(k, s);
  return static_cast<std::size_t>(std::count_if(configs.begin(), configs.end(), predicate));
}

// The row kernels: softmax, rmsnorm and layernorm.

inline Shape shape(std::int64_t rows, std::int64_t cols) { return {{"rows", rows}, {"cols", cols}}; }

// The kernel's defaults (softmax's split=1) with the five parameters every row kernel has.
inline Config row_config(const templates::KernelDescriptor& k, std::int64_t strategy, std::int64_t block,
                         std::int64_t elems, std::int64_t vec, std::int64_t cached) {
  Config c = k.default_config;
  c["strategy"] = strategy;
  c["block"] = block;
  c["elems"] = elems;
  c["vec"] = vec;
  c["cached"] = cached;
  return c;
}

inline void expect_row_kernel_description(const templates::KernelDescriptor& k) {
  EXPECT_EQ(k.problem_keys, (std::vector<std::string>{"rows", "cols"}));
  EXPECT_EQ(k.dtypes, (std::vector<std::string>{"fp32", "bf16"}));
  ASSERT_TRUE(templates::find_header(k.header).has_value()) << k.header;
  // bf16 comes with the row kernels' shared accesses, which the template's key covers too.
  const auto reached = templates::reachable_headers(k.header);
  EXPECT_NE(std::find(reached.begin(), reached.end(), "gmjit/row_access.cuh"), reached.end());
  EXPECT_NE(templates::find_header("gmjit/row_access.cuh")->find("cuda_bf16.h"), std::string::npos);
  EXPECT_TRUE(k.work);
}

inline void expect_defaults_serve(const templates::KernelDescriptor& k, const std::vector<Shape>& shapes) {
  for (const auto& s : shapes) {
    for (const char* dtype : {"fp32", "bf16"}) {
      EXPECT_NO_THROW(templates::resolve_config(k, s, dtype, {})) << format_assignments(s) << " " << dtype;
    }
  }
  EXPECT_THROW(templates::resolve_config(k, shape(4, 4), "fp16", {}), Error);
}

inline void expect_row_access_rules(const templates::KernelDescriptor& k) {
  // Odd cols: single-element accesses, which vec=1 compiles to; every register-cached variant
  // holds 127 (a warp of 4 elements holds 128).
  EXPECT_EQ(templates::valid_configs(k, shape(3, 127)).size(), 64u);
  EXPECT_EQ(count_if_valid(k, shape(3, 127), [](const Config& c) { return c.at("vec") == 0; }), 0u);
  EXPECT_EQ(templates::valid_configs(k, shape(1, 1)).size(), 64u);
  // A warp caches up to 32 x 32 = 1024 columns.
  EXPECT_EQ(k.violation(row_config(k, 0, 128, 32, 1, 1), shape(1, 1024)), "");
  EXPECT_NE(k.violation(row_config(k, 0, 128, 32, 1, 1), shape(1, 1026)), "");
}

// `long_row`: too long for a cached block of 256 x 16; `uncached` a shape at which resolving
// cached=1 in `dtype` must fail.
inline void expect_row_violations_say_why(const templates::KernelDescriptor& k, const Shape& long_row,
                                          const Shape& uncached, const std::string& dtype) {
  const std::string odd = k.violation(row_config(k, 1, 256, 8, 0, 0), shape(3, 127));
  EXPECT_NE(odd.find("vec=0"), std::string::npos) << odd;
  EXPECT_NE(odd.find("cols=127"), std::string::npos) << odd;
  const std::string too_long = k.violation(row_config(k, 1, 256, 16, 1, 1), long_row);
  EXPECT_NE(too_long.find("cached=1"), std::string::npos) << too_long;
  EXPECT_NE(too_long.find("4096"), std::string::npos) << too_long;  // 256 x 16, what fits
  EXPECT_NE(too_long.find("cols=" + std::to_string(long_row.at("cols"))), std::string::npos) << too_long;
  EXPECT_NE(k.violation(row_config(k, 1, 256, 8, 0, 0), shape(1, std::int64_t{1} << 30)).find("2^30"),
            std::string::npos);
  try {
    templates::resolve_config(k, uncached, dtype, {{"cached", 1}});
    ADD_FAILURE() << "cached=1 resolved at " << format_assignments(uncached);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::usage);
    EXPECT_NE(e.message().find("cached=1"), std::string::npos) << e.message();
  }
}

// gmjit::<kernel><T, row threads, block, elems, access bytes, cached> where the access narrows.
inline void expect_row_access_names(const templates::KernelDescriptor& k) {
  const std::string n = "gmjit::" + k.name;
  expect_names(k, {
                      // Four bf16 elements per thread are 8 bytes: the access never outgrows a
                      // thread's slice.
                      {row_config(k, 0, 128, 4, 1, 1), shape(8, 64), "bf16", n + "<__nv_bfloat16, 32, 128, 4, 8, true>"},
                      // 1002 bf16 are 2004 bytes (4-byte rows), as fp32 8016 bytes (16).
                      {row_config(k, 1, 256, 8, 1, 0), shape(127, 1002), "bf16",
                       n + "<__nv_bfloat16, 256, 256, 8, 4, false>"},
                      {row_config(k, 1, 256, 8, 1, 0), shape(127, 1002), "fp32", n + "<float, 256, 256, 8, 8, false>"},
                      // vec=0 is one element per access, and so is vec=1 for an odd cols.
                      {row_config(k, 1, 1024, 32, 0, 1), shape(3, 128), "bf16",
                       n + "<__nv_bfloat16, 1024, 1024, 32, 2, true>"},
                      {row_config(k, 1, 1024, 32, 1, 1), shape(3, 127), "bf16",
                       n + "<__nv_bfloat16, 1024, 1024, 32, 2, true>"},
                      {row_config(k, 1, 1024, 32, 1, 1), shape(3, 127), "fp32", n + "<float, 1024, 1024, 32, 4, true>"},
                  });
  const auto generated = codegen::specialize(k, shape(3, 127), "bf16", k.default_config);
  EXPECT_NE(generated.source.find("#include \"" + k.header + "\""), std::string::npos) << generated.source;
  EXPECT_EQ(codegen::specialize_reference(k, shape(3, 127), "bf16").name_expression,
            "gmjit::reference::" + k.name + "<__nv_bfloat16>");
}

inline void expect_row_geometry_at_edge_sizes(const templates::KernelDescriptor& k, const std::string& dtype) {
  const auto& t = templates::dtype_info(dtype);
  // A warp per row: block / 32 rows per block.
  const auto one = k.geometry(row_config(k, 0, 256, 8, 0, 1), shape(1, 1), t);
  EXPECT_EQ(one.grid[0], 1u);
  EXPECT_EQ(one.block[0], 256u);
  EXPECT_EQ(k.geometry(row_config(k, 0, 1024, 8, 0, 1), shape(33, 128), t).grid[0], 2u);
  // The kernel strides over rows, so the grid is capped rather than the shape refused.
  EXPECT_EQ(k.geometry(row_config(k, 1, 128, 8, 0, 0), shape(std::int64_t{1} << 32, 1), t).grid[0], 2147483647u);
  EXPECT_EQ(k.reference_geometry(shape(100000, 3)).grid[0], 65535u);
  EXPECT_EQ(k.reference_geometry(shape(3, 100000)).block[0], 256u);
}

// A block per row (strategy=1) at `s`.
inline void expect_block_per_row(const templates::KernelDescriptor& k, const Config& c, const Shape& s,
                                 const std::string& dtype) {
  const auto g = k.geometry(c, s, templates::dtype_info(dtype));
  EXPECT_EQ(g.grid[0], static_cast<unsigned>(s.at("rows")));
  EXPECT_EQ(g.block[0], static_cast<unsigned>(c.at("block")));
  EXPECT_EQ(g.dynamic_shared_bytes, 0u);
}

}  // namespace gmjit::testing
