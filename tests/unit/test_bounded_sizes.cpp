// Sizes beyond what a kernel's index arithmetic supports are usage errors, before any product of
// them can overflow or any size is narrowed to int; a size a kernel does support gives a plan
// whose every launch fits the device's grid.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "gmjit/error.hpp"
#include "templates/registry.hpp"

namespace gmjit {
namespace {

// Every size key at `huge`, then each size key alone at `huge` with the others at 64; flag keys
// (gemm's trans_b) at 1.
std::vector<Shape> huge_shapes(const templates::KernelDescriptor& kernel, std::int64_t huge) {
  const auto is_flag = [&](const std::string& key) {
    return std::find(kernel.flag_keys.begin(), kernel.flag_keys.end(), key) != kernel.flag_keys.end();
  };
  std::vector<Shape> shapes(1);
  for (const auto& key : kernel.problem_keys) shapes[0][key] = is_flag(key) ? 1 : huge;
  for (const auto& key : kernel.problem_keys) {
    if (is_flag(key)) continue;
    Shape shape;
    for (const auto& other : kernel.problem_keys) shape[other] = is_flag(other) ? 1 : other == key ? huge : 64;
    shapes.push_back(shape);
  }
  return shapes;
}

TEST(BoundedSizes, EveryBuiltInKernelRejectsWhatItCannotIndex) {
  std::size_t rejected = 0, planned = 0;
  for (const auto& kernel : templates::catalog()) {
    if (templates::is_user_kernel(kernel.name)) continue;
    for (const int exponent : {62, 31, 40}) {
      for (const Shape& shape : huge_shapes(kernel, std::int64_t{1} << exponent)) {
        SCOPED_TRACE(kernel.name + " " + format_assignments(shape));
        bool usage = false;
        try {
          templates::normalize_problem(kernel, shape, kernel.dtypes.front());
        } catch (const Error& e) {
          EXPECT_EQ(e.kind(), ErrorKind::usage) << e.what();
          EXPECT_NE(e.message().find(kernel.name), std::string::npos) << e.message();
          EXPECT_EQ(e.message().find('\n'), std::string::npos) << "one line";
          usage = true;
        }
        if (usage) {
          EXPECT_TRUE(templates::valid_configs(kernel, shape).empty());
          try {
            templates::resolve_config(kernel, shape, kernel.dtypes.front(), {});
            ADD_FAILURE() << "resolve_config accepted a shape normalize_problem refused";
          } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::usage);
          }
          ++rejected;
          continue;
        }
        // Supported: every tensor's bytes fit 64 bits, and every valid configuration launches.
        for (const auto& tensor : kernel.tensors(shape)) {
          EXPECT_GT(tensor.elements, 0) << tensor.name;
          EXPECT_LE(tensor.elements, std::int64_t{1} << 48) << tensor.name;
        }
        const auto configs = templates::valid_configs(kernel, shape);
        EXPECT_FALSE(configs.empty()) << "a supported shape needs a configuration";
        for (const auto& config : configs) {
          for (const auto& dtype : kernel.dtypes) {
            const auto g = kernel.geometry(config, shape, templates::dtype_info(dtype));
            EXPECT_GE(g.grid[0], 1u);
            EXPECT_LE(g.grid[0], 2147483647u) << format_assignments(config);
            EXPECT_LE(g.grid[1], 65535u) << format_assignments(config);
            EXPECT_LE(g.grid[2], 65535u) << format_assignments(config);
            EXPECT_LE(static_cast<std::uint64_t>(g.block[0]) * g.block[1] * g.block[2], 1024u);
          }
        }
        ++planned;
      }
    }
  }
  EXPECT_GT(rejected, 0u);
  EXPECT_GT(planned, 0u);
  std::printf("[ sizes    ] %zu huge shapes refused as usage errors, %zu planned\n", rejected, planned);
}

TEST(BoundedSizes, SgemmRefusesSizesItWouldNarrowToInt) {
  const auto& sgemm = templates::find_kernel("sgemm");
  const std::int64_t huge = std::int64_t{1} << 62;
  try {
    templates::resolve_config(sgemm, {{"m", huge}, {"n", huge}, {"k", huge}}, "fp32", {});
    FAIL() << "m=n=k=2^62 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::usage);
    EXPECT_NE(e.message().find("as int"), std::string::npos) << e.message();
  }
  // 2^22 x 1 x 1 fits int and 2^31 elements, but not 65535 block rows of 32.
  const Shape tall{{"m", std::int64_t{1} << 22}, {"n", 1}, {"k", 1}};
  EXPECT_NO_THROW(templates::normalize_problem(sgemm, tall, "fp32"));
  const std::string why = sgemm.violation({{"bm", 32}, {"bn", 32}, {"bk", 8}, {"tm", 4}, {"tn", 4}, {"vec", 0}, {"wm", 0}}, tall);
  EXPECT_NE(why.find("65535"), std::string::npos) << why;
  for (const auto& config : templates::valid_configs(sgemm, tall)) EXPECT_EQ(config.at("bm"), 128);
}

}  // namespace
}  // namespace gmjit
