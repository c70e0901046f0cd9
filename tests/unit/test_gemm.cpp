#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "cli_runner.hpp"
#include "codegen/compiler.hpp"
#include "gmjit/error.hpp"
#include "templates/registry.hpp"
#include "unit/templates_test_support.hpp"

namespace gmjit::templates {
namespace {

using testing::usage_message;

Shape gemm_shape(std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t trans_b) {
  return {{"m", m}, {"n", n}, {"k", k}, {"trans_b", trans_b}};
}

const KernelDescriptor& gemm() { return find_kernel("gemm"); }

Config with(const Config& base, const Config& changes) {
  Config c = base;
  for (const auto& [key, value] : changes) c[key] = value;
  return c;
}

Config skinny(const Config& changes = {}) {
  return with(with(gemm().default_config, {{"path", 1}}), changes);
}

TEST(Gemm, DescribesItsProblem) {
  const auto& k = gemm();
  EXPECT_EQ(k.problem_keys, (std::vector<std::string>{"m", "n", "k", "trans_b"}));
  EXPECT_EQ(k.flag_keys, (std::vector<std::string>{"trans_b"}));
  EXPECT_EQ(k.dtypes, (std::vector<std::string>{"bf16", "fp16"}));
  ASSERT_TRUE(find_header(k.header).has_value());
  const auto reached = reachable_headers(k.header);
  EXPECT_NE(std::find(reached.begin(), reached.end(), "gmjit/gemm_skinny.cuh"), reached.end());
  const auto tensors = k.tensors(gemm_shape(3, 5, 7, 1));
  ASSERT_EQ(tensors.size(), 3u);
  EXPECT_EQ(tensors[0].elements, 21);
  EXPECT_EQ(tensors[1].elements, 35);
  EXPECT_EQ(tensors[2].elements, 15);
  EXPECT_TRUE(tensors[2].output);
  EXPECT_TRUE(k.work);
  EXPECT_TRUE(k.workspace);
  EXPECT_TRUE(k.element_bound);
}

TEST(Gemm, Domains) {
  const auto& k = gemm();
  std::vector<std::pair<std::string, std::vector<std::int64_t>>> expected = {
      {"path", {0, 1}},         {"bm", {64, 128, 256}},   {"bn", {64, 128, 192, 256}}, {"bk", {32, 64}},
      {"warps_m", {1, 2, 4}},   {"warps_n", {1, 2, 4}},   {"stages", {2, 3, 4, 5, 6, 8, 10, 12}}, {"group_m", {1, 8}},
      {"split_k", {1, 2, 4, 8}}, {"sk_warps", {4, 8}},     {"sk_cols", {2, 4}},    {"sk_unroll", {2, 4, 8}},
      {"wgmma", {0, 1}},        {"consumers", {1, 2}},    {"pingpong", {0, 1}},   {"cluster", {1, 2}},
      {"tma_store", {0, 1}}};
  ASSERT_EQ(k.params.size(), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(k.params[i].name, expected[i].first);
    EXPECT_EQ(k.params[i].values, expected[i].second) << expected[i].first;
  }
  EXPECT_EQ(k.default_config.at("path"), 0);
  EXPECT_EQ(k.default_config.at("split_k"), 1);
}

// trans_b is a flag: 0 is a problem, 2 is not; every other key stays a positive size.
TEST(Gemm, TransBIsAFlagKey) {
  const auto& k = gemm();
  EXPECT_NO_THROW(normalize_problem(k, gemm_shape(8, 8, 8, 0), "bf16"));
  EXPECT_NO_THROW(normalize_problem(k, gemm_shape(8, 8, 8, 1), "fp16"));
  EXPECT_NE(usage_message([&] { normalize_problem(k, gemm_shape(8, 8, 8, 2), "bf16"); }).find("0 or 1"),
            std::string::npos);
  EXPECT_NE(usage_message([&] { normalize_problem(k, gemm_shape(0, 8, 8, 0), "bf16"); }).find("m=0"),
            std::string::npos);
  EXPECT_NE(usage_message([&] { normalize_problem(k, {{"m", 8}, {"n", 8}, {"k", 8}}, "bf16"); }).find("trans_b"),
            std::string::npos);
  EXPECT_THROW(normalize_problem(k, gemm_shape(8, 8, 8, 0), "fp32"), Error);
  // Other kernels' sizes still must be positive.
  EXPECT_THROW(normalize_problem(find_kernel("sgemm"), {{"m", 0}, {"n", 8}, {"k", 8}}, "fp32"), Error);
}

TEST(Gemm, ShapeBounds) {
  const auto& k = gemm();
  const std::int64_t big = std::int64_t{1} << 31;
  EXPECT_NE(usage_message([&] { normalize_problem(k, gemm_shape(big, 1, 1, 1), "bf16"); }).find("m as int"),
            std::string::npos);
  EXPECT_NE(usage_message([&] { normalize_problem(k, gemm_shape(1, 1, big, 0), "bf16"); }).find("k as int"),
            std::string::npos);
  EXPECT_NE(usage_message([&] { normalize_problem(k, gemm_shape(65536, 65536, 1, 1), "bf16"); }).find("64-bit"),
            std::string::npos);
  EXPECT_NE(usage_message([&] { normalize_problem(k, gemm_shape(1, 32768, 65536, 1), "bf16"); }).find("64-bit"),
            std::string::npos);
  EXPECT_NO_THROW(normalize_problem(k, gemm_shape(32768, 32768, 32768, 1), "bf16"));
  // gemm_mma indexes within a tile row in 32 bits: 256 * k and, with B as k x n, 64 * n.
  EXPECT_NE(usage_message([&] { normalize_problem(k, gemm_shape(1, 16, 1 << 23, 1), "bf16"); }).find("2^23"),
            std::string::npos);
  EXPECT_NO_THROW(normalize_problem(k, gemm_shape(1, 16, (1 << 23) - 1, 1), "bf16"));
  EXPECT_NE(usage_message([&] { normalize_problem(k, gemm_shape(1, 1 << 25, 16, 0), "bf16"); }).find("2^25"),
            std::string::npos);
  EXPECT_NO_THROW(normalize_problem(k, gemm_shape(1, 1 << 25, 16, 1), "bf16"));
  EXPECT_TRUE(valid_configs(k, gemm_shape(65536, 65536, 1, 1)).empty());
}

TEST(Gemm, DefaultServesEveryShape) {
  const auto& k = gemm();
  for (const auto& s : {gemm_shape(1, 1, 1, 0), gemm_shape(1, 1, 1, 1), gemm_shape(17, 33, 29, 0),
                        gemm_shape(16, 4096, 1024, 1), gemm_shape(64, 64, 8, 1), gemm_shape(4096, 4096, 4096, 1),
                        gemm_shape(32768, 32768, 32768, 0), gemm_shape(1, 2147483647 / 2, 1, 1),
                        gemm_shape(100000, 7, 3, 0)}) {
    for (const char* dtype : {"bf16", "fp16"}) {
      EXPECT_NO_THROW(resolve_config(k, s, dtype, {})) << format_assignments(s) << " " << dtype;
    }
  }
}

TEST(Gemm, MmaRulesMirrorTheKernel) {
  const auto& k = gemm();
  const Config d = k.default_config;
  const Shape s = gemm_shape(4096, 4096, 4096, 1);
  testing::expect_verdicts(
      k, {
             {d, s, ""},
             {with(d, {{"warps_m", 1}, {"warps_n", 1}}), s, "outside [2, 8]"},
             {with(d, {{"warps_m", 4}, {"warps_n", 4}}), s, "outside [2, 8]"},
             {with(d, {{"bm", 64}, {"warps_m", 4}, {"warps_n", 2}}), s, ""},  // 16x64 warp tiles
             {with(d, {{"bm", 256}, {"bn", 128}, {"warps_m", 2}, {"warps_n", 1}}), s, "exceeds 64"},
             {with(d, {{"bm", 128}, {"bn", 128}, {"warps_m", 1}, {"warps_n", 2}}), s, "exceeds 64"},
             {with(d, {{"bm", 256}, {"bn", 256}, {"warps_m", 4}, {"warps_n", 2}}), s, "exceeds 64"},
             // 128x32 warp tiles: 4096 accumulators, but 128 rows of them [5]
             {with(d, {{"bm", 128}, {"bn", 64}, {"warps_m", 1}, {"warps_n", 2}}), s, "exceeds 64"},
             {with(d, {{"bm", 256}, {"bn", 128}, {"bk", 64}, {"stages", 4}, {"warps_m", 4}, {"warps_n", 2}}), s, ""},
             // 4 * (256 + 128) * 64 * 2 = 196608 fits, 5 stages (245760) do not.
             {with(d, {{"bm", 256}, {"bn", 128}, {"bk", 64}, {"stages", 5}, {"warps_m", 4}, {"warps_n", 2}}), s,
              "shared bytes"},
             {with(d, {{"sk_warps", 4}}), s, "path=0 does not use sk_warps"},
             {with(d, {{"group_m", 8}}), s, ""},
             // One row or one column of tiles: a grouped raster is the row-major one.
             {with(d, {{"group_m", 8}}), gemm_shape(128, 4096, 64, 1), "as group_m=1"},
             {with(d, {{"group_m", 8}}), gemm_shape(4096, 100, 64, 1), "as group_m=1"},
             {with(d, {{"group_m", 8}}), gemm_shape(129, 129, 64, 1), ""},
             {with(d, {{"sk_unroll", 8}}), s, "path=0 does not use sk_unroll"},
         });
}

TEST(Gemm, SkinnyOnlyForSmallM) {
  const auto& k = gemm();
  testing::expect_verdicts(
      k, {
             {skinny(), gemm_shape(1, 4096, 4096, 1), ""},
             {skinny(), gemm_shape(16, 4096, 4096, 1), ""},
             {skinny(), gemm_shape(17, 4096, 4096, 1), "m <= 16"},
             {skinny(), gemm_shape(16, 4096, 4096, 0), ""},
             {skinny({{"bm", 64}}), gemm_shape(1, 4096, 4096, 1), "path=1 does not use bm"},
             {skinny({{"group_m", 8}}), gemm_shape(1, 4096, 4096, 1), "path=1 does not use group_m"},
             {skinny({{"sk_cols", 4}}), gemm_shape(1, 4096, 4096, 1), ""},
             {skinny({{"sk_cols", 4}}), gemm_shape(1, 4096, 4096, 0), "trans_b=0 does not use sk_cols"},
             {skinny({{"sk_cols", 4}, {"sk_unroll", 8}}), gemm_shape(1, 4096, 4096, 1), "more than 16"},
             {skinny({{"sk_cols", 4}, {"sk_unroll", 8}}), gemm_shape(1, 4096, 4096, 0), "does not use sk_cols"},
             {skinny({{"sk_unroll", 8}}), gemm_shape(1, 4096, 4096, 0), ""},
             {skinny({{"sk_unroll", 8}}), gemm_shape(8, 4096, 4096, 1), ""},
             {skinny({{"sk_unroll", 8}}), gemm_shape(9, 4096, 4096, 1), "spills"},
             {skinny({{"sk_warps", 4}, {"sk_unroll", 2}}), gemm_shape(5, 4095, 4093, 0), "spills"},
             {skinny({{"sk_warps", 4}, {"sk_unroll", 4}}), gemm_shape(5, 4095, 4093, 0), ""},
             {skinny({{"sk_warps", 4}, {"sk_unroll", 2}}), gemm_shape(5, 4096, 4096, 0), ""},
             {skinny({{"sk_unroll", 8}}), gemm_shape(16, 4096, 4096, 0), ""},
         });
  for (const auto& config : valid_configs(k, gemm_shape(17, 64, 64, 1))) EXPECT_EQ(config.at("path"), 0);
  EXPECT_GT(testing::count_if_valid(k, gemm_shape(16, 64, 64, 1), [](const Config& c) { return c.at("path") == 1; }),
            0u);
}

TEST(Gemm, SplitKRules) {
  const auto& k = gemm();
  const Config d = k.default_config;
  testing::expect_verdicts(
      k, {
             // 128x128 tiles of 1024x1024: 64 blocks, room for split-K.
             {with(d, {{"split_k", 8}}), gemm_shape(1024, 1024, 4096, 1), ""},
             // 4096x4096: 1024 tiles, already 7.8 waves.
             {with(d, {{"split_k", 2}}), gemm_shape(4096, 4096, 4096, 1), "two waves"},
             {with(d, {{"bm", 256}, {"warps_m", 4}, {"warps_n", 2}, {"split_k", 2}}), gemm_shape(4096, 4096, 4096, 1),
              "two waves"},
             {with(d, {{"bm", 256}, {"warps_m", 4}, {"warps_n", 2}, {"split_k", 2}}), gemm_shape(2048, 2048, 4096, 1),
              ""},
             // k = 64 is two 32-deep tiles: four slices leave two empty.
             {with(d, {{"split_k", 2}}), gemm_shape(128, 128, 64, 0), ""},
             {with(d, {{"split_k", 4}}), gemm_shape(128, 128, 64, 0), "empty"},
             {with(d, {{"split_k", 2}}), gemm_shape(64, 64, 8, 0), "empty"},
             // m * n above 2^25 has no workspace.
             {with(d, {{"split_k", 2}}), gemm_shape(8192, 8192, 64, 0), "2^25"},
             // skinny: k-slices of 8-element vectors; trans_b=1 blocks cover sk_warps*sk_cols columns
             {skinny({{"split_k", 8}}), gemm_shape(1, 4096, 4096, 1), ""},
             {skinny({{"split_k", 8}}), gemm_shape(1, 4096, 56, 1), "empty"},
             {skinny({{"split_k", 4}, {"sk_warps", 4}, {"sk_cols", 2}}), gemm_shape(1, 4096, 4096, 1), ">= 16"},
             {skinny({{"split_k", 1}, {"sk_warps", 4}, {"sk_cols", 2}}), gemm_shape(1, 4096, 4096, 1), ""},
             {skinny({{"split_k", 2}}), gemm_shape(1, 8192, 4096, 1), "two waves"},   // 512 blocks of 16
             {skinny({{"split_k", 8}}), gemm_shape(16, 4096, 4096, 0), ""},          // 16 blocks of 256
         });
}

// No two valid configurations at a shape launch the same kernel the same way, so the tuner never
// measures one kernel twice.
TEST(Gemm, NoTwoValidConfigsAreTheSameLaunch) {
  const auto& k = gemm();
  for (const auto& s : {gemm_shape(1, 1, 1, 0), gemm_shape(16, 4096, 1024, 1), gemm_shape(16, 4096, 1024, 0),
                        gemm_shape(17, 33, 29, 1), gemm_shape(4096, 4096, 4096, 1)}) {
    std::set<std::tuple<std::string, unsigned, unsigned, unsigned, unsigned>> seen;
    for (const auto& c : valid_configs(k, s)) {
      const auto g = k.geometry(c, s, dtype_info("bf16"));
      EXPECT_TRUE(seen.insert({k.name_expression(c, s, dtype_info("bf16")), g.grid[0], g.grid[2], g.block[0],
                               g.dynamic_shared_bytes})
                      .second)
          << format_assignments(c) << " at " << format_assignments(s);
    }
  }
}

// all_configs lists each family's own parameters over their domains with the others' at the
// default: 5184 mma (with split_k; stages 2-5 and bn 64, 128, 256 only), 48 skinny and 12288 wgmma
// (bm, bn, stages, group_m, consumers, pingpong, cluster, tma_store, split_k) configurations, not
// the 5308416 of the cross product, whose others violation rejects at every shape.
TEST(Gemm, ConfigurationsAreEachPathsOwnCrossProduct) {
  const auto& k = gemm();
  const auto listed = all_configs(k);
  EXPECT_EQ(listed.size(), 5184u + 48u + 768u * 4u * 2u * 2u);
  std::set<Config> unique(listed.begin(), listed.end());
  EXPECT_EQ(unique.size(), listed.size());
  for (const auto& c : listed) {
    ASSERT_EQ(c.size(), k.params.size());
    for (const auto& p : k.params) {
      EXPECT_NE(std::find(p.values.begin(), p.values.end(), c.at(p.name)), p.values.end()) << format_assignments(c);
    }
  }
  EXPECT_EQ(listed.front(), with(k.default_config, {{"bm", 64}, {"bn", 64}, {"bk", 32}, {"warps_m", 1},
                                                     {"warps_n", 1}, {"stages", 2}}));
  // A sample of the cross product outside the list: always rejected.
  std::size_t outside = 0, index = 0;
  Config c;
  std::function<void(std::size_t)> walk = [&](std::size_t i) {
    if (i == k.params.size()) {
      if (index++ % 97 != 0 || unique.count(c) != 0) return;
      ++outside;
      for (const auto& s : {gemm_shape(1, 4096, 4096, 1), gemm_shape(4, 512, 512, 0), gemm_shape(512, 512, 512, 1)}) {
        EXPECT_NE(k.violation(c, s), "") << format_assignments(c) << " at " << format_assignments(s);
      }
      return;
    }
    for (const auto value : k.params[i].values) {
      c[k.params[i].name] = value;
      walk(i + 1);
    }
  };
  walk(0);
  EXPECT_GT(outside, 1000u);
}

// The numbers the gpu and nvrtc tiers' run sizes rest on.
TEST(Gemm, ValidConfigCounts) {
  const auto& k = gemm();
  const auto count = [&](const Shape& s, std::int64_t path) {
    return testing::count_if_valid(k, s, [&](const Config& c) { return c.at("path") == path && c.at("wgmma") == 0; });
  };
  const auto count_wgmma = [&](const Shape& s) {
    return testing::count_if_valid(k, s, [&](const Config& c) { return c.at("wgmma") == 1; });
  };
  // The Hopper family: 13 cooperative (bm, bn, consumers) within 128 accumulators a consumer
  // thread and 7 pingpong tiles ((bm/64)*(bn/2) <= 128). The stages that fit the shared memory,
  // 1056 + stages*((bm+bn)*128+16) bytes: all eight (2-6, 8, 10, 12) for 64x64, 2-6 and 8 for
  // 64x128 and 128x64, 2-6 for 128x128 and 64x192, 2-5 for 64x256, 256x64 and 128x192, 2-4 for
  // 128x256 and 256x128: 63 cooperative and 38 pingpong. Times group_m 1 and 8 on tile grids of
  // two rows and columns or more; none where k or n is not a multiple of 8. Split-K only where the
  // tiles leave SMs idle, every slice gets a 64-deep k-tile and k has more of them than the ring
  // has stages. Clusters of two where bn >= 128 and there are two tile rows: at 4096^2, 35
  // cooperative and 20 pingpong, times group_m 1 and 8.
  // tma_store=1 (unsplit only) adds 16 KiB of store buffers a consumer, which leaves out 5 stages
  // of 128x192 and 256x64 with two consumers and of pingpong 64x256 and 256x64: 61 cooperative
  // and 36 pingpong, 53 with clusters (34 + 19).
  EXPECT_EQ(count_wgmma(gemm_shape(4096, 4096, 4096, 1)), 2 * (101u + 97u) + 2 * (55u + 53u));  // no split
  EXPECT_EQ(count_wgmma(gemm_shape(4096, 4096, 4096, 0)), 2 * (101u + 97u) + 2 * (55u + 53u));
  EXPECT_EQ(count_wgmma(gemm_shape(64, 64, 8, 0)), 101u + 97u);  // one k-tile: no split; one tile row: no cluster
  // The 101, group_m 8 for the 64x64 tiles' 2x2 grid (8 cooperative, 8 pingpong), clusters of the
  // two 64-row tile rows for 64x128, 64x192 and 64x256 (6 + 5 + 4 stages, one consumer or
  // pingpong; group_m 1: the pair is one unit row). No split: every ring holds both k-tiles.
  // With tma_store=1 the same less pingpong 64x256's 5 stages.
  EXPECT_EQ(count_wgmma(gemm_shape(128, 128, 128, 1)), (101u + 16u + 30u) + (97u + 16u + 29u));
  EXPECT_EQ(count_wgmma(gemm_shape(16, 4096, 1024, 1)), 4 * 101u + 97u);  // 16 k-tiles: splits 1, 2, 4, 8
  EXPECT_EQ(count_wgmma(gemm_shape(17, 33, 29, 1)), 0u);
  EXPECT_EQ(count_wgmma(gemm_shape(1, 1, 1, 1)), 0u);
  // No split-K at 8192^2 (m*n above 2^25) nor at 4096^2 (every valid tile grid has 512 tiles or
  // more): 206 tile, warp and stage choices (bk 2 x stages 4 x the 9 bm,bn pairs' warp layouts
  // within rules 3-6, less the shared-memory ones), times group_m 1 and 8.
  EXPECT_EQ(count(gemm_shape(8192, 8192, 4096, 1), 0), 412u);
  EXPECT_EQ(count(gemm_shape(8192, 8192, 4096, 1), 1), 0u);
  EXPECT_EQ(count(gemm_shape(4096, 4096, 4096, 1), 0), 412u);
  // One tile: group_m=1 only, k=1 cannot split.
  EXPECT_EQ(count(gemm_shape(1, 1, 1, 0), 0), 206u);
  // trans_b=0: sk_warps 2 x sk_unroll 3; trans_b=1: x sk_cols 2, less sk_cols*sk_unroll = 32.
  EXPECT_EQ(count(gemm_shape(1, 1, 1, 0), 1), 6u);
  EXPECT_EQ(count(gemm_shape(1, 1, 1, 1), 1), 10u);
  // 10 unsplit, and 7 per split_k in {2, 4, 8} (blocks of at least 16 columns); at m > 8 no
  // sk_unroll=8 (sk_warps 4 and 8 unsplit, sk_warps 8 with each split).
  EXPECT_EQ(count(gemm_shape(8, 4096, 1024, 1), 1), 31u);
  EXPECT_EQ(count(gemm_shape(16, 4096, 1024, 1), 1), 26u);
  EXPECT_EQ(count(gemm_shape(16, 4096, 1024, 0), 1), 24u);
  EXPECT_EQ(count(gemm_shape(17, 33, 29, 1), 1), 0u);
  // What tests/gpu/test_gemm.cpp verifies per dtype: every valid configuration at its shapes.
  std::size_t total = 0;
  for (std::int64_t trans_b : {0, 1}) {
    for (const auto& [m, n, kk] : std::vector<std::tuple<std::int64_t, std::int64_t, std::int64_t>>{
             {1, 1, 1}, {17, 33, 29}, {128, 128, 128}, {16, 4096, 1024}, {64, 64, 8}}) {
      const Shape s = gemm_shape(m, n, kk, trans_b);
      std::printf("[ configs  ] gemm %s: %zu mma + %zu skinny + %zu wgmma\n", format_assignments(s).c_str(),
                  count(s, 0), count(s, 1), count_wgmma(s));
      total += count(s, 0) + count(s, 1) + count_wgmma(s);
    }
  }
  std::printf("[ configs  ] gemm: %zu per dtype at the gpu tier's shapes\n", total);
  EXPECT_EQ(total, 4262u + 2 * ((147u + 142u) + (4 * 101u + 97u) + (101u + 97u)));
}

TEST(Gemm, NameExpressions) {
  const auto& k = gemm();
  const Config d = k.default_config;
  testing::expect_names(
      k, {
             {d, gemm_shape(4096, 4096, 4096, 1), "bf16",
              "gmjit::gemm_mma<__nv_bfloat16, true, 128, 128, 32, 2, 2, 3, 1, true>"},
             {d, gemm_shape(17, 33, 29, 0), "fp16", "gmjit::gemm_mma<__half, false, 128, 128, 32, 2, 2, 3, 1, false>"},
             // k % 8 == 0 but n % 8 != 0: not aligned
             {d, gemm_shape(64, 60, 64, 1), "fp16", "gmjit::gemm_mma<__half, true, 128, 128, 32, 2, 2, 3, 1, false>"},
             {skinny({{"split_k", 4}}), gemm_shape(1, 4096, 4096, 1), "bf16",
              "gmjit::gemm_skinny<__nv_bfloat16, true, 1, 8, 2, 4, true>"},
             {skinny(), gemm_shape(3, 4096, 4096, 0), "fp16", "gmjit::gemm_skinny<__half, false, 4, 8, 2, 4, true>"},
             {skinny(), gemm_shape(9, 4095, 4096, 1), "fp16", "gmjit::gemm_skinny<__half, true, 16, 8, 2, 4, false>"},
         });
  EXPECT_EQ(k.reference_expression(dtype_info("bf16"), gemm_shape(1, 1, 1, 1)),
            "gmjit::reference::gemm<__nv_bfloat16, true>");
  EXPECT_EQ(k.reference_expression(dtype_info("fp16"), gemm_shape(1, 1, 1, 0)), "gmjit::reference::gemm<__half, false>");
  const auto generated = codegen::specialize(k, gemm_shape(64, 64, 64, 0), "bf16", d);
  EXPECT_NE(generated.source.find("#include \"gmjit/gemm_kernels.cuh\""), std::string::npos);
}

TEST(Gemm, Geometry) {
  const auto& k = gemm();
  const auto mma = k.geometry(with(k.default_config, {{"split_k", 4}}), gemm_shape(1000, 300, 4096, 1),
                              dtype_info("bf16"));
  EXPECT_EQ(mma.grid[0], 8u * 3u);
  EXPECT_EQ(mma.grid[1], 1u);
  EXPECT_EQ(mma.grid[2], 4u);
  EXPECT_EQ(mma.block[0], 128u);
  EXPECT_EQ(mma.dynamic_shared_bytes, 3u * 256u * 32u * 2u);
  const auto rows = k.geometry(skinny({{"split_k", 2}}), gemm_shape(4, 1000, 4096, 1), dtype_info("fp16"));
  EXPECT_EQ(rows.grid[0], 63u);  // 16 columns per block
  EXPECT_EQ(rows.grid[2], 2u);
  EXPECT_EQ(rows.block[0], 256u);
  EXPECT_EQ(rows.dynamic_shared_bytes, 0u);
  const auto cols = k.geometry(skinny(), gemm_shape(4, 1000, 4096, 0), dtype_info("fp16"));
  EXPECT_EQ(cols.grid[0], 4u);  // 256 columns per block
  detail::KernelArgs args;
  k.add_scalars(args, gemm_shape(3, 5, 7, 1));
  ASSERT_EQ(args.size(), 3u);
  EXPECT_EQ(testing::scalar_at<int>(args, 0), 3);
  EXPECT_EQ(testing::scalar_at<int>(args, 1), 5);
  EXPECT_EQ(testing::scalar_at<int>(args, 2), 7);
}

Config wgmma(std::int64_t bm, std::int64_t bn, std::int64_t stages, std::int64_t consumers, std::int64_t group_m = 1) {
  return with(gemm().default_config, {{"wgmma", 1}, {"bk", 64}, {"bm", bm}, {"bn", bn}, {"stages", stages},
                                      {"consumers", consumers}, {"group_m", group_m}});
}

// The Hopper family: a persistent grid of at most one block an SM, a producer warpgroup beside the
// consumers, the ring's bytes plus alignment slack and barriers; no split, no workspace of its own.
TEST(Gemm, WgmmaGeometryAndName) {
  const auto& k = gemm();
  const auto big = k.geometry(wgmma(128, 256, 4, 2, 8), gemm_shape(4096, 4096, 4096, 1), dtype_info("bf16"));
  EXPECT_EQ(big.grid[0], 132u);  // 32 x 16 tiles walked by 132 blocks
  EXPECT_EQ(big.grid[2], 1u);
  EXPECT_EQ(big.block[0], 384u);
  EXPECT_EQ(big.dynamic_shared_bytes, 1056u + 4u * ((128u + 256u) * 128u + 16u));
  EXPECT_EQ(big.blocks_per_cluster(), 1u);
  const auto small = k.geometry(wgmma(64, 64, 2, 1), gemm_shape(100, 200, 64, 0), dtype_info("fp16"));
  EXPECT_EQ(small.grid[0], 2u * 4u);
  EXPECT_EQ(small.block[0], 256u);
  // The TMA store epilogue: two 8 KiB chunk buffers a consumer after the ring.
  const auto stored = k.geometry(with(wgmma(128, 256, 4, 2, 8), {{"tma_store", 1}}), gemm_shape(4096, 4096, 4096, 1),
                                 dtype_info("bf16"));
  EXPECT_EQ(stored.dynamic_shared_bytes, big.dynamic_shared_bytes + 2u * 2u * 8192u);
  testing::expect_names(k, {{wgmma(128, 256, 4, 2, 8), gemm_shape(4096, 4096, 4096, 1), "bf16",
                             "gmjit::gemm_wgmma<__nv_bfloat16, true, 128, 256, 4, 2, 8, false, 1, false>"},
                            {wgmma(64, 128, 3, 1), gemm_shape(77, 4096, 512, 0), "fp16",
                             "gmjit::gemm_wgmma<__half, false, 64, 128, 3, 1, 1, false, 1, false>"},
                            {with(wgmma(128, 128, 4, 2), {{"pingpong", 1}, {"cluster", 2}}),
                             gemm_shape(4096, 4096, 4096, 1), "bf16",
                             "gmjit::gemm_wgmma<__nv_bfloat16, true, 128, 128, 4, 2, 1, true, 2, false>"},
                            {with(wgmma(64, 64, 8, 1), {{"tma_store", 1}}), gemm_shape(16, 4096, 4096, 1), "bf16",
                             "gmjit::gemm_wgmma<__nv_bfloat16, true, 64, 64, 8, 1, 1, false, 1, true>"}});
  // Clusters: an even grid of whole clusters, each walking pairs of tile rows; with a split the
  // SMs are shared among the slices.
  const auto pair = k.geometry(with(wgmma(128, 256, 4, 2, 8), {{"cluster", 2}}), gemm_shape(4096, 4096, 4096, 1),
                               dtype_info("bf16"));
  EXPECT_EQ(pair.grid[0], 132u);
  EXPECT_EQ(pair.blocks_per_cluster(), 2u);
  EXPECT_EQ(pair.cluster[0], 2u);
  const auto few = k.geometry(with(wgmma(64, 128, 4, 1), {{"cluster", 2}, {"split_k", 4}}),
                              gemm_shape(300, 512, 4096, 1), dtype_info("bf16"));
  EXPECT_EQ(few.grid[0], 2u * 3u * 4u);  // 5 tile rows in 3 pairs, 4 columns: 12 pairs within 132 / 4 / 2
  EXPECT_EQ(few.grid[2], 4u);
  // Only this family derives arguments from the tensors' addresses (its three tensor maps).
  detail::KernelArgs none;
  const std::uint64_t addresses[3] = {0x10000, 0x20000, 0x30000};
  k.add_address_args(none, k.default_config, gemm_shape(64, 64, 64, 1), dtype_info("bf16"), addresses);
  EXPECT_EQ(none.size(), 0u);
  DeviceInfo ada;
  ada.arch = "sm_89";
  EXPECT_NE(k.device_violation(wgmma(128, 128, 4, 2), ada).find("sm_90a"), std::string::npos);
  EXPECT_EQ(k.device_violation(k.default_config, ada), "");
}

TEST(Gemm, WgmmaRules) {
  const auto& k = gemm();
  const Shape s = gemm_shape(4096, 4096, 4096, 1);
  EXPECT_EQ(k.violation(wgmma(128, 256, 4, 2, 8), s), "");
  EXPECT_EQ(k.violation(with(wgmma(128, 256, 4, 2, 8), {{"cluster", 2}}), s), "");
  EXPECT_NE(k.violation(with(wgmma(128, 64, 4, 2), {{"cluster", 2}}), s).find("[9]"), std::string::npos)
      << "half of a 64-wide B tile is not a panel";
  EXPECT_NE(k.violation(with(wgmma(128, 128, 4, 2), {{"cluster", 2}}), gemm_shape(100, 4096, 4096, 1)), "")
      << "one tile row has no partner";
  EXPECT_NE(k.violation(with(k.default_config, {{"cluster", 2}}), s), "") << "cluster is wgmma=1's alone";
  EXPECT_NE(k.violation(with(wgmma(128, 128, 4, 2), {{"bk", 32}}), s), "");
  EXPECT_NE(k.violation(with(wgmma(128, 128, 4, 2), {{"warps_m", 4}}), s), "");
  EXPECT_NE(k.violation(with(wgmma(128, 128, 4, 2), {{"split_k", 2}}), s).find("SMs idle"), std::string::npos)
      << "1024 tiles already fill the SMs";
  EXPECT_EQ(k.violation(with(wgmma(64, 128, 6, 1), {{"split_k", 4}}), gemm_shape(64, 4096, 4096, 1)), "");
  EXPECT_NE(k.violation(with(wgmma(64, 128, 2, 1), {{"split_k", 8}}), gemm_shape(64, 4096, 256, 1)).find("empty"),
            std::string::npos)
      << "4 k-tiles leave slices empty";
  EXPECT_NE(k.violation(with(wgmma(64, 64, 2, 1), {{"split_k", 2}}), gemm_shape(128, 128, 128, 1)).find("outnumber"),
            std::string::npos)
      << "2 stages hold both k-tiles in flight: a split shortens nothing";
  EXPECT_EQ(k.violation(with(wgmma(64, 64, 2, 1), {{"split_k", 2}}), gemm_shape(128, 128, 192, 1)), "");
  EXPECT_NE(k.violation(with(wgmma(64, 64, 3, 1), {{"split_k", 2}}), gemm_shape(128, 128, 192, 1)), "");
  EXPECT_NE(k.violation(with(k.default_config, {{"consumers", 2}}), s), "") << "consumers is wgmma=1's alone";
  EXPECT_NE(k.violation(with(k.default_config, {{"pingpong", 1}}), s), "") << "pingpong is wgmma=1's alone";
  EXPECT_EQ(k.violation(with(wgmma(128, 128, 4, 2), {{"pingpong", 1}}), s), "");
  EXPECT_NE(k.violation(with(wgmma(128, 128, 4, 1), {{"pingpong", 1}}), s), "") << "pingpong needs two consumers";
  EXPECT_NE(k.violation(with(wgmma(128, 256, 4, 2), {{"pingpong", 1}}), s), "") << "256 accumulators a thread";
  EXPECT_NE(k.violation(wgmma(64, 128, 4, 2), s), "") << "64 rows cannot feed two 64-row consumers";
  EXPECT_NE(k.violation(wgmma(128, 256, 4, 1), s), "") << "256 accumulators a thread";
  EXPECT_NE(k.violation(wgmma(128, 256, 5, 2), s), "") << "shared memory";
  // tma_store: the Hopper family's, unsplit tiles only, its buffers counted in the shared memory.
  EXPECT_EQ(k.violation(with(wgmma(128, 256, 4, 2, 8), {{"tma_store", 1}}), s), "");
  EXPECT_EQ(k.violation(with(wgmma(128, 128, 4, 2), {{"tma_store", 1}, {"pingpong", 1}, {"cluster", 2}}), s), "");
  EXPECT_NE(k.violation(with(k.default_config, {{"tma_store", 1}}), s), "") << "tma_store is wgmma=1's alone";
  EXPECT_NE(k.violation(with(wgmma(64, 128, 6, 1), {{"split_k", 4}, {"tma_store", 1}}), gemm_shape(64, 4096, 4096, 1))
                .find("workspace"),
            std::string::npos)
      << "a split tile converts through the workspace";
  EXPECT_EQ(k.violation(wgmma(128, 192, 5, 2), s), "");
  EXPECT_NE(k.violation(with(wgmma(128, 192, 5, 2), {{"tma_store", 1}}), s).find("[7]"), std::string::npos)
      << "5 stages of 128x192 and 32 KiB of store buffers exceed 227 KiB";
  // bn=192 is the Hopper family's alone.
  EXPECT_EQ(k.violation(wgmma(128, 192, 4, 2), s), "");
  EXPECT_EQ(k.violation(wgmma(64, 192, 6, 1), s), "");
  EXPECT_NE(k.violation(with(k.default_config, {{"bn", 192}, {"warps_n", 4}}), s).find("wgmma=1's alone"),
            std::string::npos);
  EXPECT_NE(k.violation(wgmma(128, 192, 6, 2), s).find("[7]"), std::string::npos) << "shared memory";
  EXPECT_NE(k.violation(wgmma(128, 192, 4, 1), s).find("[6]"), std::string::npos) << "192 accumulators";
  // Rings of 6 and 8 stages are the Hopper family's alone, within the same shared memory.
  EXPECT_EQ(k.violation(wgmma(64, 64, 8, 1), gemm_shape(64, 4096, 4096, 1)), "");
  EXPECT_EQ(k.violation(wgmma(128, 128, 6, 2), s), "");
  EXPECT_NE(k.violation(wgmma(128, 128, 8, 2), s).find("[7]"), std::string::npos) << "shared memory";
  EXPECT_NE(k.violation(with(k.default_config, {{"bm", 64}, {"bn", 64}, {"stages", 6}}), s).find("at most 5"),
            std::string::npos);
  EXPECT_NE(k.violation(wgmma(128, 128, 4, 2), gemm_shape(4096, 4096, 4092, 1)).find("left to wgmma=0"),
            std::string::npos);
  EXPECT_NE(k.violation(with(wgmma(128, 128, 4, 2), {{"path", 1}}), gemm_shape(8, 4096, 4096, 1)), "");
}

// k and n multiples of 8 mean 16-byte accesses in every family, so the Runtime refuses tensors
// that do not start on 16 bytes; other shapes take element-aligned ones.
TEST(Gemm, SixteenByteTensorsWhereTheShapeIsAligned) {
  const auto& k = gemm();
  ASSERT_TRUE(k.tensor_alignment);
  const Shape s = gemm_shape(64, 64, 64, 1);
  EXPECT_EQ(k.tensor_alignment(k.default_config, s), 16u);
  EXPECT_EQ(k.tensor_alignment(wgmma(128, 256, 4, 2, 8), s), 16u);
  EXPECT_EQ(k.tensor_alignment(k.default_config, gemm_shape(17, 33, 29, 0)), 0u);
  EXPECT_EQ(k.tensor_alignment(k.default_config, gemm_shape(64, 64, 60, 1)), 0u);
}

TEST(Gemm, WorkspaceOnlyWhereSplitKCanRun) {
  const auto& k = gemm();
  // m*n floats, then one counter per 16x16 tile of C.
  EXPECT_EQ(k.workspace(gemm_shape(16, 4096, 1024, 1)).bytes, 4 * (16 * 4096 + 256));
  EXPECT_EQ(k.workspace(gemm_shape(17, 33, 290, 0)).bytes, 4 * (17 * 33 + 2 * 3));
  EXPECT_EQ(k.workspace(gemm_shape(2048, 2048, 4096, 1)).bytes, 4 * (2048 * 2048 + 128 * 128));
  EXPECT_EQ(k.workspace(gemm_shape(17, 33, 29, 0)).bytes, 0);  // k within one 32-deep tile, m > 16
  // 4096^2: every valid tile grid has two waves or more (256x128: 512 tiles; 256x256 is invalid).
  EXPECT_EQ(k.workspace(gemm_shape(4096, 4096, 4096, 1)).bytes, 0);
  EXPECT_EQ(k.workspace(gemm_shape(1, 1, 1, 0)).bytes, 0);     // one k element: no second slice
  EXPECT_EQ(k.workspace(gemm_shape(64, 64, 8, 1)).bytes, 0);   // k below one vector
  EXPECT_EQ(k.workspace(gemm_shape(8192, 8192, 8192, 1)).bytes, 0);  // m*n above 2^25
  EXPECT_EQ(k.workspace(gemm_shape(32768, 8192, 8192, 1)).bytes, 0);
  EXPECT_EQ(k.workspace(gemm_shape(16, 4096, 1024, 1)).layout, 0);
  // The same answer as searching every valid configuration for a split.
  for (const auto& s : {gemm_shape(1, 1, 1, 0), gemm_shape(1, 4096, 56, 1), gemm_shape(1, 4096, 64, 1),
                        gemm_shape(17, 33, 29, 1), gemm_shape(17, 33, 290, 1), gemm_shape(16, 8192, 4096, 1),
                        gemm_shape(16, 8192, 4096, 0), gemm_shape(4096, 4096, 4096, 0)}) {
    const auto configs = valid_configs(k, s);
    const bool splits =
        std::any_of(configs.begin(), configs.end(), [](const Config& c) { return c.at("split_k") > 1; });
    EXPECT_EQ(k.workspace(s).bytes > 0, splits) << format_assignments(s);
  }
}

TEST(Gemm, ToleranceAndElementBound) {
  const auto& k = gemm();
  const Shape s = gemm_shape(4096, 4096, 4096, 1);
  EXPECT_LT(k.tolerance(dtype_info("bf16"), s), 1e-2);
  EXPECT_LT(k.tolerance(dtype_info("fp16"), s), k.tolerance(dtype_info("bf16"), s));
  const auto bf16 = element_bound(k, dtype_info("bf16"), s);
  const auto fp16 = element_bound(k, dtype_info("fp16"), s);
  EXPECT_GE(bf16.rtol, 1.0 / 256);
  EXPECT_GE(fp16.rtol, 1.0 / 2048);
  EXPECT_LT(fp16.rtol, bf16.rtol);
  // A wrong element at k = 4096 is off by about 0.36 * 64 = 23; at k = 1 by at least 1/256.
  EXPECT_LT(bf16.atol, 0.1);
  EXPECT_LT(element_bound(k, dtype_info("bf16"), gemm_shape(1, 1, 1, 1)).atol, 1.0 / 256);
}

TEST(Gemm, WorkModel) {
  const auto& k = gemm();
  const Shape s = gemm_shape(4096, 4096, 4096, 1);
  const auto w = k.work(k.default_config, s, dtype_info("bf16"));
  EXPECT_DOUBLE_EQ(w.flops, 2.0 * 4096 * 4096 * 4096);
  EXPECT_GT(w.compute_efficiency, 1.0) << "tensor cores outrun the fp32 FMA peak the model counts";
  EXPECT_GE(w.bytes, 2.0 * 3 * 4096 * 4096);
  // Partial tiles cost whole ones.
  EXPECT_DOUBLE_EQ(k.work(k.default_config, gemm_shape(16, 4096, 1024, 1), dtype_info("bf16")).flops,
                   2.0 * 128 * 4096 * 1024);
  const auto decode = k.work(skinny(), gemm_shape(1, 4096, 4096, 1), dtype_info("bf16"));
  EXPECT_DOUBLE_EQ(decode.flops, 2.0 * 4096 * 4096);
  EXPECT_GE(decode.bytes, 2.0 * 4096 * 4096);
  EXPECT_LE(decode.compute_efficiency, 1.0);
}

TEST(Gemm, GmtuneListShowsIt) {
  const auto result = testing::run_gmtune("list --json");
  ASSERT_EQ(result.status, 0) << result.err;
  const auto doc = nlohmann::json::parse(result.out);
  bool found = false;
  for (const auto& kernel : doc["kernels"]) {
    if (kernel["name"] != "gemm") continue;
    found = true;
    EXPECT_EQ(kernel["problem_keys"], nlohmann::json({"m", "n", "k", "trans_b"}));
  }
  EXPECT_TRUE(found);
}

}  // namespace
}  // namespace gmjit::templates
