#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "gmjit/device.hpp"
#include "gmjit/error.hpp"
#include "gmjit/types.hpp"
#include "core/check.hpp"
#include "core/module.hpp"
#include "core/tensor_map.hpp"
#include "tuner/harness.hpp"

namespace gmjit {
namespace {

TEST(Assignments, ParsesAndFormatsSorted) {
  const auto values = parse_assignments("n=4096,m=16,k=-3");
  ASSERT_EQ(values.size(), 3u);
  EXPECT_EQ(values.at("m"), 16);
  EXPECT_EQ(values.at("k"), -3);
  EXPECT_EQ(format_assignments(values), "k=-3,m=16,n=4096");
  EXPECT_TRUE(parse_assignments("").empty());
}

TEST(Assignments, RejectsMalformedTokensByName) {
  for (const std::string bad : {"m", "m=", "=4", "m=4,,n=2", "m=4,", "m=x", "m=4.5", "m=99999999999999999999"}) {
    try {
      parse_assignments(bad);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::usage) << bad;
    }
  }
  try {
    parse_assignments("m=4,m=5");
    ADD_FAILURE() << "accepted a repeated key";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("m=5"), std::string::npos) << e.message();
  }
}

int failing_call() { return 7; }
std::string describe_code(int code) { return "code " + std::to_string(code); }

TEST(Error, CheckMacroCarriesCodeCallAndLocation) {
  try {
    GMJIT_CHECK_GEN(ErrorKind::cache, failing_call(), 0, describe_code);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::cache);
    EXPECT_EQ(e.code(), 7);
    EXPECT_EQ(e.call(), "failing_call()");
    EXPECT_NE(e.file().find("test_core.cpp"), std::string::npos);
    EXPECT_GT(e.line(), 0);
    const std::string what = e.what();
    EXPECT_NE(what.find("cache error 7: code 7 [failing_call()]"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << "what() must be one line";
  }
}

TEST(Error, CompileErrorKeepsLogAndOptions) {
  const Error e(ErrorKind::compile, 6, "x failed", "nvrtcCompileProgram", "f.cpp", 3, "line1\nline2",
                {"-arch=sm_90a", "-std=c++17"});
  EXPECT_EQ(e.log(), "line1\nline2");
  ASSERT_EQ(e.options().size(), 2u);
  EXPECT_EQ(e.options()[0], "-arch=sm_90a");
  EXPECT_STREQ(to_string(e.kind()), "compile");
}

TEST(Device, ArchUsesArchSpecificTargetFromHopper) {
  EXPECT_EQ(arch_for(9, 0), "sm_90a");
  EXPECT_EQ(arch_for(8, 6), "sm_86");
  EXPECT_EQ(arch_for(10, 0), "sm_100a");
}

TEST(Device, FingerprintChangesWithEveryKeyedField) {
  DeviceInfo base;
  base.name = "NVIDIA H200";
  base.cc_major = 9;
  base.arch = "sm_90a";
  base.sm_count = 132;
  base.l2_bytes = 62914560;
  base.shared_optin_bytes = 232448;
  base.driver_version = 13000;
  base.nvrtc_major = 13;
  const std::string key = base.fingerprint();
  EXPECT_EQ(key, base.fingerprint());
  auto changed = base;
  changed.driver_version = 13010;
  EXPECT_NE(changed.fingerprint(), key);
  changed = base;
  changed.sm_count = 114;
  EXPECT_NE(changed.fingerprint(), key);
  changed = base;
  changed.nvrtc_minor = 1;
  EXPECT_NE(changed.fingerprint(), key);
  changed = base;
  changed.ordinal = 3;  // interchangeable devices share a fingerprint
  EXPECT_EQ(changed.fingerprint(), key);
}

TEST(Device, DriverStatusNeverThrowsAndExplainsAbsence) {
  DriverStatus status;
  ASSERT_NO_THROW(status = driver_status());
  if (!status.available) {
    EXPECT_FALSE(status.reason.empty());
    EXPECT_EQ(status.reason.find('\n'), std::string::npos);
    try {
      list_devices();
      ADD_FAILURE() << "list_devices succeeded without a device";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::driver);
    }
  } else {
    EXPECT_GT(status.device_count, 0);
  }
}

TEST(KernelArgs, KeepsEachArgumentAlignedInItsOwnSlot) {
  detail::KernelArgs args;
  args.add(static_cast<long long>(1) << 40).add(3).add(2.5f);
  ASSERT_EQ(args.size(), 3u);
  void** pointers = args.pointers();
  long long first = 0;
  std::memcpy(&first, pointers[0], sizeof(first));
  EXPECT_EQ(first, static_cast<long long>(1) << 40);
  EXPECT_EQ(*static_cast<int*>(pointers[1]), 3);
  EXPECT_EQ(*static_cast<float*>(pointers[2]), 2.5f);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(pointers[0]) % 16, 0u);
}

// A TMA tensor map is a 128-byte argument: it keeps its bytes whole, and the arguments around it
// keep theirs, each read through its own pointer.
TEST(KernelArgs, ArgumentsOfAnySizeKeepTheirBytes) {
  detail::KernelArgs args;
  detail::TileMap map;
  for (std::size_t i = 0; i < sizeof map.bytes; ++i) map.bytes[i] = static_cast<unsigned char>(i * 7 + 1);
  args.add(7).add_bytes(map.bytes, sizeof map.bytes).add(2.5f);
  ASSERT_EQ(args.size(), 3u);
  EXPECT_EQ(args.bytes_of(0), sizeof(int));
  EXPECT_EQ(args.bytes_of(1), 128u);
  EXPECT_EQ(args.bytes_of(2), sizeof(float));
  void** pointers = args.pointers();
  EXPECT_EQ(*static_cast<int*>(pointers[0]), 7);
  EXPECT_EQ(std::memcmp(pointers[1], map.bytes, sizeof map.bytes), 0);
  EXPECT_EQ(*static_cast<float*>(pointers[2]), 2.5f);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(reinterpret_cast<std::uintptr_t>(pointers[i]) % 16, 0u) << i;
  detail::KernelArgs both;
  both.add(static_cast<long long>(-3)).append(args);
  ASSERT_EQ(both.size(), 4u);
  void** joined = both.pointers();
  EXPECT_EQ(*static_cast<long long*>(joined[0]), -3);
  EXPECT_EQ(std::memcmp(joined[2], map.bytes, sizeof map.bytes), 0);
  EXPECT_EQ(*static_cast<float*>(joined[3]), 2.5f);
}

TEST(TileMap, ViolationsNameWhatTmaCannotDescribe) {
  detail::TileMapSpec ok{0x10000, 2, 4096, 4096, 8192, 128, 64, detail::TileSwizzle::bytes128};
  EXPECT_EQ(detail::tile_map_violation(ok), "");
  auto broken = [&](auto change) {
    detail::TileMapSpec s = ok;
    change(s);
    return detail::tile_map_violation(s);
  };
  EXPECT_NE(broken([](auto& s) { s.address += 8; }).find("16-byte aligned"), std::string::npos);
  EXPECT_NE(broken([](auto& s) { s.row_stride_bytes = 4090; }).find("multiple of 16"), std::string::npos);
  EXPECT_NE(broken([](auto& s) { s.box_rows = 512; }).find("box"), std::string::npos);
  EXPECT_NE(broken([](auto& s) { s.box_cols = 128; }).find("swizzle"), std::string::npos);
  EXPECT_NE(broken([](auto& s) { s.element_bytes = 3; }).find("bytes"), std::string::npos);
  EXPECT_NE(broken([](auto& s) { s.rows = 0; }).find("empty"), std::string::npos);
  // Without a driver the encoding itself is never reached for a spec TMA cannot describe.
  detail::TileMapSpec misaligned = ok;
  misaligned.address += 2;
  try {
    detail::tile_map(misaligned);
    ADD_FAILURE() << "a misaligned map was encoded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::usage);
    EXPECT_NE(std::string(e.what()).find("16-byte aligned"), std::string::npos);
  }
}

TEST(LaunchGeometry, ClustersDivideTheGrid) {
  LaunchGeometry g;
  EXPECT_EQ(g.blocks_per_cluster(), 1u);
  g.cluster[0] = 2;
  g.cluster[1] = 2;
  EXPECT_EQ(g.blocks_per_cluster(), 4u);
}

TEST(Half, EveryHalfRoundTripsThroughFloat) {
  for (std::uint32_t bits = 0; bits < 0x10000; ++bits) {
    const auto half = static_cast<std::uint16_t>(bits);
    const float value = tuner::half_to_float(half);
    if (std::isnan(value)) {
      EXPECT_TRUE(std::isnan(tuner::half_to_float(tuner::float_to_half(value))));
      continue;
    }
    ASSERT_EQ(tuner::float_to_half(value), half) << "bits " << bits;
  }
}

TEST(Half, RoundsToNearestEven) {
  EXPECT_EQ(tuner::half_to_float(tuner::float_to_half(1.0f + 1.0f / 2048)), 1.0f);  // tie, to even
  EXPECT_EQ(tuner::half_to_float(tuner::float_to_half(1.0f + 3.0f / 2048)), 1.0f + 2.0f / 1024);
  EXPECT_EQ(tuner::half_to_float(tuner::float_to_half(70000.0f)), INFINITY);
  EXPECT_EQ(tuner::half_to_float(tuner::float_to_half(65504.0f)), 65504.0f);
  EXPECT_EQ(tuner::half_to_float(tuner::float_to_half(-0.1f)), -0.0999755859375f);
}

}  // namespace
}  // namespace gmjit
