#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "codegen/compiler.hpp"
#include "templates/registry.hpp"

namespace gmjit::templates {
namespace {

const KernelDescriptor& sgemm() { return find_kernel("sgemm"); }

Shape gemm(std::int64_t m, std::int64_t n, std::int64_t k) { return {{"m", m}, {"n", n}, {"k", k}}; }

std::size_t count_valid(const Shape& s, bool warp) {
  std::size_t n = 0;
  for (const auto& c : valid_configs(sgemm(), s)) n += (c.at("wm") != 0) == warp ? 1 : 0;
  return n;
}

Config warp_config(std::int64_t bm, std::int64_t bn, std::int64_t bk, std::int64_t tn, std::int64_t wm) {
  return {{"bm", bm}, {"bn", bn}, {"bk", bk}, {"tm", 8}, {"tn", tn}, {"vec", 1}, {"wm", wm}};
}

TEST(Sgemm, DomainsAndDefault) {
  // Each variant over its own domains: wm=0 takes 3 bm x 3 bn x 3 bk x 2 tm x 2 tn x 2 vec (216,
  // the kernel's configurations before warp tiles), warp tiles 3 bm x 3 bn x 3 bk x 2 tn x 2 wm
  // (108), instead of the 1728 of the cross product; each lies in the domains, none twice.
  const auto listed = all_configs(sgemm());
  EXPECT_EQ(listed.size(), 324u);
  EXPECT_EQ(std::set<Config>(listed.begin(), listed.end()).size(), listed.size());
  for (const auto& config : listed) {
    for (const auto& param : sgemm().params) {
      const auto& values = param.values;
      EXPECT_NE(std::find(values.begin(), values.end(), config.at(param.name)), values.end()) << param.name;
    }
  }
  EXPECT_EQ(sgemm().default_config,
            (Config{{"bm", 64}, {"bn", 64}, {"bk", 8}, {"tm", 4}, {"tn", 4}, {"vec", 0}, {"wm", 0}}));
}

TEST(Sgemm, ValidConfigsPerShape) {
  // wm=0 keeps exactly the configurations the kernel had before warp tiles: 196 of its 216 at
  // 4096^3 (bench/NOTES.md), and half of those (vec=0 only) where k or n is odd.
  EXPECT_EQ(count_valid(gemm(4096, 4096, 4096), false), 196u);
  EXPECT_EQ(count_valid(gemm(127, 1000, 3000), false), 196u);
  EXPECT_EQ(count_valid(gemm(1, 1, 1), false), 98u);
  EXPECT_EQ(count_valid(gemm(4096, 4095, 4096), false), 98u);
  // Warp tiles, whatever the size once k and n are multiples of 4: 8 x 8 threads in 64x128,
  // 128x64, 128x128 blocks, 8 x 16 threads in 128x128, 128x256, 256x128 blocks, each with both warp
  // shapes (wm 32, 64); bk 8 or 16 for the first three, 8, 16 or 32 for the others: 12 + 18.
  EXPECT_EQ(count_valid(gemm(4096, 4096, 4096), true), 30u);
  EXPECT_EQ(count_valid(gemm(127, 1000, 3000), true), 30u);
  EXPECT_EQ(count_valid(gemm(512, 512, 512), true), 30u);
  // 16-byte accesses only: none where k or n is not a multiple of 4.
  EXPECT_EQ(count_valid(gemm(1, 1, 1), true), 0u);
  EXPECT_EQ(count_valid(gemm(4096, 4095, 4096), true), 0u);
  EXPECT_EQ(count_valid(gemm(4096, 4096, 4094), true), 0u);
  EXPECT_EQ(count_valid(gemm(1, 4, 4), true), 30u);
}

TEST(Sgemm, EveryValidConfigIsADistinctKernel) {
  // No two valid configurations may compile and launch the same thing: a parameter a variant
  // ignores would only repeat candidates.
  for (const auto& s : {gemm(4096, 4096, 4096), gemm(127, 1000, 3000), gemm(1, 1, 1)}) {
    std::set<std::tuple<std::string, unsigned, unsigned, unsigned, unsigned>> seen;
    const auto& fp32 = dtype_info("fp32");
    for (const auto& c : valid_configs(sgemm(), s)) {
      const LaunchGeometry g = sgemm().geometry(c, s, fp32);
      EXPECT_TRUE(seen.insert({sgemm().name_expression(c, s, fp32), g.grid[0], g.grid[1], g.block[0],
                               g.dynamic_shared_bytes})
                      .second)
          << format_assignments(c);
    }
  }
}

TEST(Sgemm, WarpTilesRejectWhatTheyIgnoreOrCannotHold) {
  const Shape s = gemm(4096, 4096, 4096);
  const auto why = [&](const Config& c) { return sgemm().violation(c, s); };
  EXPECT_EQ(why(warp_config(128, 256, 8, 16, 64)), "");
  EXPECT_EQ(why(warp_config(256, 128, 8, 16, 64)), "");
  EXPECT_EQ(why(warp_config(128, 128, 8, 8, 32)), "");
  Config c = warp_config(128, 128, 8, 8, 32);
  c["vec"] = 0;
  EXPECT_NE(why(c).find("vec=1"), std::string::npos) << why(c);
  c = warp_config(128, 128, 8, 8, 32);
  c["tm"] = 4;
  EXPECT_NE(why(c).find("tm=8"), std::string::npos) << why(c);
  EXPECT_NE(why(warp_config(256, 256, 8, 16, 64)).find("threads"), std::string::npos);
  EXPECT_NE(why(warp_config(64, 256, 8, 16, 64)).find("twice"), std::string::npos);
  EXPECT_NE(why(warp_config(256, 64, 8, 16, 64)).find("twice"), std::string::npos);
  // 64 accumulators under 128 registers spill at bk=32; 128 accumulators do not.
  EXPECT_NE(why(warp_config(128, 128, 32, 8, 64)).find("bk <= 16"), std::string::npos);
  EXPECT_EQ(why(warp_config(256, 128, 32, 16, 64)), "");
  // Without warp tiles the old kernel's limits stay.
  Config old{{"bm", 256}, {"bn", 128}, {"bk", 8}, {"tm", 8}, {"tn", 8}, {"vec", 1}, {"wm", 0}};
  EXPECT_NE(why(old).find("warp tiles"), std::string::npos) << why(old);
  old["bm"] = 128;
  old["tn"] = 16;
  EXPECT_NE(why(old).find("warp tiles"), std::string::npos) << why(old);
}

TEST(Sgemm, WarpTilesNameLaunchAndModel) {
  const auto& fp32 = dtype_info("fp32");
  const Config c = warp_config(128, 256, 16, 16, 64);
  EXPECT_EQ(sgemm().name_expression(c, gemm(4096, 4096, 4096), fp32),
            "gmjit::sgemm_warp<128, 256, 16, 64, 8, 16, true>");
  EXPECT_EQ(sgemm().name_expression(c, gemm(127, 1000, 3000), fp32),
            "gmjit::sgemm_warp<128, 256, 16, 64, 8, 16, false>");
  const LaunchGeometry g = sgemm().geometry(c, gemm(127, 1000, 3000), fp32);
  EXPECT_EQ(g.grid[0], 4u);  // ceil(1000 / 256)
  EXPECT_EQ(g.grid[1], 1u);
  EXPECT_EQ(g.block[0], 256u);
  EXPECT_EQ(g.dynamic_shared_bytes, 2u * 16 * (128 + 4 + 256) * 4);
  // The existing kernel keeps its static shared memory and its name.
  const Config old{{"bm", 128}, {"bn", 128}, {"bk", 16}, {"tm", 8}, {"tn", 8}, {"vec", 1}, {"wm", 0}};
  EXPECT_EQ(sgemm().geometry(old, gemm(4096, 4096, 4096), fp32).dynamic_shared_bytes, 0u);
  EXPECT_EQ(sgemm().name_expression(old, gemm(4096, 4096, 4096), fp32),
            "gmjit::sgemm<128, 128, 16, 8, 8, true, true>");
  EXPECT_EQ(sgemm().work(c, gemm(4096, 4096, 4096), fp32).registers, 240);
}

}  // namespace
}  // namespace gmjit::templates
