#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "core/kernel_args.hpp"
#include "templates/registry.hpp"
#include "unit/templates_test_support.hpp"

namespace gmjit::templates {
namespace {

using testing::count_if_valid;
using testing::expect_names;
using testing::expect_verdicts;
using testing::scalar_at;
using testing::shape;

const KernelDescriptor& softmax() { return find_kernel("softmax"); }

Config config(std::int64_t strategy, std::int64_t block, std::int64_t elems, std::int64_t vec, std::int64_t cached,
              std::int64_t split = 1) {
  Config c = testing::row_config(softmax(), strategy, block, elems, vec, cached);
  c["split"] = split;
  return c;
}

std::size_t count_if_valid(const Shape& s, const std::function<bool(const Config&)>& predicate) {
  return count_if_valid(softmax(), s, predicate);
}

TEST(Softmax, IsABuiltInWithFp32First) {
  const auto& k = softmax();
  EXPECT_FALSE(is_user_kernel("softmax"));
  EXPECT_EQ(k.header, "gmjit/softmax.cuh");
  testing::expect_row_kernel_description(k);
  // 3 strategies x 4 blocks x 4 elems x 2 vec x 2 cached x 5 splits; the rules leave at most 152
  // for any one shape (below), few enough to tune exhaustively.
  EXPECT_EQ(all_configs(k).size(), 960u);
}

TEST(Softmax, DefaultConfigServesEveryShapeOfTheIssue) {
  testing::expect_defaults_serve(softmax(), {shape(1, 1), shape(3, 127), shape(127, 1000), shape(1, 131072),
                                             shape(2, 393216), shape(8192, 8192), shape(4096, 32000),
                                             shape(32768, 128), shape(5, 1000003)});
}

TEST(Softmax, ValidConfigsPerShape) {
  testing::expect_row_access_rules(softmax());
  // 128 columns: everything.
  EXPECT_EQ(valid_configs(softmax(), shape(32768, 128)).size(), 128u);
  // 8192 columns: cached needs a block per row with block * elems >= 8192:
  // (256, 32), (512, 16), (512, 32), (1024, 8), (1024, 16), (1024, 32), each with vec 0 and 1.
  EXPECT_EQ(count_if_valid(shape(8192, 8192), [](const Config& c) { return c.at("cached") == 1; }), 12u);
  EXPECT_EQ(count_if_valid(shape(8192, 8192), [](const Config& c) { return c.at("cached") == 0; }), 64u);
  EXPECT_EQ(count_if_valid(shape(8192, 8192),
                           [](const Config& c) { return c.at("cached") == 1 && c.at("strategy") == 0; }),
            0u);
  // 32000 columns still fit 1024 threads x 32 with a block per row (2), and split into slices
  // of 8000, 4000, 2000 or 1000 that fit more than half of block x elems: 3 + 4 + 3 + 2, with
  // vec 0 and 1. No block holds 393216: only slices of 24576 (1024 x 32) or 12288 (512 x 32,
  // 1024 x 16) do. Streamed slices (split 16 or 32, elems 4 or 8, vec 1, block x elems within
  // the slice): 3 + 1 at 32000 columns, 8 + 8 at 393216.
  const auto split = [](const Config& c) { return c.at("strategy") == 2; };
  EXPECT_EQ(count_if_valid(shape(4096, 32000), [](const Config& c) { return c.at("cached") == 1; }), 26u);
  EXPECT_EQ(count_if_valid(shape(4096, 32000), split), 24u + 4);
  EXPECT_EQ(count_if_valid(shape(2, 393216), [](const Config& c) { return c.at("cached") == 1; }), 6u);
  EXPECT_EQ(count_if_valid(shape(2, 393216), split), 6u + 16);
  EXPECT_EQ(valid_configs(softmax(), shape(2, 393216)).size(), 70u + 16);
  EXPECT_EQ(count_if_valid(shape(8192, 8192), split), 0u) << "one block holds 8192";
  std::size_t most = 0;
  for (const auto& s : {shape(1, 131072), shape(4096, 32000), shape(32768, 128), shape(1, 1000003)}) {
    most = std::max(most, valid_configs(softmax(), s).size());
  }
  EXPECT_LE(most, 152u);
}

TEST(Softmax, ViolationsSayWhy) {
  testing::expect_row_violations_say_why(softmax(), shape(2, 393216), shape(2, 393216), "fp32");
  const std::string warp = softmax().violation(config(0, 1024, 8, 1, 1), shape(2, 512));
  EXPECT_NE(warp.find("256"), std::string::npos) << "a warp holds 32 x 8, whatever the block: " << warp;
}

TEST(Softmax, SplitRowsRulesNamesGeometryAndWorkspace) {
  const auto& k = softmax();
  const auto& fp32 = dtype_info("fp32");
  const Shape long_rows = shape(4096, 393216);
  expect_verdicts(k, {
                         {config(2, 1024, 32, 1, 1, 16), long_rows, ""},
                         {config(2, 512, 32, 1, 1, 32), long_rows, ""},
                         {config(2, 512, 32, 1, 1, 16), long_rows, "must fit"},
                         {config(2, 1024, 32, 1, 1, 32), long_rows, "more than half"},
                         // Streamed slices: few registers, slices small enough to be reread from
                         // L2, no idle threads.
                         {config(2, 256, 8, 1, 0, 32), long_rows, ""},
                         {config(2, 1024, 8, 1, 0, 16), long_rows, ""},
                         {config(2, 256, 8, 1, 0, 8), long_rows, "split >= 16"},
                         {config(2, 256, 16, 1, 0, 32), long_rows, "elems <= 8"},
                         {config(2, 256, 8, 0, 0, 32), long_rows, "vec=1"},
                         {config(2, 1024, 8, 1, 0, 32), shape(1, 131072), "idle"},
                         {config(2, 1024, 32, 1, 1, 1), long_rows, "split must be above 1"},
                         {config(1, 1024, 32, 1, 0, 16), long_rows, "strategy=2 only"},
                         {config(2, 128, 4, 1, 1, 4), shape(8, 2048), "16384"},
                         // The access-width rule of every row kernel holds for slices too.
                         {config(2, 128, 32, 0, 1, 32), shape(1, 131071), "vec=0"},
                     });

  expect_names(k, {
                      {config(2, 1024, 32, 1, 1, 16), long_rows, "fp32",
                       "gmjit::softmax_split<float, 1024, 32, 16, 16, true>"},
                      {config(2, 128, 32, 1, 1, 32), shape(1, 131072), "bf16",
                       "gmjit::softmax_split<__nv_bfloat16, 128, 32, 16, 32, true>"},
                      {config(2, 256, 8, 1, 0, 32), long_rows, "fp32", "gmjit::softmax_split<float, 256, 8, 16, 32, false>"},
                  });
  const auto g = k.geometry(config(2, 1024, 32, 1, 1, 16), long_rows, fp32);
  EXPECT_EQ(g.grid[0], 4096u * 16);
  EXPECT_EQ(g.block[0], 1024u);

  // Rows long enough to split get a ticket word, a pad, an arrival count per row and 32 pairs
  // per row; shorter ones only the two words no kernel of theirs touches.
  EXPECT_EQ(k.tensors(shape(3, 131072)).size(), 2u) << "the workspace is the library's, not a tensor";
  ASSERT_TRUE(k.workspace);
  EXPECT_EQ(k.workspace(shape(3, 131072)).bytes, 4 * (2 + 4 + 2 * 32 * 3));
  EXPECT_EQ(k.workspace(shape(8192, 8192)).bytes, 4 * 2);
  // The pairs follow one arrival count per row: another rows is another layout, which a shared
  // workspace must be zeroed for; rows too short to split never touch it.
  EXPECT_NE(k.workspace(shape(3, 131072)).layout, k.workspace(shape(5, 131072)).layout);
  EXPECT_EQ(k.workspace(shape(3, 131072)).layout, k.workspace(shape(3, 262144)).layout);
  EXPECT_EQ(k.workspace(shape(3, 127)).layout, k.workspace(shape(5, 127)).layout);
  EXPECT_DOUBLE_EQ(k.work(config(2, 1024, 32, 1, 1, 16), long_rows, fp32).bytes, 2.0 * 4096 * 393216 * 4);
  // A streamed slice's second read comes from L2 where the slices in flight fit half of it: 2
  // blocks of 1024 an SM with 48 KB slices (13 MB), not 8 blocks of 256 (52 MB); a block per row
  // streams 1.5 MB rows and reads them twice from DRAM.
  EXPECT_DOUBLE_EQ(k.work(config(2, 1024, 8, 1, 0, 32), long_rows, fp32).bytes, 2.0 * 4096 * 393216 * 4);
  EXPECT_DOUBLE_EQ(k.work(config(2, 256, 8, 1, 0, 32), long_rows, fp32).bytes, 3.0 * 4096 * 393216 * 4);
  EXPECT_DOUBLE_EQ(k.work(config(1, 256, 8, 1, 0), long_rows, fp32).bytes, 3.0 * 4096 * 393216 * 4);
}

TEST(Softmax, NameExpressionsPickTheWidestAlignedAccess) {
  const auto& k = softmax();
  testing::expect_row_access_names(k);
  expect_names(k, {
                      {config(0, 256, 8, 1, 1), shape(32768, 128), "fp32", "gmjit::softmax<float, 32, 256, 8, 16, true>"},
                      {config(1, 512, 16, 1, 0), shape(8192, 8192), "bf16",
                       "gmjit::softmax<__nv_bfloat16, 512, 512, 16, 16, false>"},
                      {config(1, 256, 8, 1, 0), shape(127, 1000), "fp32", "gmjit::softmax<float, 256, 256, 8, 16, false>"},
                      {config(1, 1024, 32, 0, 1), shape(3, 128), "fp32", "gmjit::softmax<float, 1024, 1024, 32, 4, true>"},
                  });
}

TEST(Softmax, GeometryAtEdgeSizes) {
  const auto& k = softmax();
  const auto& fp32 = dtype_info("fp32");
  testing::expect_row_geometry_at_edge_sizes(k, "fp32");
  EXPECT_EQ(k.geometry(config(0, 256, 8, 0, 1), shape(32768, 128), fp32).grid[0], 4096u);
  testing::expect_block_per_row(k, config(1, 1024, 32, 1, 0), shape(2, 393216), "fp32");
  EXPECT_EQ(k.geometry(config(1, 128, 8, 1, 0), shape(8192, 8192), fp32).grid[0], 8192u);
}

TEST(Softmax, TensorsScalarsWorkAndTolerance) {
  const auto& k = softmax();
  const auto tensors = k.tensors(shape(3, 127));
  ASSERT_EQ(tensors.size(), 2u) << "x and y; the workspace is the library's";
  EXPECT_EQ(tensors[0].name, "x");
  EXPECT_FALSE(tensors[0].output);
  EXPECT_EQ(tensors[0].elements, 381);
  EXPECT_TRUE(tensors[1].output);
  EXPECT_EQ(tensors[1].elements, 381);

  // The kernel's (long long rows, int cols).
  detail::KernelArgs args;
  k.add_scalars(args, shape(3, 393216));
  ASSERT_EQ(args.size(), 2u);
  EXPECT_EQ(scalar_at<long long>(args, 0), 3);
  EXPECT_EQ(scalar_at<int>(args, 1), 393216);

  const auto& fp32 = dtype_info("fp32");
  const auto& bf16 = dtype_info("bf16");
  const auto cached = k.work(config(1, 1024, 8, 1, 1), shape(8192, 8192), bf16);
  EXPECT_DOUBLE_EQ(cached.bytes, 2.0 * 8192 * 8192 * 2);
  EXPECT_EQ(cached.shared_bytes, 2 * 32 * 8);
  const auto streamed = k.work(config(1, 1024, 32, 1, 0), shape(8192, 8192), fp32);
  EXPECT_DOUBLE_EQ(streamed.bytes, 2.0 * 8192 * 8192 * 4);
  EXPECT_EQ(streamed.shared_bytes, 2 * 32 * 8);
  // A warp per row keeps every row of 32 KB in flight at once, far beyond L2.
  const auto warps = k.work(config(0, 256, 32, 1, 0), shape(8192, 8192), fp32);
  EXPECT_DOUBLE_EQ(warps.bytes, 3.0 * 8192 * 8192 * 4);
  EXPECT_EQ(warps.shared_bytes, 0);
  EXPECT_GT(streamed.flops, cached.flops) << "streaming computes every exponent twice";
  EXPECT_GT(streamed.registers, cached.registers);
  EXPECT_GT(cached.compute_efficiency, 0.0);
  EXPECT_LE(cached.compute_efficiency, 1.0);

  // Streamed rows too long to stay in L2 until their second read are read from DRAM twice.
  EXPECT_DOUBLE_EQ(k.work(config(1, 1024, 32, 1, 0), shape(2, 393216), fp32).bytes, 2.0 * 2 * 393216 * 4);
  EXPECT_DOUBLE_EQ(k.work(config(1, 1024, 32, 1, 0), shape(4096, 393216), fp32).bytes, 3.0 * 4096 * 393216 * 4);

  EXPECT_DOUBLE_EQ(k.tolerance(fp32, shape(2, 393216)), 1e-5);
  EXPECT_DOUBLE_EQ(k.tolerance(bf16, shape(2, 393216)), 1e-2);
}

}  // namespace
}  // namespace gmjit::templates
