// The memory-bound catalog kernels' descriptors (grayscale, transpose, prefix_sum), without NVRTC or a GPU:
// their search spaces, the rules that prune them, and launch geometry at the sizes that break
// naive index math.
#include <gtest/gtest.h>

#include <algorithm>

#include "codegen/compiler.hpp"
#include "gmjit/error.hpp"
#include "templates/registry.hpp"
#include "unit/templates_test_support.hpp"

namespace gmjit::templates {
namespace {

using testing::usage_message;

const DtypeInfo& fp32() { return dtype_info("fp32"); }

Shape image(std::int64_t h, std::int64_t w) { return {{"h", h}, {"w", w}}; }
Shape matrix(std::int64_t rows, std::int64_t cols) { return {{"rows", rows}, {"cols", cols}}; }

Config with(const KernelDescriptor& kernel, const Config& changes) {
  Config config = kernel.default_config;
  for (const auto& [key, value] : changes) config[key] = value;
  return config;
}

TEST(Grayscale, DescribedAndListedInTheCatalog) {
  const auto& k = find_kernel("grayscale");
  EXPECT_EQ(k.header, "gmjit/grayscale.cuh");
  EXPECT_EQ(k.problem_keys, (std::vector<std::string>{"h", "w"}));
  EXPECT_EQ(k.dtypes, (std::vector<std::string>{"fp32"}));
  EXPECT_FALSE(is_user_kernel("grayscale"));
  EXPECT_TRUE(find_header(k.header).has_value());
  for (const auto& p : k.params) EXPECT_FALSE(p.doc.empty()) << p.name;
  EXPECT_FALSE(k.constraints_doc.empty());
  EXPECT_EQ(k.reference_expression(fp32(), {}), "gmjit::reference::grayscale");
  EXPECT_EQ(k.tolerance(fp32(), image(16, 16)), 1e-6);
}

TEST(Grayscale, ValidConfigCounts) {
  const auto& k = find_kernel("grayscale");
  // 4 blocks x 4 pixel counts x 3 tile counts x 2 load paths; staging needs quads.
  EXPECT_EQ(all_configs(k).size(), 96u);
  EXPECT_EQ(valid_configs(k, image(16384, 16384)).size(), 84u);
  EXPECT_EQ(valid_configs(k, image(1000, 1000)).size(), 84u);
  // No block's tile is smaller than 128 pixels, so a shrunken grid would repeat tiles=1.
  EXPECT_EQ(valid_configs(k, image(1, 1)).size(), 28u);
  EXPECT_EQ(valid_configs(k, image(1, 127)).size(), 28u);
  // 129 pixels: two tiles for block=128 pixels=1 only, which adds its tiles=4 and tiles=16.
  EXPECT_EQ(valid_configs(k, image(1, 129)).size(), 30u);
  for (const auto& c : valid_configs(k, image(127, 1000))) {
    EXPECT_TRUE(c.at("staged") == 0 || c.at("pixels") >= 4) << format_assignments(c);
  }
}

TEST(Grayscale, ViolationsNameTheOffendingParameters) {
  const auto& k = find_kernel("grayscale");
  EXPECT_NE(k.violation(with(k, {{"pixels", 1}, {"staged", 1}}), image(64, 64)).find("staged=1 needs pixels >= 4"),
            std::string::npos);
  const std::string small = k.violation(with(k, {{"tiles", 4}}), image(1, 127));
  EXPECT_NE(small.find("tiles=4"), std::string::npos) << small;
  EXPECT_NE(small.find("127 pixels"), std::string::npos) << small;
  EXPECT_EQ(k.violation(with(k, {{"tiles", 4}}), image(1, 1025)), "");
  const std::string message =
      usage_message([&] { resolve_config(k, image(8, 8), "fp32", {{"pixels", 1}, {"staged", 1}}); });
  EXPECT_NE(message.find("pixels=1"), std::string::npos) << message;
  EXPECT_NE(message.find("staged=1"), std::string::npos) << message;
  EXPECT_NE(usage_message([&] { resolve_config(k, image(8, 8), "fp32", {{"pixels", 2}}); }).find("pixels=2"),
            std::string::npos);
  EXPECT_NE(usage_message([&] { resolve_config(k, image(8, 8), "fp16", {}); }).find("fp16"), std::string::npos);
  EXPECT_NE(usage_message([&] { resolve_config(k, {{"h", 8}}, "fp32", {}); }).find("'w'"), std::string::npos);
  EXPECT_NO_THROW(resolve_config(k, image(1, 1), "fp32", {}));
}

TEST(Grayscale, NameExpressions) {
  const auto& k = find_kernel("grayscale");
  EXPECT_EQ(k.name_expression(k.default_config, image(4, 4), fp32()), "gmjit::grayscale<256, 4, false>");
  EXPECT_EQ(codegen::specialize(k, image(4, 4), "fp32", with(k, {{"block", 1024}, {"pixels", 16}, {"staged", 1}}))
                .name_expression,
            "gmjit::grayscale<1024, 16, true>");
  // The tile count only shapes the grid: both compile to the same kernel.
  EXPECT_EQ(k.name_expression(with(k, {{"tiles", 16}}), image(4096, 4096), fp32()),
            k.name_expression(with(k, {{"tiles", 1}}), image(4096, 4096), fp32()));
}

TEST(Grayscale, GeometryCoversEveryPixelAtEdgeSizes) {
  const auto& k = find_kernel("grayscale");
  const auto one = k.geometry(k.default_config, image(1, 1), fp32());
  EXPECT_EQ(one.grid[0], 1u);
  EXPECT_EQ(one.block[0], 256u);
  EXPECT_EQ(one.block[1], 1u);
  EXPECT_EQ(one.dynamic_shared_bytes, 0u);
  // 127 * 1000003 = 127000381 pixels in tiles of 256 * 4.
  EXPECT_EQ(k.geometry(k.default_config, image(127, 1000003), fp32()).grid[0], 124024u);
  EXPECT_EQ(k.geometry(with(k, {{"tiles", 16}}), image(127, 1000003), fp32()).grid[0], 7752u);
  EXPECT_EQ(k.geometry(with(k, {{"block", 128}, {"pixels", 1}}), image(1, 127), fp32()).grid[0], 1u);
  EXPECT_EQ(k.geometry(with(k, {{"block", 128}, {"pixels", 1}}), image(1, 129), fp32()).grid[0], 2u);
  for (const auto& c : valid_configs(k, image(1000, 1000))) {
    const auto g = k.geometry(c, image(1000, 1000), fp32());
    const std::int64_t tiles = ceil_div(1000000, c.at("block") * c.at("pixels"));
    EXPECT_EQ(g.grid[0], static_cast<unsigned>(ceil_div(tiles, c.at("tiles")))) << format_assignments(c);
    EXPECT_EQ(g.threads_per_block(), static_cast<std::uint64_t>(c.at("block")));
  }
}

TEST(Grayscale, TensorsScalarsAndWork) {
  const auto& k = find_kernel("grayscale");
  const Shape big = image(16384, 16384);
  const auto tensors = k.tensors(big);
  ASSERT_EQ(tensors.size(), 2u);
  EXPECT_EQ(tensors[0].name, "rgb");
  EXPECT_FALSE(tensors[0].output);
  EXPECT_EQ(tensors[0].elements, 3LL * 16384 * 16384);
  EXPECT_TRUE(tensors[1].output);
  EXPECT_EQ(tensors[1].elements, 16384LL * 16384);
  detail::KernelArgs args;
  k.add_scalars(args, image(127, 1000003));
  ASSERT_EQ(args.size(), 1u);
  EXPECT_EQ(*static_cast<long long*>(args.pointers()[0]), 127000381LL);
  const Work w = k.work(k.default_config, big, fp32());
  EXPECT_DOUBLE_EQ(w.bytes, 16.0 * 16384 * 16384);
  EXPECT_DOUBLE_EQ(w.flops, 5.0 * 16384 * 16384);
  EXPECT_EQ(w.shared_bytes, 0);
  EXPECT_EQ(k.work(with(k, {{"block", 1024}, {"staged", 1}}), big, fp32()).shared_bytes, 48 * 1024);
  EXPECT_GT(k.work(with(k, {{"pixels", 16}}), big, fp32()).registers, w.registers);
}

TEST(Transpose, DescribedAndListedInTheCatalog) {
  const auto& k = find_kernel("transpose");
  EXPECT_EQ(k.header, "gmjit/transpose.cuh");
  EXPECT_EQ(k.problem_keys, (std::vector<std::string>{"rows", "cols"}));
  EXPECT_EQ(k.dtypes, (std::vector<std::string>{"fp32"}));
  for (const auto& p : k.params) EXPECT_FALSE(p.doc.empty()) << p.name;
  EXPECT_EQ(k.reference_expression(fp32(), {}), "gmjit::reference::transpose");
  EXPECT_EQ(k.tolerance(fp32(), matrix(3, 5)), 0.0) << "a copy is exact";
}

TEST(Transpose, ValidConfigCountsAndViolations) {
  const auto& k = find_kernel("transpose");
  EXPECT_EQ(all_configs(k).size(), 10u);
  // tile 64 with 1 or 2 rows per thread would need 4096 or 2048 threads.
  for (const auto& shape : {matrix(1, 1), matrix(1, 127), matrix(127, 1000), matrix(4096, 4096)}) {
    EXPECT_EQ(valid_configs(k, shape).size(), 8u) << format_assignments(shape);
  }
  const std::string wide = k.violation({{"tile", 64}, {"rows_per_thread", 2}}, matrix(64, 64));
  EXPECT_NE(wide.find("2048 threads"), std::string::npos) << wide;
  EXPECT_NE(usage_message([&] { resolve_config(k, matrix(64, 64), "fp32", {{"tile", 64}, {"rows_per_thread", 1}}); })
                .find("rows_per_thread=1"),
            std::string::npos);
  EXPECT_NE(usage_message([&] { resolve_config(k, matrix(64, 64), "fp32", {{"tile", 16}}); }).find("tile=16"),
            std::string::npos);
  // 2^21 x 2^21 tiles of 32: past the 1-D grid.
  const Shape huge = matrix(std::int64_t{1} << 26, std::int64_t{1} << 26);
  EXPECT_NE(k.violation(k.default_config, huge).find("2^31 tiles"), std::string::npos);
  EXPECT_EQ(k.violation({{"tile", 64}, {"rows_per_thread", 8}}, matrix(std::int64_t{1} << 36, 1)), "")
      << "2^30 tiles of 64 still fit";
}

TEST(Transpose, NameExpressionsAndGeometryAtEdgeSizes) {
  const auto& k = find_kernel("transpose");
  EXPECT_EQ(k.name_expression(k.default_config, matrix(3, 5), fp32()), "gmjit::transpose<32, 4>");
  EXPECT_EQ(codegen::specialize(k, matrix(3, 5), "fp32", {{"tile", 64}, {"rows_per_thread", 16}}).name_expression,
            "gmjit::transpose<64, 16>");
  const auto row = k.geometry(k.default_config, matrix(1, 127), fp32());
  EXPECT_EQ(row.grid[0], 4u);
  EXPECT_EQ(row.grid[1], 1u);
  EXPECT_EQ(row.block[0], 32u);
  EXPECT_EQ(row.block[1], 8u);
  EXPECT_EQ(k.geometry(k.default_config, matrix(127, 1), fp32()).grid[0], 4u);
  EXPECT_EQ(k.geometry(k.default_config, matrix(1, 1), fp32()).grid[0], 1u);
  EXPECT_EQ(k.geometry(k.default_config, matrix(127, 1000), fp32()).grid[0], 4u * 32u);
  const auto big = k.geometry({{"tile", 64}, {"rows_per_thread", 4}}, matrix(4096, 4096), fp32());
  EXPECT_EQ(big.grid[0], 64u * 64u);
  EXPECT_EQ(big.threads_per_block(), 1024u);
  // A tall matrix: more row tiles than a 2-D grid's y extent allows.
  EXPECT_EQ(k.geometry(k.default_config, matrix(4000000, 2), fp32()).grid[0], 125000u);
}

TEST(Transpose, TensorsScalarsAndWork) {
  const auto& k = find_kernel("transpose");
  const auto tensors = k.tensors(matrix(127, 1000003));
  ASSERT_EQ(tensors.size(), 2u);
  EXPECT_FALSE(tensors[0].output);
  EXPECT_TRUE(tensors[1].output);
  EXPECT_EQ(tensors[0].elements, 127000381LL);
  EXPECT_EQ(tensors[1].elements, 127000381LL);
  detail::KernelArgs args;
  k.add_scalars(args, matrix(127, 1000003));
  ASSERT_EQ(args.size(), 2u);
  EXPECT_EQ(*static_cast<long long*>(args.pointers()[0]), 127LL);
  EXPECT_EQ(*static_cast<long long*>(args.pointers()[1]), 1000003LL);
  const Work w = k.work({{"tile", 64}, {"rows_per_thread", 8}}, matrix(8192, 8192), fp32());
  EXPECT_DOUBLE_EQ(w.bytes, 2.0 * 4 * 8192 * 8192);
  EXPECT_EQ(w.flops, 0);
  EXPECT_EQ(w.shared_bytes, 64 * 65 * 4);
}

TEST(PrefixSum, ConfigsTilesAndWorkspace) {
  const auto& k = find_kernel("prefix_sum");
  // One block per tile: 3 blocks x 3 items at every size, staged in dynamic shared memory.
  EXPECT_EQ(valid_configs(k, {{"n", 1}}).size(), 9u);
  EXPECT_EQ(valid_configs(k, {{"n", 1LL << 28}}).size(), 9u);
  const Config largest{{"block", 512}, {"items", 32}};
  EXPECT_EQ(k.geometry(largest, {{"n", 1LL << 28}}, fp32()).dynamic_shared_bytes, 16384u * 4 * 33 / 32);
  EXPECT_EQ(k.geometry(largest, {{"n", 1LL << 28}}, fp32()).grid[0], 16384u);
  // The last tile partial.
  EXPECT_EQ(k.geometry({{"block", 128}, {"items", 8}}, {{"n", 1025}}, fp32()).grid[0], 2u);
  EXPECT_EQ(k.name_expression({{"block", 256}, {"items", 16}}, {{"n", 5000}}, fp32()), "gmjit::prefix_sum<256, 16>");
  // The workspace is the library's, not a tensor, and sized for the smallest tile, so every
  // configuration shares it.
  EXPECT_EQ(k.tensors({{"n", 1025}}).size(), 2u);
  ASSERT_TRUE(k.workspace);
  EXPECT_EQ(k.workspace({{"n", 1025}}).bytes, 4 * prefix_sum_workspace_words(1025));
  EXPECT_EQ(k.workspace({{"n", 1025}}).layout, k.workspace({{"n", 1LL << 28}}).layout) << "one layout at every n";
  EXPECT_EQ(prefix_sum_workspace_words(1025), 4 + 2 * 4);
}

TEST(PrefixSum, HostReferenceIsAnInclusiveScan) {
  const auto& k = find_kernel("prefix_sum");
  ASSERT_TRUE(k.host_reference);
  const auto scan = k.host_reference({{1.0, -2.5, 4.0, 0.25}}, {{"n", 4}});
  ASSERT_EQ(scan.size(), 1u);
  EXPECT_EQ(scan[0], (std::vector<double>{1.0, -1.5, 2.5, 2.75}));
}

}  // namespace
}  // namespace gmjit::templates
