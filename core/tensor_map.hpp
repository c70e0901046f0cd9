#pragma once
// TMA tensor maps (CUtensorMap) of 2-D row-major tiles, encoded through the Driver API and kept
// per address and shape, so a kernel whose arguments include maps pays the encoding once per
// tensor rather than once per launch. No CUDA header: the kernel descriptors in templates/ build
// the specs and pass the maps on as plain 128-byte kernel arguments.

#include <cstdint>
#include <string>

namespace gmjit::detail {

// Bytes of the shared-memory swizzle a load writes; 128 for the wgmma operands.
enum class TileSwizzle : std::uint8_t { none = 0, bytes32 = 32, bytes64 = 64, bytes128 = 128 };

// A row-major matrix in global memory and the box one TMA load copies out of it. Elements outside
// the matrix arrive as zeros.
struct TileMapSpec {
  std::uint64_t address = 0;           // element (0, 0)
  std::uint32_t element_bytes = 2;     // 1, 2, 4 or 8
  std::uint64_t rows = 0, cols = 0;    // cols is the contiguous dimension
  std::uint64_t row_stride_bytes = 0;  // distance between rows
  std::uint32_t box_rows = 0, box_cols = 0;
  TileSwizzle swizzle = TileSwizzle::none;
  bool operator==(const TileMapSpec& other) const;
};

// A CUtensorMap's bytes, as the kernel receives it (`const __grid_constant__`).
struct alignas(64) TileMap {
  unsigned char bytes[128];
};

// Why TMA cannot describe `spec` (alignment, stride, box limits), empty when it can. Checked
// without the driver, so a descriptor can leave such shapes to another kernel.
std::string tile_map_violation(const TileMapSpec& spec);

// The encoded map of `spec`, from a process-wide cache keyed by every field. Throws
// Error(usage) with tile_map_violation's reason, or Error(driver) when the encoding fails.
TileMap tile_map(const TileMapSpec& spec);

}  // namespace gmjit::detail
