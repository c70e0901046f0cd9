#pragma once
// GPU tests skip with the driver's reason when no device is present, unless
// GMJIT_REQUIRE_GPU=1, which turns that skip into a failure so a GPU run cannot pass vacuously.
// A compile-only run (GMJIT_TEST_COMPILE_ONLY=<arch>, gpu_test_support.hpp) skips them all but
// those that check every configuration of a kernel, which then only compile; it needs no GPU, so
// it cannot be a GMJIT_REQUIRE_GPU=1 run as well.

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#include "gmjit/device.hpp"

namespace gmjit::gpu_test {

// The arch a compile-only run compiles for; null in a run that checks on the GPU.
inline const char* compile_only_arch() {
  const char* arch = std::getenv("GMJIT_TEST_COMPILE_ONLY");
  return arch != nullptr && *arch != '\0' ? arch : nullptr;
}

inline bool gpu_required() {
  const char* require = std::getenv("GMJIT_REQUIRE_GPU");
  return require != nullptr && std::strcmp(require, "1") == 0;
}

}  // namespace gmjit::gpu_test

#define GMJIT_REQUIRE_DEVICE()                                                           \
  do {                                                                                   \
    if (::gmjit::gpu_test::compile_only_arch() != nullptr) {                             \
      if (::gmjit::gpu_test::gpu_required()) {                                           \
        FAIL() << "GMJIT_REQUIRE_GPU=1 in a compile-only run (GMJIT_TEST_COMPILE_ONLY)"; \
      }                                                                                  \
      GTEST_SKIP() << "a compile-only run (GMJIT_TEST_COMPILE_ONLY)";                    \
    }                                                                                    \
    const auto gmjit_status_ = ::gmjit::driver_status();                                 \
    if (!gmjit_status_.available) {                                                      \
      if (::gmjit::gpu_test::gpu_required()) {                                           \
        FAIL() << "GMJIT_REQUIRE_GPU=1 but no device: " << gmjit_status_.reason;          \
      }                                                                                  \
      GTEST_SKIP() << gmjit_status_.reason;                                              \
    }                                                                                    \
  } while (0)

// Hopper-only tests (named SM90_*) also skip on other architectures.
#define GMJIT_REQUIRE_SM90()                                                             \
  do {                                                                                   \
    GMJIT_REQUIRE_DEVICE();                                                              \
    const auto gmjit_devices_ = ::gmjit::list_devices();                                 \
    if (gmjit_devices_.front().cc_major != 9) {                                          \
      GTEST_SKIP() << "needs compute capability 9.x, device 0 is "                        \
                   << gmjit_devices_.front().name;                                       \
    }                                                                                    \
  } while (0)

// For the tests whose whole body is verify_every_config, which a compile-only run runs too.
#define GMJIT_REQUIRE_SM90_OR_COMPILE_ONLY()                                             \
  do {                                                                                   \
    if (::gmjit::gpu_test::compile_only_arch() == nullptr ||                             \
        ::gmjit::gpu_test::gpu_required()) {                                             \
      GMJIT_REQUIRE_SM90();                                                              \
    }                                                                                    \
  } while (0)
