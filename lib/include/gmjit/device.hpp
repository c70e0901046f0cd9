#pragma once
/// @file device.hpp
/// The GPUs libgmjit can see, and the fingerprint that keys every cached result.

#include <string>
#include <vector>

namespace gmjit {

/// One device as libgmjit keys it. Two devices with the same fingerprint() are interchangeable.
struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int cc_major = 0;
  int cc_minor = 0;
  std::string arch;  ///< the -arch NVRTC compiles for, e.g. sm_90a on compute capability 9.0
  int sm_count = 0;
  long long l2_bytes = 0;
  int shared_optin_bytes = 0;  ///< largest dynamic shared memory a block may opt into
  long long global_memory_bytes = 0;
  int driver_version = 0;  ///< as cuDriverGetVersion, e.g. 13000
  int nvrtc_major = 0;
  int nvrtc_minor = 0;

  /// Stable hex key over every field that changes generated code or its speed.
  std::string fingerprint() const;
  /// All fields as one JSON object.
  std::string to_json() const;
};

/// Whether a driver and a device are present, and if not, why (one line).
struct DriverStatus {
  bool available = false;
  int device_count = 0;
  int driver_version = 0;
  std::string reason;
};

/// Never throws: loads libcuda.so.1 on first use and reports what it found.
DriverStatus driver_status();

/// Every visible device. Throws Error(driver) with the reason when there is no driver or device.
std::vector<DeviceInfo> list_devices();

/// The compile target NVRTC uses for a compute capability: sm_90a on 9.0 (Hopper's wgmma and
/// TMA need the "a" target), sm_XY elsewhere.
std::string arch_for(int cc_major, int cc_minor);

}  // namespace gmjit
