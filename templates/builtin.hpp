#pragma once
// What the built-in descriptors share: one-dimensional launches, the reference kernels' launch,
// sizes passed as 64-bit scalars, fixed tolerances, and the persistent grids of the reductions.

#include <cstdint>
#include <string>
#include <vector>

#include "templates/registry.hpp"

namespace gmjit::templates {

// One dimension of `blocks` blocks of `threads` threads.
LaunchGeometry linear_launch(std::int64_t blocks, std::int64_t threads, std::int64_t dynamic_shared_bytes = 0);
// A launch for a kernel that loops grid-stride over `items`, `per_block` of them per block and
// round: the grid is capped at 2^31 - 1 blocks, so every size stays launchable.
LaunchGeometry grid_stride_launch(std::int64_t items, std::int64_t per_block, std::int64_t threads);
// The launch of a reference kernel: blocks of 256 threads (the reference block reductions want a
// power of two up to 256), at most 65535 of them, since every reference loops grid-stride.
LaunchGeometry reference_launch(std::int64_t blocks);

// violation for a kernel whose domains are its only rules.
std::string no_violation(const Config&, const Shape&);
inline constexpr const char* kNoConstraints = "none beyond the domains";

// add_scalars passing the problem sizes `keys`, in order, each as a long long.
std::function<void(detail::KernelArgs&, const Shape&)> long_sizes(std::vector<std::string> keys);
// The most elements a built-in kernel's tensor may have: 2^48, 256 TiB at one byte each, more
// than any device holds, so element and byte offsets in 64 bits never come near overflow.
inline constexpr std::int64_t kMaxElements = std::int64_t{1} << 48;
inline constexpr const char* kMaxElementsText = "2^48";
// Why a * b elements (what, e.g. "rows x cols") exceed `limit` (named `limit_text`), computed
// without overflow for positive a and b; empty when they do not.
std::string product_above(const std::string& what, std::int64_t a, std::int64_t b, std::int64_t limit,
                          const std::string& limit_text);

// Why a GEMM's sizes m, n, k (passed to the kernel as int, each matrix indexed in int) exceed
// what 32-bit arithmetic holds; empty when they do not. Each size is checked alone first, so the
// products cannot overflow.
std::string int_gemm_violation(const Shape& shape);

// tolerance for a kernel whose error bound depends on neither dtype nor shape.
std::function<double(const DtypeInfo&, const Shape&)> fixed_tolerance(double tolerance);

// A reduction's persistent grid: `blocks` blocks (a domain of multiples of the H200's 132 SMs)
// stride over x in block steps of block * unroll 16-byte vectors. A grid larger than x's block
// steps is capped to them, which would make two blocks values launch the same grid; only the
// smallest of those stays valid.
class PersistentGrid {
 public:
  // `vector_items`: elements of x in a 16-byte vector; `vector_unit`: how messages name one
  // vector ("4 elements", "16 bytes").
  PersistentGrid(std::vector<std::int64_t> blocks, std::int64_t vector_items, std::string vector_unit);

  const std::vector<std::int64_t>& blocks() const { return blocks_; }
  // Block steps that cover x (at least one): more blocks than this would find nothing to load.
  std::int64_t block_steps(const Config& c, const Shape& s) const;
  LaunchGeometry launch(const Config& c, const Shape& s) const;
  // Why c's blocks value repeats a smaller one's grid; empty when it does not.
  std::string violation(const Config& c, const Shape& s) const;
  std::string constraints_doc() const;

 private:
  std::vector<std::int64_t> blocks_;
  std::int64_t vector_items_;
  std::string vector_unit_;
};

}  // namespace gmjit::templates
