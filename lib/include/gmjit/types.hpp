#pragma once
/// @file types.hpp
/// Value types shared by the compile, tune and cache layers.

#include <cstdint>
#include <map>
#include <string>

namespace gmjit {

/// A problem shape: the kernel's problem keys (m, n, k, rows, ...) mapped to sizes.
using Shape = std::map<std::string, std::int64_t>;
/// A tuning configuration: the template's parameter names mapped to values.
using Config = std::map<std::string, std::int64_t>;

/// One problem: a kernel, its dtype and its shape (validate() gives its normalized form).
struct Problem {
  std::string kernel;
  std::string dtype;
  Shape shape;
  std::string label;  ///< where the shape came from ("from" in a shapes file)
};

/// "k=v,k=v" (keys sorted), the form used on the command line and in messages.
std::string format_assignments(const std::map<std::string, std::int64_t>& values);

/// Parses "k=v,k=v". Throws Error(usage) naming the offending token when a pair is malformed,
/// a key repeats, or a value is not an integer.
std::map<std::string, std::int64_t> parse_assignments(const std::string& text);

/// Grid and block of one launch, its dynamic shared memory, and its thread-block clusters (blocks
/// per cluster along each axis; 1x1x1 launches no clusters). The grid is a whole number of clusters.
struct LaunchGeometry {
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  unsigned dynamic_shared_bytes = 0;
  unsigned cluster[3] = {1, 1, 1};
  std::uint64_t threads_per_block() const {
    return std::uint64_t{block[0]} * block[1] * block[2];
  }
  std::uint64_t blocks_per_cluster() const {
    return std::uint64_t{cluster[0]} * cluster[1] * cluster[2];
  }
};

/// What ptxas reported for one kernel.
struct ResourceUsage {
  int registers = 0;
  int barriers = 0;
  int stack_bytes = 0;
  int spill_store_bytes = 0;
  int spill_load_bytes = 0;
  int shared_bytes = 0;    ///< static shared memory
  int constant_bytes = 0;  ///< cmem[0], the kernel's parameter bank
  /// False when the report came from the cubin alone (ptxas printed none): spill sizes unknown.
  bool spills_known = true;
};

}  // namespace gmjit
