#include <gtest/gtest.h>

#include <algorithm>

#include <cstring>

#include "codegen/compiler.hpp"
#include "gmjit/error.hpp"
#include "core/module.hpp"
#include "templates/registry.hpp"

namespace gmjit::templates {
namespace {

const KernelDescriptor& softmax() { return find_kernel("softmax"); }

Shape shape(std::int64_t rows, std::int64_t cols) { return {{"rows", rows}, {"cols", cols}}; }

Config config(std::int64_t strategy, std::int64_t block, std::int64_t elems, std::int64_t vec, std::int64_t cached,
              std::int64_t split = 1) {
  return {{"strategy", strategy}, {"block", block}, {"elems", elems}, {"vec", vec}, {"cached", cached}, {"split", split}};
}

std::size_t count_if_valid(const Shape& s, const std::function<bool(const Config&)>& predicate) {
  std::size_t n = 0;
  for (const auto& c : valid_configs(softmax(), s)) n += predicate(c) ? 1 : 0;
  return n;
}

TEST(Softmax, IsABuiltInWithFp32First) {
  const auto& k = softmax();
  EXPECT_FALSE(is_user_kernel("softmax"));
  EXPECT_EQ(k.problem_keys, (std::vector<std::string>{"rows", "cols"}));
  EXPECT_EQ(k.dtypes, (std::vector<std::string>{"fp32", "bf16"}));
  EXPECT_EQ(k.header, "gmjit/softmax.cuh");
  ASSERT_TRUE(find_header(k.header).has_value());
  // bf16 comes with the row kernels' shared accesses, which the template's key covers too.
  const auto reached = reachable_headers(k.header);
  EXPECT_NE(std::find(reached.begin(), reached.end(), "gmjit/row_access.cuh"), reached.end());
  EXPECT_NE(find_header("gmjit/row_access.cuh")->find("cuda_bf16.h"), std::string::npos);
  // 3 strategies x 4 blocks x 4 elems x 2 vec x 2 cached x 5 splits; the rules leave at most 152
  // for any one shape (below), few enough to tune exhaustively.
  EXPECT_EQ(all_configs(k).size(), 960u);
  EXPECT_TRUE(k.work);
}

TEST(Softmax, DefaultConfigServesEveryShapeOfTheIssue) {
  for (const auto& s : {shape(1, 1), shape(3, 127), shape(127, 1000), shape(1, 131072), shape(2, 393216),
                        shape(8192, 8192), shape(4096, 32000), shape(32768, 128), shape(5, 1000003)}) {
    for (const char* dtype : {"fp32", "bf16"}) {
      EXPECT_NO_THROW(resolve_config(softmax(), s, dtype, {})) << format_assignments(s) << " " << dtype;
    }
  }
  EXPECT_THROW(resolve_config(softmax(), shape(4, 4), "fp16", {}), Error);
}

TEST(Softmax, ValidConfigsPerShape) {
  // Odd cols: single-element accesses, which vec=1 compiles to; every register-cached variant
  // holds 127 (a warp of 4 elements holds 128).
  EXPECT_EQ(valid_configs(softmax(), shape(3, 127)).size(), 64u);
  EXPECT_EQ(count_if_valid(shape(3, 127), [](const Config& c) { return c.at("vec") == 0; }), 0u);
  EXPECT_EQ(valid_configs(softmax(), shape(1, 1)).size(), 64u);
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
  // A warp caches up to 32 x 32 = 1024 columns.
  EXPECT_EQ(softmax().violation(config(0, 128, 32, 1, 1), shape(1, 1024)), "");
  EXPECT_NE(softmax().violation(config(0, 128, 32, 1, 1), shape(1, 1026)), "");
}

TEST(Softmax, ViolationsSayWhy) {
  const std::string odd = softmax().violation(config(1, 256, 8, 0, 0), shape(3, 127));
  EXPECT_NE(odd.find("vec=0"), std::string::npos) << odd;
  EXPECT_NE(odd.find("cols=127"), std::string::npos) << odd;
  const std::string long_row = softmax().violation(config(1, 256, 16, 1, 1), shape(2, 393216));
  EXPECT_NE(long_row.find("cached=1"), std::string::npos) << long_row;
  EXPECT_NE(long_row.find("4096"), std::string::npos) << long_row;  // 256 x 16, what fits
  EXPECT_NE(long_row.find("cols=393216"), std::string::npos) << long_row;
  const std::string warp = softmax().violation(config(0, 1024, 8, 1, 1), shape(2, 512));
  EXPECT_NE(warp.find("256"), std::string::npos) << "a warp holds 32 x 8, whatever the block: " << warp;
  EXPECT_NE(softmax().violation(config(1, 256, 8, 0, 0), shape(1, std::int64_t{1} << 30)).find("2^30"),
            std::string::npos);
  try {
    resolve_config(softmax(), shape(2, 393216), "fp32", {{"cached", 1}});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::usage);
    EXPECT_NE(e.message().find("cached=1"), std::string::npos) << e.message();
  }
}

TEST(Softmax, SplitRowsRulesNamesGeometryAndWorkspace) {
  const auto& k = softmax();
  const auto& fp32 = dtype_info("fp32");
  const auto& bf16 = dtype_info("bf16");
  const Shape long_rows = shape(4096, 393216);
  EXPECT_EQ(k.violation(config(2, 1024, 32, 1, 1, 16), long_rows), "");
  EXPECT_EQ(k.violation(config(2, 512, 32, 1, 1, 32), long_rows), "");
  EXPECT_NE(k.violation(config(2, 512, 32, 1, 1, 16), long_rows).find("must fit"), std::string::npos);
  EXPECT_NE(k.violation(config(2, 1024, 32, 1, 1, 32), long_rows).find("more than half"), std::string::npos);
  // Streamed slices: few registers, slices small enough to be reread from L2, no idle threads.
  EXPECT_EQ(k.violation(config(2, 256, 8, 1, 0, 32), long_rows), "");
  EXPECT_EQ(k.violation(config(2, 1024, 8, 1, 0, 16), long_rows), "");
  EXPECT_NE(k.violation(config(2, 256, 8, 1, 0, 8), long_rows).find("split >= 16"), std::string::npos);
  EXPECT_NE(k.violation(config(2, 256, 16, 1, 0, 32), long_rows).find("elems <= 8"), std::string::npos);
  EXPECT_NE(k.violation(config(2, 256, 8, 0, 0, 32), long_rows).find("vec=1"), std::string::npos);
  EXPECT_NE(k.violation(config(2, 1024, 8, 1, 0, 32), shape(1, 131072)).find("idle"), std::string::npos);
  EXPECT_NE(k.violation(config(2, 1024, 32, 1, 1, 1), long_rows).find("split must be above 1"), std::string::npos);
  EXPECT_NE(k.violation(config(1, 1024, 32, 1, 0, 16), long_rows).find("strategy=2 only"), std::string::npos);
  EXPECT_NE(k.violation(config(2, 128, 4, 1, 1, 4), shape(8, 2048)).find("16384"), std::string::npos);
  // The access-width rule of every row kernel holds for slices too.
  EXPECT_NE(k.violation(config(2, 128, 32, 0, 1, 32), shape(1, 131071)).find("vec=0"), std::string::npos);

  EXPECT_EQ(k.name_expression(config(2, 1024, 32, 1, 1, 16), long_rows, fp32),
            "gmjit::softmax_split<float, 1024, 32, 16, 16, true>");
  EXPECT_EQ(k.name_expression(config(2, 128, 32, 1, 1, 32), shape(1, 131072), bf16),
            "gmjit::softmax_split<__nv_bfloat16, 128, 32, 16, 32, true>");
  EXPECT_EQ(k.name_expression(config(2, 256, 8, 1, 0, 32), long_rows, fp32),
            "gmjit::softmax_split<float, 256, 8, 16, 32, false>");
  const auto g = k.geometry(config(2, 1024, 32, 1, 1, 16), long_rows, fp32);
  EXPECT_EQ(g.grid[0], 4096u * 16);
  EXPECT_EQ(g.block[0], 1024u);

  // Rows long enough to split get a ticket word, a pad, an arrival count per row and 32 pairs
  // per row; shorter ones only the two words no kernel of theirs touches.
  const auto tensors = k.tensors(shape(3, 131072));
  ASSERT_EQ(tensors.size(), 3u);
  EXPECT_TRUE(tensors[2].workspace);
  EXPECT_EQ(tensors[2].dtype, "u32");
  EXPECT_EQ(tensors[2].elements, 2 + 4 + 2 * 32 * 3);
  EXPECT_EQ(k.tensors(shape(8192, 8192))[2].elements, 2);
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
  const auto& fp32 = dtype_info("fp32");
  const auto& bf16 = dtype_info("bf16");
  EXPECT_EQ(k.name_expression(config(0, 256, 8, 1, 1), shape(32768, 128), fp32),
            "gmjit::softmax<float, 32, 256, 8, 16, true>");
  EXPECT_EQ(k.name_expression(config(1, 512, 16, 1, 0), shape(8192, 8192), bf16),
            "gmjit::softmax<__nv_bfloat16, 512, 512, 16, 16, false>");
  // Four bf16 elements per thread are 8 bytes: the access never outgrows a thread's slice.
  EXPECT_EQ(k.name_expression(config(0, 128, 4, 1, 1), shape(8, 64), bf16),
            "gmjit::softmax<__nv_bfloat16, 32, 128, 4, 8, true>");
  // 1002 bf16 are 2004 bytes (4-byte rows), as fp32 8016 bytes (16).
  EXPECT_EQ(k.name_expression(config(1, 256, 8, 1, 0), shape(127, 1002), bf16),
            "gmjit::softmax<__nv_bfloat16, 256, 256, 8, 4, false>");
  EXPECT_EQ(k.name_expression(config(1, 256, 8, 1, 0), shape(127, 1002), fp32),
            "gmjit::softmax<float, 256, 256, 8, 8, false>");
  EXPECT_EQ(k.name_expression(config(1, 256, 8, 1, 0), shape(127, 1000), fp32),
            "gmjit::softmax<float, 256, 256, 8, 16, false>");
  // vec=0 is one element per access, and so is vec=1 for an odd cols.
  EXPECT_EQ(k.name_expression(config(1, 1024, 32, 0, 1), shape(3, 128), bf16),
            "gmjit::softmax<__nv_bfloat16, 1024, 1024, 32, 2, true>");
  EXPECT_EQ(k.name_expression(config(1, 1024, 32, 0, 1), shape(3, 128), fp32),
            "gmjit::softmax<float, 1024, 1024, 32, 4, true>");
  EXPECT_EQ(k.name_expression(config(1, 1024, 32, 1, 1), shape(3, 127), bf16),
            "gmjit::softmax<__nv_bfloat16, 1024, 1024, 32, 2, true>");
  EXPECT_EQ(k.name_expression(config(1, 1024, 32, 1, 1), shape(3, 127), fp32),
            "gmjit::softmax<float, 1024, 1024, 32, 4, true>");
  const auto generated = codegen::specialize(k, shape(3, 127), "bf16", k.default_config);
  EXPECT_NE(generated.source.find("#include \"gmjit/softmax.cuh\""), std::string::npos);
  EXPECT_EQ(codegen::specialize_reference(k, shape(3, 127), "bf16").name_expression,
            "gmjit::reference::softmax<__nv_bfloat16>");
}

TEST(Softmax, GeometryAtEdgeSizes) {
  const auto& k = softmax();
  const auto& fp32 = dtype_info("fp32");
  // A warp per row: block / 32 rows per block.
  auto g = k.geometry(config(0, 256, 8, 0, 1), shape(1, 1), fp32);
  EXPECT_EQ(g.grid[0], 1u);
  EXPECT_EQ(g.block[0], 256u);
  EXPECT_EQ(k.geometry(config(0, 256, 8, 0, 1), shape(32768, 128), fp32).grid[0], 4096u);
  EXPECT_EQ(k.geometry(config(0, 1024, 8, 0, 1), shape(33, 128), fp32).grid[0], 2u);
  // A block per row.
  g = k.geometry(config(1, 1024, 32, 1, 0), shape(2, 393216), fp32);
  EXPECT_EQ(g.grid[0], 2u);
  EXPECT_EQ(g.block[0], 1024u);
  EXPECT_EQ(g.dynamic_shared_bytes, 0u);
  EXPECT_EQ(k.geometry(config(1, 128, 8, 1, 0), shape(8192, 8192), fp32).grid[0], 8192u);
  // The kernel strides over rows, so the grid is capped rather than the shape refused.
  EXPECT_EQ(k.geometry(config(1, 128, 8, 0, 0), shape(std::int64_t{1} << 32, 1), fp32).grid[0], 2147483647u);
  EXPECT_EQ(k.reference_geometry(shape(100000, 3)).grid[0], 65535u);
  EXPECT_EQ(k.reference_geometry(shape(3, 100000)).block[0], 256u);
}

TEST(Softmax, TensorsScalarsWorkAndTolerance) {
  const auto& k = softmax();
  const auto tensors = k.tensors(shape(3, 127));
  ASSERT_EQ(tensors.size(), 3u);
  EXPECT_EQ(tensors[0].name, "x");
  EXPECT_FALSE(tensors[0].output);
  EXPECT_EQ(tensors[0].elements, 381);
  EXPECT_TRUE(tensors[1].output);
  EXPECT_EQ(tensors[1].elements, 381);

  // The kernel's (long long rows, int cols).
  detail::KernelArgs args;
  k.add_scalars(args, shape(3, 393216));
  ASSERT_EQ(args.size(), 2u);
  long long rows = 0;
  int cols = 0;
  std::memcpy(&rows, args.pointers()[0], sizeof rows);
  std::memcpy(&cols, args.pointers()[1], sizeof cols);
  EXPECT_EQ(rows, 3);
  EXPECT_EQ(cols, 393216);

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
