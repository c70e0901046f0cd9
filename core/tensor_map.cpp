#include "core/tensor_map.hpp"

#include <fmt/format.h>

#include <cstring>
#include <unordered_map>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "core/driver.hpp"
#include "gmjit/error.hpp"

namespace gmjit::detail {
namespace {

// The kernel receives the bytes, so only their number must agree (CUDA 13 aligns CUtensorMap to
// 128 bytes on the host; the launch copies it wherever it lies).
static_assert(sizeof(TileMap) == sizeof(CUtensorMap), "TileMap carries a CUtensorMap's bytes");

// A launch looks its maps up under this bound: tensors that come and go (a caching allocator's
// blocks) are encoded again after the cache starts over, never served stale, since the key is
// every field of the spec. A thread holds at most this many, about 0.8 MB.
constexpr std::size_t kMaxCachedMaps = 4096;

struct SpecHash {
  std::size_t operator()(const TileMapSpec& s) const {
    const std::uint64_t fields[] = {s.address,      s.element_bytes, s.rows, s.cols, s.row_stride_bytes,
                                    s.box_rows,     s.box_cols,      static_cast<std::uint64_t>(s.swizzle)};
    return static_cast<std::size_t>(XXH3_64bits(fields, sizeof fields));
  }
};

CUtensorMapDataType data_type(std::uint32_t element_bytes) {
  switch (element_bytes) {
    case 1: return CU_TENSOR_MAP_DATA_TYPE_UINT8;
    case 2: return CU_TENSOR_MAP_DATA_TYPE_UINT16;
    case 4: return CU_TENSOR_MAP_DATA_TYPE_UINT32;
    default: return CU_TENSOR_MAP_DATA_TYPE_UINT64;
  }
}

CUtensorMapSwizzle swizzle_mode(TileSwizzle s) {
  switch (s) {
    case TileSwizzle::bytes32: return CU_TENSOR_MAP_SWIZZLE_32B;
    case TileSwizzle::bytes64: return CU_TENSOR_MAP_SWIZZLE_64B;
    case TileSwizzle::bytes128: return CU_TENSOR_MAP_SWIZZLE_128B;
    default: return CU_TENSOR_MAP_SWIZZLE_NONE;
  }
}

}  // namespace

bool TileMapSpec::operator==(const TileMapSpec& o) const {
  return address == o.address && element_bytes == o.element_bytes && rows == o.rows && cols == o.cols &&
         row_stride_bytes == o.row_stride_bytes && box_rows == o.box_rows && box_cols == o.box_cols &&
         swizzle == o.swizzle;
}

// The limits of cuTensorMapEncodeTiled (CUDA Driver API, "Tensor Map Object Management").
std::string tile_map_violation(const TileMapSpec& s) {
  if (s.element_bytes != 1 && s.element_bytes != 2 && s.element_bytes != 4 && s.element_bytes != 8) {
    return fmt::format("elements of {} bytes (TMA copies 1, 2, 4 or 8)", s.element_bytes);
  }
  if (s.address % 16 != 0) return fmt::format("address {:#x} is not 16-byte aligned", s.address);
  if (s.rows == 0 || s.cols == 0) return "an empty matrix";
  if (s.rows > (std::uint64_t{1} << 32) || s.cols > (std::uint64_t{1} << 32)) return "a dimension above 2^32";
  if (s.row_stride_bytes % 16 != 0) {
    return fmt::format("a row stride of {} bytes, not a multiple of 16", s.row_stride_bytes);
  }
  if (s.row_stride_bytes >= (std::uint64_t{1} << 40)) return "a row stride of 2^40 bytes or more";
  if (s.box_rows == 0 || s.box_cols == 0 || s.box_rows > 256 || s.box_cols > 256) {
    return fmt::format("a {}x{} box (each side 1..256)", s.box_rows, s.box_cols);
  }
  if ((s.box_cols * s.element_bytes) % 16 != 0) {
    return fmt::format("a box row of {} bytes, not a multiple of 16", s.box_cols * s.element_bytes);
  }
  if (s.swizzle != TileSwizzle::none && s.box_cols * s.element_bytes > static_cast<std::uint32_t>(s.swizzle)) {
    return fmt::format("a box row of {} bytes is wider than its {}-byte swizzle", s.box_cols * s.element_bytes,
                       static_cast<int>(s.swizzle));
  }
  return {};
}

TileMap tile_map(const TileMapSpec& spec) {
  // One cache a thread: threads launching side by side never wait on each other for two lookups a
  // launch, and a map encoded twice in two threads is the same bytes.
  thread_local std::unordered_map<TileMapSpec, TileMap, SpecHash> cache;
  if (const auto hit = cache.find(spec); hit != cache.end()) return hit->second;
  if (auto why = tile_map_violation(spec); !why.empty()) {
    throw Error(ErrorKind::usage, 0, "TMA cannot describe this tensor: " + why);
  }
  const cuuint64_t dims[2] = {spec.cols, spec.rows};
  const cuuint64_t strides[1] = {spec.row_stride_bytes};
  const cuuint32_t box[2] = {spec.box_cols, spec.box_rows};
  const cuuint32_t element_strides[2] = {1, 1};
  CUtensorMap map;
  GMJIT_CU(driver().cuTensorMapEncodeTiled(&map, data_type(spec.element_bytes), 2,
                                           reinterpret_cast<void*>(static_cast<std::uintptr_t>(spec.address)), dims,
                                           strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                           swizzle_mode(spec.swizzle), CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                           CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
  TileMap out;
  std::memcpy(out.bytes, &map, sizeof(out.bytes));
  if (cache.size() >= kMaxCachedMaps) cache.clear();
  cache.emplace(spec, out);
  return out;
}

}  // namespace gmjit::detail
