#include "templates/builtin.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace gmjit::templates {

LaunchGeometry linear_launch(std::int64_t blocks, std::int64_t threads, std::int64_t dynamic_shared_bytes) {
  LaunchGeometry g;
  g.grid[0] = static_cast<unsigned>(blocks);
  g.block[0] = static_cast<unsigned>(threads);
  g.dynamic_shared_bytes = static_cast<unsigned>(dynamic_shared_bytes);
  return g;
}

LaunchGeometry grid_stride_launch(std::int64_t items, std::int64_t per_block, std::int64_t threads) {
  return linear_launch(std::min<std::int64_t>(ceil_div(items, per_block), 2147483647), threads);
}

LaunchGeometry reference_launch(std::int64_t blocks) {
  return linear_launch(std::min<std::int64_t>(blocks, 65535), 256);
}

std::string no_violation(const Config&, const Shape&) { return {}; }

std::string product_above(const std::string& what, std::int64_t a, std::int64_t b, std::int64_t limit,
                          const std::string& limit_text) {
  if (a <= limit / b) return {};
  return b == 1 ? fmt::format("supports {} up to {}, not {}", what, limit_text, a)
                : fmt::format("supports {} up to {} elements, not {} x {}", what, limit_text, a, b);
}

std::string int_gemm_violation(const Shape& s) {
  const std::int64_t limit = std::int64_t{1} << 31;
  for (const char* key : {"m", "n", "k"}) {
    if (s.at(key) >= limit) return fmt::format("takes {} as int: {}={} is 2^31 or more", key, key, s.at(key));
  }
  if (s.at("m") * s.at("k") >= limit || s.at("k") * s.at("n") >= limit || s.at("m") * s.at("n") >= limit) {
    return "matrices of 2^31 elements or more need 64-bit indexing, which this template lacks";
  }
  return {};
}

std::function<void(detail::KernelArgs&, const Shape&)> long_sizes(std::vector<std::string> keys) {
  return [keys = std::move(keys)](detail::KernelArgs& args, const Shape& s) {
    for (const auto& key : keys) args.add(static_cast<long long>(s.at(key)));
  };
}

std::function<double(const DtypeInfo&, const Shape&)> fixed_tolerance(double tolerance) {
  return [tolerance](const DtypeInfo&, const Shape&) { return tolerance; };
}

PersistentGrid::PersistentGrid(std::vector<std::int64_t> blocks, std::int64_t vector_items, std::string vector_unit)
    : blocks_(std::move(blocks)), vector_items_(vector_items), vector_unit_(std::move(vector_unit)) {}

std::int64_t PersistentGrid::block_steps(const Config& c, const Shape& s) const {
  return std::max<std::int64_t>(1, ceil_div(ceil_div(s.at("n"), vector_items_), c.at("block") * c.at("unroll")));
}

LaunchGeometry PersistentGrid::launch(const Config& c, const Shape& s) const {
  return linear_launch(std::min(c.at("blocks"), block_steps(c, s)), c.at("block"));
}

std::string PersistentGrid::violation(const Config& c, const Shape& s) const {
  const auto smaller = std::find(blocks_.begin(), blocks_.end(), c.at("blocks"));
  if (smaller == blocks_.begin() || smaller == blocks_.end()) return {};
  const std::int64_t steps = block_steps(c, s);
  if (steps > *(smaller - 1)) return {};
  // The one blocks value kept for this grid: the smallest that is not capped below itself.
  const std::int64_t kept = *std::lower_bound(blocks_.begin(), smaller, steps);
  return fmt::format("blocks={} launches only {} blocks at n={} (block={} x unroll={} x {} per block step), as "
                     "blocks={} does",
                     c.at("blocks"), steps, s.at("n"), c.at("block"), c.at("unroll"), vector_unit_, kept);
}

std::string PersistentGrid::constraints_doc() const {
  return fmt::format("blocks above {} only where x has more block steps (block * unroll * {} each) than the next "
                     "smaller blocks value, since a grid capped to the data would repeat that configuration",
                     blocks_.front(), vector_unit_);
}

}  // namespace gmjit::templates
