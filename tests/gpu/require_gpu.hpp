#pragma once
// GPU tests skip with the driver's reason when no device is present, unless
// GMJIT_REQUIRE_GPU=1, which turns that skip into a failure so a GPU run cannot pass vacuously.

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#include "gmjit/device.hpp"

#define GMJIT_REQUIRE_DEVICE()                                                           \
  do {                                                                                   \
    const auto gmjit_status_ = ::gmjit::driver_status();                                 \
    if (!gmjit_status_.available) {                                                      \
      const char* gmjit_require_ = std::getenv("GMJIT_REQUIRE_GPU");                     \
      if (gmjit_require_ != nullptr && std::strcmp(gmjit_require_, "1") == 0) {          \
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
