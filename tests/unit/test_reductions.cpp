// The reduction kernels' descriptors (vector_sum, histogram), without NVRTC or a GPU: search
// spaces, the rules that prune them, workspaces, input distributions and host references.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "codegen/compiler.hpp"
#include "gmjit/error.hpp"
#include "templates/registry.hpp"
#include "tuner/harness.hpp"

namespace gmjit::templates {
namespace {

const DtypeInfo& fp32() { return dtype_info("fp32"); }
const DtypeInfo& u8() { return dtype_info("u8"); }

const KernelDescriptor& vector_sum() { return find_kernel("vector_sum"); }
const KernelDescriptor& histogram() { return find_kernel("histogram"); }

Shape sum_shape(std::int64_t n) { return {{"n", n}}; }
Shape hist_shape(std::int64_t n, std::int64_t contention) { return {{"n", n}, {"contention", contention}}; }

Config with(const KernelDescriptor& kernel, const Config& changes) {
  Config config = kernel.default_config;
  for (const auto& [key, value] : changes) config[key] = value;
  return config;
}

std::size_t count_if_valid(const KernelDescriptor& k, const Shape& s, const std::function<bool(const Config&)>& p) {
  std::size_t n = 0;
  for (const auto& c : valid_configs(k, s)) n += p(c) ? 1 : 0;
  return n;
}

// The benchmark shapes (memory_bound.json) and the sizes that break index math.
const std::vector<std::int64_t> kSumSizes = {1, 3, 127, 1000003, 1638400, 6553600, 26214400, 52428800};
const std::vector<Shape> kHistShapes = {hist_shape(1, 10),        hist_shape(15, 100),      hist_shape(127, 1),
                                        hist_shape(1000003, 50),  hist_shape(1310720, 10),  hist_shape(2621440, 90),
                                        hist_shape(10485760, 10), hist_shape(4294967295, 1)};

TEST(VectorSum, DescribedAsAHostVerifiedBuiltIn) {
  const auto& k = vector_sum();
  EXPECT_FALSE(is_user_kernel(k.name));
  EXPECT_EQ(k.header, "gmjit/vector_sum.cuh");
  ASSERT_TRUE(find_header(k.header).has_value());
  EXPECT_EQ(k.problem_keys, (std::vector<std::string>{"n"}));
  EXPECT_EQ(k.dtypes, (std::vector<std::string>{"fp32"}));
  for (const auto& p : k.params) EXPECT_FALSE(p.doc.empty()) << p.name;
  EXPECT_NE(k.summary.find("workspace the library owns"), std::string::npos);
  EXPECT_FALSE(k.reference_expression) << "verified by host_reference, not a reference kernel";
  EXPECT_TRUE(k.host_reference);
  EXPECT_TRUE(k.input_value);
  EXPECT_TRUE(k.work);
  EXPECT_EQ(k.tolerance(fp32(), sum_shape(52428800)), 1e-5);
  EXPECT_THROW(codegen::specialize_reference(k, sum_shape(8), "fp32"), Error);
}

TEST(VectorSum, WorkspaceHoldsAPartialForTheLargestGrid) {
  const auto& k = vector_sum();
  const auto tensors = k.tensors(sum_shape(1000003));
  ASSERT_EQ(tensors.size(), 2u);
  EXPECT_EQ(tensors[0].name, "x");
  EXPECT_EQ(tensors[0].elements, 1000003);
  EXPECT_FALSE(tensors[0].output);
  EXPECT_EQ(tensor_dtype(tensors[0], fp32()).name, "fp32");
  EXPECT_EQ(tensors[1].elements, 1);
  EXPECT_TRUE(tensors[1].output);
  EXPECT_EQ(tensor_dtype(tensors[1], fp32()).name, "fp32");
  ASSERT_TRUE(k.workspace);
  const auto workspace = k.workspace(sum_shape(1000003));
  // Config-independent: the same at every n, and enough for the counter plus a double per block
  // of any grid the domain launches.
  EXPECT_EQ(k.workspace(sum_shape(1)).bytes, workspace.bytes);
  EXPECT_EQ(k.workspace(sum_shape(1)).layout, workspace.layout);
  std::int64_t largest = 0;
  for (const auto n : kSumSizes) {
    for (const auto& c : valid_configs(k, sum_shape(n))) {
      largest = std::max<std::int64_t>(largest, k.geometry(c, sum_shape(n), fp32()).grid[0]);
    }
  }
  EXPECT_EQ(largest, 2112);
  EXPECT_GE(workspace.bytes, 4 * (4 + 2 * largest));
  detail::KernelArgs args;
  k.add_scalars(args, sum_shape(1000003));
  ASSERT_EQ(args.size(), 1u);
  EXPECT_EQ(*static_cast<long long*>(args.pointers()[0]), 1000003LL);
}

TEST(VectorSum, DefaultConfigServesEveryShape) {
  for (const auto n : kSumSizes) EXPECT_NO_THROW(resolve_config(vector_sum(), sum_shape(n), "fp32", {})) << n;
  EXPECT_THROW(resolve_config(vector_sum(), sum_shape(8), "fp16", {}), Error);
  EXPECT_THROW(resolve_config(vector_sum(), sum_shape(0), "fp32", {}), Error);
}

TEST(VectorSum, ValidConfigsDropGridsTheDataCaps) {
  const auto& k = vector_sum();
  EXPECT_EQ(all_configs(k).size(), 60u);
  // 52428800 floats: even block=1024, unroll=8 has 1600 block steps, more than 1056.
  EXPECT_EQ(valid_configs(k, sum_shape(52428800)).size(), 60u);
  // One block step at most: only the smallest grid remains, for each block and unroll.
  for (const auto n : {1, 127, 1024}) {
    EXPECT_EQ(valid_configs(k, sum_shape(n)).size(), 12u) << n;
    EXPECT_EQ(count_if_valid(k, sum_shape(n), [](const Config& c) { return c.at("blocks") == 132; }), 12u);
  }
  // 1638400 floats = 409600 vectors: block=1024 x unroll=8 gives 50 steps, block=256 x unroll=1 1600.
  EXPECT_NE(k.violation(with(k, {{"block", 1024}, {"unroll", 8}, {"blocks", 264}}), sum_shape(1638400)), "");
  EXPECT_EQ(k.violation(with(k, {{"block", 256}, {"unroll", 1}, {"blocks", 2112}}), sum_shape(1638400)), "");
  const std::string why = k.violation(with(k, {{"block", 1024}, {"unroll", 8}, {"blocks", 528}}), sum_shape(1638400));
  EXPECT_NE(why.find("blocks=528"), std::string::npos) << why;
  EXPECT_NE(why.find("only 50 blocks"), std::string::npos) << why;
  EXPECT_NE(why.find("as blocks=132 does"), std::string::npos) << why;
}

TEST(VectorSum, NameExpressionsAndGeometry) {
  const auto& k = vector_sum();
  EXPECT_EQ(k.name_expression(k.default_config, sum_shape(5), fp32()), "gmjit::vector_sum<1024, 4>");
  EXPECT_EQ(codegen::specialize(k, sum_shape(5), "fp32", with(k, {{"block", 256}, {"unroll", 8}})).name_expression,
            "gmjit::vector_sum<256, 8>");
  for (const auto n : {1, 3, 127}) {
    const auto g = k.geometry(k.default_config, sum_shape(n), fp32());
    EXPECT_EQ(g.grid[0], 1u) << n;
    EXPECT_EQ(g.block[0], 1024u);
    EXPECT_EQ(g.dynamic_shared_bytes, 0u);
  }
  EXPECT_EQ(k.geometry(k.default_config, sum_shape(52428800), fp32()).grid[0], 132u);
  // 1000003 floats = 250001 vectors in steps of 256 x 2: 489 steps.
  EXPECT_EQ(k.geometry(with(k, {{"block", 256}, {"unroll", 2}, {"blocks", 528}}), sum_shape(1000003), fp32()).grid[0],
            489u);
  EXPECT_EQ(k.geometry(with(k, {{"block", 256}, {"unroll", 1}, {"blocks", 2112}}), sum_shape(52428800), fp32())
                .grid[0],
            2112u);
}

TEST(VectorSum, WorkIsOneReadOfX) {
  const auto& k = vector_sum();
  const Work w = k.work(k.default_config, sum_shape(52428800), fp32());
  EXPECT_DOUBLE_EQ(w.bytes, 4.0 * 52428800 + 4);
  EXPECT_DOUBLE_EQ(w.flops, 52428800.0);
  EXPECT_EQ(w.shared_bytes, 32 * 8 + 4);
  EXPECT_GT(k.work(with(k, {{"unroll", 8}}), sum_shape(8), fp32()).registers, w.registers);
}

// GPU MODE's data: per tensor an offset in [-100, 100] and a scale in (0.1, 10], per element a
// normal deviate; read back through the harness's own generator and fp32 rounding.
TEST(VectorSum, InputsAreNormalWithAPerTensorOffsetAndScale) {
  const auto& k = vector_sum();
  const Shape shape = sum_shape(200000);
  std::vector<double> offsets, scales;
  for (std::uint64_t seed = 1; seed <= 24; ++seed) {
    const auto bytes = tuner::random_inputs(k, shape, fp32(), seed);
    ASSERT_EQ(bytes.size(), 1u);
    const auto values = tuner::widen_inputs(k, shape, fp32(), bytes).at(0);
    ASSERT_EQ(values.size(), 200000u);
    double mean = 0;
    for (const double v : values) mean += v;
    mean /= static_cast<double>(values.size());
    double var = 0, third = 0;
    std::size_t within_one = 0;
    for (const double v : values) {
      var += (v - mean) * (v - mean);
    }
    var /= static_cast<double>(values.size());
    const double sd = std::sqrt(var);
    for (const double v : values) {
      third += std::pow((v - mean) / sd, 3);
      within_one += std::abs(v - mean) <= sd ? 1 : 0;
    }
    EXPECT_GE(mean, -100.1);
    EXPECT_LE(mean, 100.1);
    EXPECT_GT(sd, 0.09);
    EXPECT_LT(sd, 10.1);
    // A normal puts 68.3% within one standard deviation and has no skew.
    EXPECT_NEAR(static_cast<double>(within_one) / values.size(), 0.683, 0.01) << seed;
    EXPECT_NEAR(third / values.size(), 0.0, 0.03) << seed;
    offsets.push_back(mean);
    scales.push_back(sd);
  }
  // 24 tensors spread over the ranges rather than sharing one offset and scale.
  const auto [lo, hi] = std::minmax_element(offsets.begin(), offsets.end());
  EXPECT_LT(*lo, -30);
  EXPECT_GT(*hi, 30);
  const auto [slo, shi] = std::minmax_element(scales.begin(), scales.end());
  EXPECT_LT(*slo, 4);
  EXPECT_GT(*shi, 6);
}

TEST(VectorSum, HostReferenceIsACompensatedSum) {
  const auto& k = vector_sum();
  // A plain double sum loses the 1 next to 1e16.
  const auto out = k.host_reference({{1e16, 1.0, -1e16, 2.5}}, sum_shape(4));
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0].size(), 1u);
  EXPECT_EQ(out[0][0], 3.5);
  EXPECT_EQ(k.host_reference({{-7.25}}, sum_shape(1))[0][0], -7.25);
}

TEST(Histogram, DescribedAsAHostVerifiedBuiltIn) {
  const auto& k = histogram();
  EXPECT_FALSE(is_user_kernel(k.name));
  EXPECT_EQ(k.header, "gmjit/histogram.cuh");
  ASSERT_TRUE(find_header(k.header).has_value());
  EXPECT_EQ(k.problem_keys, (std::vector<std::string>{"n"})) << "contention is no property of a tensor";
  ASSERT_EQ(k.data_keys.size(), 2u);
  EXPECT_EQ(k.data_keys[0].name, "contention");
  EXPECT_EQ(k.data_keys[0].default_value, 1);
  EXPECT_EQ(k.data_keys[1].name, "i64_counts");
  EXPECT_EQ(k.data_keys[1].default_value, 0) << "u32 counts unless asked";
  EXPECT_EQ(k.flag_keys, (std::vector<std::string>{"i64_counts"}));
  EXPECT_EQ(k.dtypes, (std::vector<std::string>{"u8"}));
  for (const auto& p : k.params) EXPECT_FALSE(p.doc.empty()) << p.name;
  EXPECT_NE(k.summary.find("workspace the library owns"), std::string::npos);
  EXPECT_FALSE(k.reference_expression);
  EXPECT_TRUE(k.host_reference);
  EXPECT_TRUE(k.input_value);
  EXPECT_EQ(k.tolerance(u8(), hist_shape(8, 10)), 0.0) << "counts are exact";
}

TEST(Histogram, TensorsAreBytesInCountsOutBesideAWorkspace) {
  const auto& k = histogram();
  const auto tensors = k.tensors(hist_shape(1000003, 10));
  ASSERT_EQ(tensors.size(), 2u);
  EXPECT_EQ(tensors[0].elements, 1000003);
  EXPECT_FALSE(tensors[0].output);
  EXPECT_EQ(tensor_dtype(tensors[0], u8()).name, "u8");
  EXPECT_EQ(tensors[1].name, "counts");
  EXPECT_EQ(tensors[1].elements, 256);
  EXPECT_TRUE(tensors[1].output);
  EXPECT_EQ(tensor_dtype(tensors[1], u8()).name, "u32");
  EXPECT_TRUE(tensor_dtype(tensors[1], u8()).integer);
  ASSERT_TRUE(k.workspace);
  EXPECT_GE(k.workspace(hist_shape(1000003, 10)).bytes, 4 * 257) << "256 accumulators and the counter";
  EXPECT_EQ(k.workspace(hist_shape(1, 90)).bytes, k.workspace(hist_shape(1000003, 10)).bytes);
  EXPECT_EQ(k.tensors({{"n", 1000003}}).size(), 2u) << "the tensors need n alone";
  detail::KernelArgs args;
  k.add_scalars(args, hist_shape(1000003, 10));
  ASSERT_EQ(args.size(), 1u);
  EXPECT_EQ(*static_cast<long long*>(args.pointers()[0]), 1000003LL);
}

TEST(Histogram, DefaultConfigServesEveryShape) {
  for (const auto& s : kHistShapes) EXPECT_NO_THROW(resolve_config(histogram(), s, "u8", {})) << format_assignments(s);
  EXPECT_THROW(resolve_config(histogram(), hist_shape(8, 10), "fp32", {}), Error);
}

TEST(Histogram, ValidConfigsAndViolations) {
  const auto& k = histogram();
  EXPECT_EQ(all_configs(k).size(), 108u);
  // 10485760 bytes = 655360 vectors: block=1024 x unroll=4 gives 160 steps (132 and 264 only),
  // unroll=2 320 (up to 528), unroll=1 640 (all four); block=512 halves the step.
  EXPECT_EQ(count_if_valid(k, hist_shape(10485760, 10), [](const Config& c) { return c.at("block") == 1024; }),
            3u * (2 + 3 + 4));
  for (const auto& s : {hist_shape(1, 10), hist_shape(127, 0), hist_shape(16384, 100)}) {
    EXPECT_EQ(valid_configs(k, s).size(), 27u) << format_assignments(s);
  }
  const std::string big = k.violation(k.default_config, hist_shape(std::int64_t{1} << 32, 10));
  EXPECT_NE(big.find("2^32"), std::string::npos) << big;
  EXPECT_EQ(k.violation(k.default_config, hist_shape((std::int64_t{1} << 32) - 1, 10)), "");
  EXPECT_EQ(k.violation(k.default_config, hist_shape(100, 512)), "") << "contention above 100 reads as 100";
  const std::string capped =
      k.violation(with(k, {{"block", 1024}, {"unroll", 4}, {"blocks", 528}}), hist_shape(10485760, 10));
  EXPECT_NE(capped.find("only 160 blocks"), std::string::npos) << capped;
  EXPECT_NE(capped.find("as blocks=264 does"), std::string::npos) << capped;
}

TEST(Histogram, NameExpressionsGeometryAndWork) {
  const auto& k = histogram();
  EXPECT_EQ(k.name_expression(k.default_config, hist_shape(5, 5), u8()), "gmjit::histogram<unsigned int, 1024, 32, 2>");
  EXPECT_EQ(codegen::specialize(k, hist_shape(5, 5), "u8", with(k, {{"block", 256}, {"stripes", 8}, {"unroll", 1}}))
                .name_expression,
            "gmjit::histogram<unsigned int, 256, 8, 1>");
  EXPECT_EQ(k.geometry(k.default_config, hist_shape(1, 10), u8()).grid[0], 1u);
  EXPECT_EQ(k.geometry(k.default_config, hist_shape(10485760, 10), u8()).grid[0], 132u);
  // 1310720 bytes = 81920 vectors in steps of 256: 320 steps.
  EXPECT_EQ(k.geometry(with(k, {{"block", 256}, {"unroll", 1}, {"blocks", 1056}}), hist_shape(1310720, 10), u8())
                .grid[0],
            320u);
  const Work w = k.work(k.default_config, hist_shape(10485760, 10), u8());
  EXPECT_DOUBLE_EQ(w.bytes, 10485760.0 + 1024);
  EXPECT_EQ(w.shared_bytes, 32 * 1024);
  EXPECT_EQ(k.work(with(k, {{"stripes", 1}}), hist_shape(8, 10), u8()).shared_bytes, 1024);
  // One stripe serializes the hot value's lanes; 32 do not.
  EXPECT_LT(k.work(with(k, {{"stripes", 1}}), hist_shape(8, 90), u8()).compute_efficiency,
            k.work(with(k, {{"stripes", 32}}), hist_shape(8, 90), u8()).compute_efficiency);
}

// torch counts in int64: i64_counts=1 makes the same kernel write them, one launch, no cast.
TEST(Histogram, I64CountsAreAFlagOfTheSameKernel) {
  const auto& k = histogram();
  const auto narrow = normalize_problem(k, {{"n", 1000}}, "");
  EXPECT_EQ(narrow.shape.at("i64_counts"), 0) << "u32 unless asked";
  const auto wide = normalize_problem(k, {{"n", 1000}, {"i64_counts", 1}}, "");
  EXPECT_EQ(wide.dtype, "u8") << "the problem's dtype stays the input's";
  const auto tensors = k.tensors(wide.shape);
  EXPECT_EQ(tensor_dtype(tensors[0], u8()).name, "u8");
  EXPECT_EQ(tensor_dtype(tensors[1], u8()).name, "i64");
  EXPECT_EQ(tensor_dtype(tensors[1], u8()).bytes, 8);
  EXPECT_EQ(tensor_dtype(k.tensors(narrow.shape)[1], u8()).name, "u32");
  EXPECT_EQ(k.name_expression(k.default_config, wide.shape, u8()), "gmjit::histogram<long long, 1024, 32, 2>");
  EXPECT_DOUBLE_EQ(k.work(k.default_config, wide.shape, u8()).bytes, 1000.0 + 256 * 8);
  try {
    normalize_problem(k, {{"n", 1000}, {"i64_counts", 2}}, "");
    ADD_FAILURE() << "i64_counts=2 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("flag, 0 or 1"), std::string::npos) << e.what();
  }
  // Widened counts compare exactly and survive the harness's host conversion.
  const DtypeInfo& i64 = dtype_info("i64");
  EXPECT_TRUE(i64.integer);
  EXPECT_EQ(i64.cpp_type, "long long");
  std::vector<unsigned char> bytes(3 * 8);
  tuner::store_element(i64, bytes.data(), 0, 4294967296.0 + 7);
  tuner::store_element(i64, bytes.data(), 1, 0.0);
  tuner::store_element(i64, bytes.data(), 2, -3.0);
  EXPECT_DOUBLE_EQ(tuner::element(i64, bytes.data(), 0), 4294967303.0) << "past u32";
  EXPECT_DOUBLE_EQ(tuner::element(i64, bytes.data(), 1), 0.0);
  EXPECT_DOUBLE_EQ(tuner::element(i64, bytes.data(), 2), -3.0);
  EXPECT_EQ(default_element_bound(i64).atol, 0.0);
}

// contention% of the bytes are the tensor's hot value, the rest uniform.
TEST(Histogram, InputsHaveTheRequestedContention) {
  const auto& k = histogram();
  std::map<int, int> hot_values;
  for (const std::int64_t contention : {0, 10, 50, 90, 100, 250}) {
    for (std::uint64_t seed = 1; seed <= 4; ++seed) {
      const Shape shape = hist_shape(200000, contention);
      const auto bytes = tuner::random_inputs(k, shape, u8(), seed);
      ASSERT_EQ(bytes.size(), 1u);
      ASSERT_EQ(bytes[0].size(), 200000u);
      std::vector<double> counts(256, 0.0);
      for (const unsigned char b : bytes[0]) counts[b] += 1;
      const auto hot = std::max_element(counts.begin(), counts.end());
      const double top = *hot / 200000.0;
      const double hot_share = std::min<std::int64_t>(contention, 100) / 100.0;
      const double expected = hot_share + (1 - hot_share) / 256;
      EXPECT_NEAR(top, expected, contention == 0 ? 0.002 : 0.005) << contention << " " << seed;
      // Every other value stays uniform.
      const double rest = (1 - hot_share) / 256;
      for (std::size_t b = 0; b < 256; ++b) {
        if (&counts[b] != &*hot) EXPECT_NEAR(counts[b] / 200000.0, rest, 0.0015) << b;
      }
      if (contention >= 50) ++hot_values[static_cast<int>(hot - counts.begin())];
      // The host reference counts the same bytes.
      const auto widened = tuner::widen_inputs(k, shape, u8(), bytes);
      EXPECT_EQ(k.host_reference(widened, shape).at(0), counts);
    }
  }
  EXPECT_GT(hot_values.size(), 1u) << "the hot value comes from the tensor's random bits";
}

}  // namespace
}  // namespace gmjit::templates
