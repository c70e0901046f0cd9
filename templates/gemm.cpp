// gemm: bf16/fp16 C[m,n] = A[m,k] @ B with fp32 accumulation, C in the input dtype, A and C
// row-major; trans_b (a flag problem key) stores B as k x n (0) or n x k (1, weights). Three
// kernels: behind `path` 0 gemm_mma (gmjit/gemm.cuh, mma.sync tiles) or, with wgmma=1, the Hopper
// family gemm_wgmma (gmjit/gemm_wgmma.cuh: TMA, mbarrier ring, wgmma, a producer warpgroup,
// persistent grid; sm_90a only); behind path 1, for m <= 16, gemm_skinny (gmjit/gemm_skinny.cuh,
// a split-K GEMV-like kernel bound by reading B).
// Each path has its own parameters and keeps the other's at their defaults; split_k and its
// workspace (m*n fp32 partials, then a counter per 16x16 tile of C, zero between launches) are
// shared. trans_b, the aligned flag (k and n multiples of 8) and, for the skinny path, m rounded
// up to a power of two are template arguments derived from the shape.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor_map.hpp"
#include "templates/builtin.hpp"

namespace gmjit::templates {
namespace {

// The H200's 132 SMs: split-K only pays while the tile grid leaves them idle.
constexpr std::int64_t kSms = 132;
// Split-K keeps an fp32 partial per element of C in the workspace: up to 2^25 of them (128 MiB).
constexpr std::int64_t kMaxSplitElements = std::int64_t{1} << 25;
// The opt-in shared memory of an sm_90 block (CUDA C Programming Guide, compute capability 9.0).
constexpr std::int64_t kMaxSharedBytes = 232448;
constexpr std::int64_t kMmaMaxStages = 5;
// bn=192 is the Hopper family's (m64n192k16): its 128x192 and 64x192 tiles fill 128 of the 132
// SMs in one wave where 128x256 and 128x128 leave a quarter idle (512x6144 and 1024x1536).
// gemm_mma keeps the tiles it was tuned and tested over.
constexpr std::int64_t kWgmmaOnlyBn = 192;
// gemm_skinny's rows of C per launch, and the columns a block of its kTransB=false kernel covers.
constexpr std::int64_t kSkinnyMaxM = 16;
constexpr std::int64_t kSkinnyColsPerBlockN = 256;

enum Path : std::int64_t { kMma = 0, kSkinny = 1 };

const char* const kMmaParams[] = {"bm", "bn", "bk", "warps_m", "warps_n", "stages", "group_m"};
// The Hopper family shares the tile parameters and adds its own; bk is fixed at 64 (one 128-byte
// swizzle span of 16-bit elements) and the warp grid is its warpgroups, so warps_* stay default.
const char* const kWgmmaParams[] = {"bm", "bn", "stages", "group_m", "consumers", "pingpong", "cluster", "tma_store"};
const char* const kSkinnyParams[] = {"sk_warps", "sk_cols", "sk_unroll"};

Config default_config() {
  // Valid at every shape: no split, and a 128x128x32 tile over 2x2 warps that fits any device.
  // group_m=1: a grouped raster repeats it on one-row or one-column tile grids, where only
  // group_m=1 is kept.
  return {{"path", kMma},    {"bm", 128},      {"bn", 128},     {"bk", 32},       {"warps_m", 2},
          {"warps_n", 2},    {"stages", 3},    {"group_m", 1},  {"split_k", 1},   {"sk_warps", 8},
          {"sk_cols", 2},    {"sk_unroll", 4},  {"wgmma", 0},     {"consumers", 1},
          {"pingpong", 0},   {"cluster", 1},    {"tma_store", 0}};
}

constexpr const char* kConstraints =
    "path=0 (gemm_mma, the rules of gemm_detail::mma_config_violation_code): warps_m*warps_n in [2, 8], the warp "
    "tile (bm/warps_m) x (bn/warps_n) a multiple of 16x16 and at most 64 in each, a stage's 16-byte chunks a "
    "multiple of the threads, bn != 192, stages <= 5, stages*(bm+bn)*bk*2 <= 232448 shared bytes; group_m > 1 "
    "only on a tile grid of two rows and two columns or more; the sk_* params at their defaults. "
    "path=1 (gemm_skinny): m <= 16; sk_cols*sk_unroll <= 16, and sk_unroll <= 4 for m > 8 with trans_b=1; with "
    "trans_b=0 sk_cols at its default (unused), and not sk_warps=4 with sk_unroll=2 for m 5-8 when k or n is not a "
    "multiple of 8 (spills); "
    "split_k > 1 with trans_b=1 needs sk_warps*sk_cols >= 16; the mma params at their defaults. "
    "path=0 with wgmma=1 (gemm_wgmma, wgmma_detail::wgmma_config_violation_code; an sm_90a device): bk=64, warps_m and "
    "warps_n at their defaults, split_k > 1 only with fewer than 132 tiles, k and n multiples of 8 (TMA's 16-byte "
    "strides; other shapes are left to wgmma=0), bm a multiple of 64*consumers, (bm/consumers/64)*(bn/2) <= 128 accumulators a consumer thread, "
    "1056+stages*((bm+bn)*128+16) <= 232448 shared bytes; pingpong=1 (whole tiles in turn, (bm/64)*(bn/2) <= 128) "
    "only with consumers=2; cluster=2 (two blocks on adjacent tile rows, B multicast) needs bn >= 128 and two tile "
    "rows or more; tma_store=1 (C through shared memory and a TMA store, 16384 shared bytes a consumer more) only "
    "with split_k=1; consumers, pingpong, cluster and tma_store at their defaults with wgmma=0. "
    "Both: split_k > 1 only when m*n <= 2^25, every k-slice is non-empty and the grid has under two waves of "
    "132 blocks";

bool aligned(const Shape& s) { return s.at("k") % 8 == 0 && s.at("n") % 8 == 0; }

// gemm_skinny's kMTile: the rows of C a thread accumulates, the next power of two from m.
std::int64_t skinny_m_tile(const Shape& s) {
  std::int64_t tile = 1;
  while (tile < s.at("m")) tile *= 2;
  return tile;
}

std::int64_t skinny_cols_per_block(const Config& c, const Shape& s) {
  return s.at("trans_b") != 0 ? c.at("sk_warps") * c.at("sk_cols") : kSkinnyColsPerBlockN;
}

std::int64_t tiles(const Config& c, const Shape& s) {
  return ceil_div(s.at("m"), c.at("bm")) * ceil_div(s.at("n"), c.at("bn"));
}

// Blocks in x: the tiles of C (mma), one block an SM walking them (wgmma: the SMs shared among
// the split's k-slices in z) or the column groups (skinny).
std::int64_t grid_x(const Config& c, const Shape& s) {
  if (c.at("path") == kSkinny) return ceil_div(s.at("n"), skinny_cols_per_block(c, s));
  if (c.at("wgmma") == 1) {
    // Clusters walk pairs of tile rows; a grid of whole clusters.
    const std::int64_t cluster = c.at("cluster");
    const std::int64_t units = ceil_div(ceil_div(s.at("m"), c.at("bm")), cluster) * ceil_div(s.at("n"), c.at("bn"));
    return cluster * std::min(units, std::max<std::int64_t>(1, kSms / c.at("split_k") / cluster));
  }
  return tiles(c, s);
}

// Mirrors gmjit::gemm_detail::mma_smem_bytes in gmjit/gemm.cuh.
std::int64_t mma_smem_bytes(const Config& c) {
  return c.at("stages") * (c.at("bm") + c.at("bn")) * c.at("bk") * 2;
}

// Mirrors gmjit::gemm_detail::mma_config_violation_code in gmjit/gemm.cuh, rule for rule and in
// its order (the code there in brackets); the kernel's static_asserts reject the same
// configurations. Rules 1, 2 and 7 (bk, bm, bn, stages outside what the kernel handles) cannot
// fail inside the domains, but are kept so the two stay the same function.
std::string mma_violation(const Config& c) {
  const std::int64_t bm = c.at("bm"), bn = c.at("bn"), bk = c.at("bk"), wm = c.at("warps_m"), wn = c.at("warps_n");
  const std::int64_t warps = wm * wn;
  if (bk != 32 && bk != 64) return fmt::format("bk={} is not 32 or 64 [1]", bk);
  if (bm % 64 != 0 || bn % 64 != 0) return fmt::format("bm={} or bn={} is not a multiple of 64 [2]", bm, bn);
  if (warps < 2 || warps > 8) return fmt::format("warps_m*warps_n={} is outside [2, 8] [3]", warps);
  if (bm % (wm * 16) != 0 || bn % (wn * 16) != 0) {
    return fmt::format("warp tile {}x{} is not a multiple of 16x16 [4]", bm / wm, bn / wn);
  }
  if (bm / wm > 64 || bn / wn > 64) {
    return fmt::format("warp tile {}x{} exceeds 64 in m or n (more than 128 accumulators a thread) [5]", bm / wm,
                       bn / wn);
  }
  if ((bm * bk / 8) % (warps * 32) != 0 || (bn * bk / 8) % (warps * 32) != 0) {
    return fmt::format("the 16-byte chunks of a {}x{} or {}x{} stage do not divide among {} threads [6]", bm, bk, bn,
                       bk, warps * 32);
  }
  if (c.at("stages") < 2) return "stages < 2 [7]";
  if (mma_smem_bytes(c) > kMaxSharedBytes) {
    return fmt::format("stages*(bm+bn)*bk*2 = {} shared bytes, more than {} [8]", mma_smem_bytes(c), kMaxSharedBytes);
  }
  return {};
}

bool is_wgmma(const Config& c) { return c.at("path") == kMma && c.at("wgmma") == 1; }

// Mirrors gmjit::wgmma_detail::wgmma_smem_bytes in gmjit/gemm_wgmma.cuh: 1024 bytes to align the
// ring for the 128-byte swizzle, two turn mbarriers and two split-K flags, the stages' A and B
// tiles (64 deep, 128 bytes a row) and a full and an empty mbarrier per stage; with tma_store,
// two 64 x 64 store buffers (8 KiB) a consumer.
std::int64_t wgmma_smem_bytes(const Config& c) {
  return 1024 + 32 + c.at("stages") * ((c.at("bm") + c.at("bn")) * 128 + 16) +
         c.at("tma_store") * c.at("consumers") * 2 * 8192;
}

// Rows of the tile one consumer warpgroup accumulates: all of them with pingpong (the consumers
// take tiles in turn), its share otherwise.
std::int64_t wgmma_consumer_rows(const Config& c) {
  return c.at("pingpong") != 0 ? c.at("bm") : c.at("bm") / c.at("consumers");
}

std::int64_t wgmma_accumulators(const Config& c) { return wgmma_consumer_rows(c) / 64 * (c.at("bn") / 2); }

// Mirrors gmjit::wgmma_detail::wgmma_config_violation_code, rule for rule (its code in brackets).
std::string wgmma_violation(const Config& c) {
  const std::int64_t bm = c.at("bm"), bn = c.at("bn"), consumers = c.at("consumers");
  if (bm != 64 && bm != 128 && bm != 256) return fmt::format("bm={} is not 64, 128 or 256 [1]", bm);
  if (bn != 64 && bn != 128 && bn != 192 && bn != 256) {
    return fmt::format("bn={} is not an instruction's n (64, 128, 192, 256) [2]", bn);
  }
  if (consumers != 1 && consumers != 2) return fmt::format("consumers={} is not 1 or 2 [3]", consumers);
  const bool pingpong = c.at("pingpong") != 0;
  if (!pingpong && bm % (64 * consumers) != 0) {
    return fmt::format("bm={} is not whole 64-row blocks for each of {} consumer warpgroups [4]", bm, consumers);
  }
  if (c.at("stages") < 2) return "stages < 2 [5]";
  if (wgmma_accumulators(c) > 128) {
    return fmt::format("{} fp32 accumulators a consumer thread ({} rows of {} columns), more than 128 [6]",
                       wgmma_accumulators(c), wgmma_consumer_rows(c), bn);
  }
  if (wgmma_smem_bytes(c) > kMaxSharedBytes) {
    return fmt::format("1056+stages*((bm+bn)*128+16)+tma_store*consumers*16384 = {} shared bytes, more than {} [7]",
                       wgmma_smem_bytes(c), kMaxSharedBytes);
  }
  if (pingpong && consumers < 2) return "pingpong=1 takes tiles in turn between two consumers, not one [8]";
  const std::int64_t cluster = c.at("cluster");
  if (cluster != 1 && cluster != 2) return fmt::format("cluster={} is not 1 or 2 [9]", cluster);
  if (cluster == 2 && bn < 128) {
    return fmt::format("cluster=2 splits B's tile in halves of 64 rows or panels: bn={} [9]", bn);
  }
  if (c.at("tma_store") != 0 && c.at("tma_store") != 1) {
    return fmt::format("tma_store={} is not 0 or 1 [10]", c.at("tma_store"));
  }
  return {};
}

// The wgmma family's other conditions, before its tile rules: what it leaves to gemm_mma.
std::string wgmma_family_violation(const Config& c, const Shape& s) {
  const Config defaults = default_config();
  if (c.at("bk") != 64) return fmt::format("wgmma=1 loads 64-deep stages: only bk=64, not {}", c.at("bk"));
  for (const char* p : {"warps_m", "warps_n"}) {
    if (c.at(p) != defaults.at(p)) {
      return fmt::format("wgmma=1 does not use {} (its warps are warpgroups): only {}={} is kept", p, p, defaults.at(p));
    }
  }
  // Splitting pays only for SMs the tiles leave idle; a persistent grid already covers the rest.
  if (c.at("split_k") > 1 && tiles(c, s) >= kSms) {
    return fmt::format("wgmma=1 splits k only while its {} tiles leave some of the {} SMs idle, not split_k={}",
                       tiles(c, s), kSms, c.at("split_k"));
  }
  // Where the ring holds every 64-deep k-tile of a tile in flight at once, a split shortens no
  // round trip, and its slices' reduction adds three (128^3: split 2 at 8.3 us a launch after an
  // L2 flush, 0.70x cuBLAS, where 256^3's unsplit tile with twice the k took 5.9; H100).
  if (c.at("split_k") > 1 && ceil_div(s.at("k"), 64) <= c.at("stages")) {
    return fmt::format("wgmma=1 splits k only while its {} k-tiles of 64 outnumber the stages in flight, not "
                       "split_k={} with stages={}",
                       ceil_div(s.at("k"), 64), c.at("split_k"), c.at("stages"));
  }
  if (!aligned(s)) {
    return fmt::format("wgmma=1 needs k and n multiples of 8 (TMA's 16-byte row strides), not k={} n={}: left to "
                       "wgmma=0",
                       s.at("k"), s.at("n"));
  }
  // A split tile converts its sums through the workspace, never through the store buffers: the
  // same kernel as tma_store=0.
  if (c.at("tma_store") != 0 && c.at("split_k") > 1) {
    return fmt::format("tma_store=1 stores unsplit tiles; split_k={} converts through the workspace", c.at("split_k"));
  }
  if (c.at("cluster") > 1 && ceil_div(s.at("m"), c.at("bm")) < 2) {
    return fmt::format("cluster={} pairs tile rows, and m={} is one row of bm={}", c.at("cluster"), s.at("m"),
                       c.at("bm"));
  }
  return wgmma_violation(c);
}

// k in the units a k-slice is made of: gemm_mma splits whole bk tiles, gemm_skinny 8-element
// vectors. A slice holds ceil(units / split_k) of them, so some slices are empty when
// (split_k - 1) slices already cover k.
std::string split_violation(const Config& c, const Shape& s) {
  const std::int64_t split = c.at("split_k");
  if (split == 1) return {};
  if (s.at("m") * s.at("n") > kMaxSplitElements) {
    return fmt::format("split_k={} needs an fp32 workspace of m*n = {} floats, more than 2^25", split,
                       s.at("m") * s.at("n"));
  }
  const std::int64_t unit = c.at("path") == kSkinny ? 8 : c.at("bk");
  const std::int64_t units = ceil_div(s.at("k"), unit);
  const std::int64_t per = ceil_div(units, split);
  if ((split - 1) * per >= units) {
    return fmt::format("split_k={} leaves k-slices empty: k={} is {} slices of {} (of {} elements)", split, s.at("k"),
                       ceil_div(units, per), per, unit);
  }
  if (grid_x(c, s) >= 2 * kSms) {
    return fmt::format("split_k={} with {} blocks already two waves of {} SMs", split, grid_x(c, s), kSms);
  }
  return {};
}

std::string shape_violation(const Shape& s) {
  if (auto why = int_gemm_violation(s); !why.empty()) return why;
  const std::int64_t limit = std::int64_t{1} << 31;
  if (s.at("trans_b") != 0 && s.at("trans_b") != 1) {
    return fmt::format("trans_b is 0 (B is k x n) or 1 (B is n x k), not {}", s.at("trans_b"));
  }
  // gemm_mma's offsets within one block's rows are 32-bit: bm * k (A), bn * k (B as n x k) and
  // bk * n (B as k x n) below 2^31 for the largest tile of the domains (256 rows, 64 deep), so
  // that every configuration, the default among them, stays valid at every accepted shape.
  if (256 * s.at("k") >= limit) {
    return fmt::format("k={} is 2^23 or more: 256-row tiles would index past 2^31 within a tile row", s.at("k"));
  }
  if (s.at("trans_b") == 0 && 64 * s.at("n") >= limit) {
    return fmt::format("n={} with trans_b=0 is 2^25 or more: 64-deep tiles of B would index past 2^31", s.at("n"));
  }
  return {};
}

std::string violation(const Config& c, const Shape& s) {
  if (auto why = shape_violation(s); !why.empty()) return why;
  const Config defaults = default_config();
  if (c.at("wgmma") != 0 && c.at("wgmma") != 1) return fmt::format("wgmma is 0 or 1, not {}", c.at("wgmma"));
  if (c.at("path") == kMma) {
    for (const char* p : kSkinnyParams) {
      if (c.at(p) != defaults.at(p)) {
        return fmt::format("path=0 does not use {}: only {}={} (the default) is kept", p, p, defaults.at(p));
      }
    }
    if (c.at("wgmma") == 1) {
      if (auto why = wgmma_family_violation(c, s); !why.empty()) return why;
    } else {
      for (const char* p : {"consumers", "pingpong", "cluster", "tma_store"}) {
        if (c.at(p) != defaults.at(p)) {
          return fmt::format("wgmma=0 does not use {}: only {}={} (the default) is kept", p, p, defaults.at(p));
        }
      }
      // Deeper rings pay where a few blocks walk a long k and each k-tile waits one TMA round trip:
      // the Hopper family's 64x64 tiles ran 128x4096x4096 in 0.0292 ms with 5 stages and 0.0239
      // with 8 (H100, bench/NOTES.md). gemm_mma keeps the 2-5 it was tuned and tested over; 6 and
      // 8 would add half again to its share of every search.
      if (c.at("stages") > kMmaMaxStages) {
        return fmt::format("wgmma=0 keeps at most {} cp.async stages, not {}", kMmaMaxStages, c.at("stages"));
      }
      if (c.at("bn") == kWgmmaOnlyBn) return fmt::format("bn={} is wgmma=1's alone", kWgmmaOnlyBn);
      if (auto why = mma_violation(c); !why.empty()) return why;
    }
    // gemm_mma's grouped raster visits the tiles in row-major order when the tile grid is one row
    // or one column: the same launch as group_m=1. (A cluster's rows walk as one.)
    const std::int64_t tiles_m = ceil_div(ceil_div(s.at("m"), c.at("bm")), c.at("cluster")),
                       tiles_n = ceil_div(s.at("n"), c.at("bn"));
    if (c.at("group_m") > 1 && (tiles_m == 1 || tiles_n == 1)) {
      return fmt::format("group_m={} on a {}x{} tile grid visits tiles as group_m=1 does", c.at("group_m"), tiles_m,
                         tiles_n);
    }
  } else {
    if (s.at("m") > kSkinnyMaxM) return fmt::format("path=1 (skinny) is for m <= 16, not m={}", s.at("m"));
    for (const char* p :
         {"bm", "bn", "bk", "warps_m", "warps_n", "stages", "group_m", "wgmma", "consumers", "pingpong", "cluster",
          "tma_store"}) {
      if (c.at(p) != defaults.at(p)) {
        return fmt::format("path=1 does not use {}: only {}={} (the default) is kept", p, p, defaults.at(p));
      }
    }
    if (s.at("trans_b") == 0 && c.at("sk_cols") != defaults.at("sk_cols")) {
      return fmt::format("trans_b=0 does not use sk_cols: only sk_cols={} (the default) is kept",
                         defaults.at("sk_cols"));
    }
    // Registers: a thread holds sk_cols * sk_unroll 16-byte loads of B in flight.
    if (s.at("trans_b") != 0 && c.at("sk_cols") * c.at("sk_unroll") > 16) {
      return fmt::format("sk_cols*sk_unroll = {} loads in flight per thread, more than 16",
                         c.at("sk_cols") * c.at("sk_unroll"));
    }
    // ptxas 13.0 spills 36-44 bytes when 16 rows of accumulators meet 8 loads per column in
    // flight (tests/nvrtc/test_gemm_compile.cpp); 4 do not.
    if (s.at("trans_b") != 0 && skinny_m_tile(s) == 16 && c.at("sk_unroll") > 4) {
      return fmt::format("sk_unroll={} with m={} > 8 spills registers (trans_b=1: at most 4)", c.at("sk_unroll"),
                         s.at("m"));
    }
    // ptxas 13.0 (sm_90a) spills 24 bytes in this one scalar-path kernel since the split became
    // the grid's depth (tests/nvrtc/test_gemm_compile.cpp); its neighbours do not.
    if (s.at("trans_b") == 0 && !aligned(s) && skinny_m_tile(s) == 8 && c.at("sk_warps") == 4 &&
        c.at("sk_unroll") == 2) {
      return "sk_warps=4 with sk_unroll=2 spills registers on the scalar path (trans_b=0, m 5-8, k or n not a "
             "multiple of 8)";
    }
    // gemm_skinny's split-K counts arrivals per block in x; the workspace has one counter per
    // 16 columns.
    if (s.at("trans_b") != 0 && c.at("split_k") > 1 && c.at("sk_warps") * c.at("sk_cols") < 16) {
      return fmt::format("split_k > 1 needs sk_warps*sk_cols >= 16 columns per block, not {}",
                         c.at("sk_warps") * c.at("sk_cols"));
    }
  }
  return split_violation(c, s);
}

std::string dtype_arg(const DtypeInfo& t) { return t.cpp_type; }
const char* flag(bool b) { return b ? "true" : "false"; }

// Whether some valid configuration splits K at this shape, which is when the kernel needs a
// workspace. split_k=2 is valid whenever a larger split is, and the fewest stages whenever more
// are, so those are the configurations to try: 162 tiles and 12 skinny ones, not the whole cross
// product.
bool split_possible(const KernelDescriptor& d, const Shape& s) {
  if (!shape_violation(s).empty() || s.at("m") * s.at("n") > kMaxSplitElements) return false;
  const auto values = [&](const char* name) {
    return std::find_if(d.params.begin(), d.params.end(), [&](const ParamDomain& p) { return p.name == name; })
        ->values;
  };
  Config c = default_config();
  c["split_k"] = 2;
  for (const auto bm : values("bm")) {
    for (const auto bn : values("bn")) {
      for (const auto bk : values("bk")) {
        for (const auto wm : values("warps_m")) {
          for (const auto wn : values("warps_n")) {
            Config t = c;
            t["bm"] = bm, t["bn"] = bn, t["bk"] = bk, t["warps_m"] = wm, t["warps_n"] = wn;
            t["stages"] = values("stages").front();
            if (violation(t, s).empty()) return true;
          }
        }
      }
      Config w = c;  // the Hopper family, which splits where its tiles leave SMs idle
      w["wgmma"] = 1, w["bk"] = 64, w["bm"] = bm, w["bn"] = bn, w["stages"] = values("stages").front();
      if (violation(w, s).empty()) return true;
    }
  }
  c["path"] = kSkinny;
  for (const auto warps : values("sk_warps")) {
    for (const auto cols : values("sk_cols")) {
      for (const auto unroll : values("sk_unroll")) {
        Config t = c;
        t["sk_warps"] = warps, t["sk_cols"] = cols, t["sk_unroll"] = unroll;
        if (violation(t, s).empty()) return true;
      }
    }
  }
  return false;
}

// Each path's parameters (and split_k) over their domains, the other path's at the default:
// every configuration outside these repeats one of them, and violation rejects it.
std::vector<Config> configurations(const std::vector<ParamDomain>& params) {
  std::vector<Config> all;
  struct Family {
    Path path;
    int wgmma;
    std::vector<std::string> own;
  };
  const Family families[] = {
      {kMma, 0, {std::begin(kMmaParams), std::end(kMmaParams)}},
      {kSkinny, 0, {std::begin(kSkinnyParams), std::end(kSkinnyParams)}},
      {kMma, 1, {std::begin(kWgmmaParams), std::end(kWgmmaParams)}},
  };
  for (const auto& [path, wgmma, own] : families) {
    Config base = default_config();
    base["path"] = path;
    base["wgmma"] = wgmma;
    if (wgmma == 1) base["bk"] = 64;
    std::vector<ParamDomain> varied;
    for (const auto& param : params) {
      if (param.name == "split_k" || std::find(own.begin(), own.end(), param.name) != own.end()) {
        varied.push_back(param);
      }
    }
    for (const auto& config : cross_product(varied, base)) {
      if (wgmma == 0 && (config.at("stages") > kMmaMaxStages || config.at("bn") == kWgmmaOnlyBn)) continue;
      all.push_back(config);
    }
  }
  return all;
}

KernelDescriptor gemm_descriptor() {
  KernelDescriptor d;
  d.name = "gemm";
  d.summary = "bf16/fp16 C = A * B (trans_b=1: B is n x k, the weight layout), row-major A and C, fp32 "
              "accumulation: tensor-core tiles with cp.async stages, or a split-K GEMV-like path for m <= 16";
  d.header = "gmjit/gemm_kernels.cuh";
  d.problem_keys = {"m", "n", "k", "trans_b"};
  d.flag_keys = {"trans_b"};
  d.dtypes = {"bf16", "fp16"};
  d.params = {
      {"path", {kMma, kSkinny}, "0: tensor-core tiles (gemm_mma); 1: skinny-M CUDA-core path (gemm_skinny), m <= 16"},
      {"bm", {64, 128, 256}, "path 0: rows of C per block"},
      {"bn", {64, 128, 192, 256}, "path 0: columns of C per block (192: wgmma=1 only)"},
      {"bk", {32, 64}, "path 0: depth of one shared-memory stage"},
      {"warps_m", {1, 2, 4}, "path 0: warps along m"},
      {"warps_n", {1, 2, 4}, "path 0: warps along n"},
      {"stages", {2, 3, 4, 5, 6, 8, 10, 12}, "path 0: shared-memory pipeline stages (wgmma=0: at most 5)"},
      {"group_m", {1, 8}, "path 0: tile rows per raster group (L2 reuse)"},
      {"split_k", {1, 2, 4, 8}, "k-slices across the grid's z, summed in an fp32 workspace"},
      {"sk_warps", {4, 8}, "path 1: warps per block"},
      {"sk_cols", {2, 4}, "path 1, trans_b=1: columns of C (rows of B) per warp"},
      {"sk_unroll", {2, 4, 8}, "path 1: 16-byte loads of B in flight per thread and column (rows with trans_b=0)"},
      {"wgmma", {0, 1}, "path 0: 1 = the Hopper family (TMA, wgmma, producer/consumer warpgroups, persistent; sm_90a)"},
      {"consumers", {1, 2}, "wgmma=1: consumer warpgroups, each bm/consumers rows of the tile (pingpong=0)"},
      {"pingpong", {0, 1}, "wgmma=1, consumers=2: 1 = the consumers take whole tiles in turn (epilogue overlaps)"},
      {"cluster", {1, 2}, "wgmma=1: 2 = clusters of two blocks on adjacent tile rows, B's tile multicast to both"},
      {"tma_store", {0, 1}, "wgmma=1, split_k=1: 1 = C leaves through shared memory (64x64 chunks) and a TMA store"},
  };
  d.default_config = default_config();
  d.configurations = [params = d.params] { return configurations(params); };
  d.constraints_doc = kConstraints;
  d.shape_violation = shape_violation;
  d.violation = violation;
  // kAligned (k and n multiples of 8) also assumes 16-byte aligned A, B and C: descriptors never
  // see pointers, and the library's allocations and the tuner's buffers are 256-byte aligned, as
  // sgemm's vec assumes.
  d.name_expression = [](const Config& c, const Shape& s, const DtypeInfo& t) {
    const char* trans_b = flag(s.at("trans_b") != 0);
    if (c.at("path") == kSkinny) {
      return fmt::format("gmjit::gemm_skinny<{}, {}, {}, {}, {}, {}, {}>", dtype_arg(t), trans_b, skinny_m_tile(s),
                         c.at("sk_warps"), c.at("sk_cols"), c.at("sk_unroll"), flag(aligned(s)));
    }
    if (c.at("wgmma") == 1) {
      return fmt::format("gmjit::gemm_wgmma<{}, {}, {}, {}, {}, {}, {}, {}, {}, {}>", dtype_arg(t), trans_b,
                         c.at("bm"), c.at("bn"), c.at("stages"), c.at("consumers"), c.at("group_m"),
                         flag(c.at("pingpong") != 0), c.at("cluster"), flag(c.at("tma_store") != 0));
    }
    // split_k is the grid's depth (geometry below), so every split shares one compile.
    return fmt::format("gmjit::gemm_mma<{}, {}, {}, {}, {}, {}, {}, {}, {}, {}>", dtype_arg(t), trans_b, c.at("bm"),
                       c.at("bn"), c.at("bk"), c.at("warps_m"), c.at("warps_n"), c.at("stages"), c.at("group_m"),
                       flag(aligned(s)));
  };
  d.geometry = [](const Config& c, const Shape& s, const DtypeInfo&) {
    LaunchGeometry g;
    g.grid[0] = static_cast<unsigned>(grid_x(c, s));
    g.grid[2] = static_cast<unsigned>(c.at("split_k"));
    if (c.at("path") == kSkinny) {
      g.block[0] = static_cast<unsigned>(c.at("sk_warps") * 32);
    } else if (c.at("wgmma") == 1) {
      g.block[0] = static_cast<unsigned>((c.at("consumers") + 1) * 128);
      g.dynamic_shared_bytes = static_cast<unsigned>(wgmma_smem_bytes(c));
      g.cluster[0] = static_cast<unsigned>(c.at("cluster"));
    } else {
      g.block[0] = static_cast<unsigned>(c.at("warps_m") * c.at("warps_n") * 32);
      g.dynamic_shared_bytes = static_cast<unsigned>(mma_smem_bytes(c));
    }
    return g;
  };
  describe_tensors(d, {{"A", false, {}, R"(["*", "m", "k"])"},
                       {"B", false, {}, R"(["*", "k", "n"])"},
                       {"C", true, {}, R"(["*", "m", "n"])"}});
  // Split-K: an fp32 partial per element of C, then ceil(m/16) * ceil(n/16) arrival counters,
  // all zero between launches (the last block of each tile restores them). Shapes where no valid
  // configuration splits need none.
  d.workspace = [](const Shape& s) {
    if (!split_possible(find_kernel("gemm"), s)) return WorkspaceNeed{0, 0};
    const std::int64_t m = s.at("m"), n = s.at("n");
    return WorkspaceNeed{4 * (m * n + ceil_div(m, 16) * ceil_div(n, 16)), 0};
  };
  d.add_scalars = [](detail::KernelArgs& args, const Shape& s) {
    args.add(static_cast<int>(s.at("m"))).add(static_cast<int>(s.at("n"))).add(static_cast<int>(s.at("k")));
  };
  // The Hopper family's operands arrive through TMA: a map of A (box bm x 64) and of B (box
  // (bn / cluster) x 64 with trans_b=1: each block of a cluster loads its half; 64 x 64 panels of
  // the k x n matrix with trans_b=0), 128-byte swizzled, encoded once per address and shape
  // (detail::tile_map's cache). C's map (64 x 64 boxes) is an argument of every configuration;
  // tma_store=1 stores through it.
  d.add_address_args = [](detail::KernelArgs& args, const Config& c, const Shape& s, const DtypeInfo& t,
                          const std::uint64_t* addresses) {
    if (!is_wgmma(c)) return;
    const auto m = static_cast<std::uint64_t>(s.at("m")), n = static_cast<std::uint64_t>(s.at("n")),
               k = static_cast<std::uint64_t>(s.at("k"));
    const auto bytes = static_cast<std::uint32_t>(t.bytes);
    detail::TileMapSpec a{addresses[0], bytes, m, k, k * bytes, static_cast<std::uint32_t>(c.at("bm")), 64,
                          detail::TileSwizzle::bytes128};
    detail::TileMapSpec b = s.at("trans_b") != 0
                                ? detail::TileMapSpec{addresses[1], bytes, n, k, k * bytes,
                                                      static_cast<std::uint32_t>(c.at("bn") / c.at("cluster")), 64,
                                                      detail::TileSwizzle::bytes128}
                                : detail::TileMapSpec{addresses[1], bytes, k, n, n * bytes, 64, 64,
                                                      detail::TileSwizzle::bytes128};
    const detail::TileMapSpec c_spec{addresses[2], bytes, m, n, n * bytes, 64, 64, detail::TileSwizzle::bytes128};
    const detail::TileMap map_a = detail::tile_map(a), map_b = detail::tile_map(b), map_c = detail::tile_map(c_spec);
    args.add_bytes(map_a.bytes, sizeof map_a.bytes)
        .add_bytes(map_b.bytes, sizeof map_b.bytes)
        .add_bytes(map_c.bytes, sizeof map_c.bytes);
  };
  // With k and n multiples of 8 every family moves A, B and C in 16-byte pieces (the mma tiles'
  // cp.async and stores, the skinny path's loads, TMA and the Hopper epilogue's row octets).
  d.tensor_alignment = [](const Config&, const Shape& s) { return aligned(s) ? 16u : 0u; };
  // wgmma, setmaxnreg and the tensor copies exist only in sm_90a's instruction set.
  d.device_violation = [](const Config& c, const DeviceInfo& device) -> std::string {
    if (!is_wgmma(c) || device.arch == "sm_90a") return {};
    return fmt::format("wgmma=1 needs an sm_90a device (wgmma, TMA, setmaxnreg), not {}", device.arch);
  };
  d.reference_expression = [](const DtypeInfo& t, const Shape& s) {
    return fmt::format("gmjit::reference::gemm<{}, {}>", t.cpp_type, flag(s.at("trans_b") != 0));
  };
  // 64 x 64 tiles of C: columns of tiles along x, rows along y up to the grid's limit (the
  // reference walks the rest).
  d.reference_geometry = [](const Shape& s) {
    LaunchGeometry g;
    g.grid[0] = static_cast<unsigned>(ceil_div(s.at("n"), 64));
    g.grid[1] = static_cast<unsigned>(std::min<std::int64_t>(ceil_div(s.at("m"), 64), 65535));
    g.block[0] = 256;
    return g;
  };
  d.work = [](const Config& c, const Shape& s, const DtypeInfo&) {
    const double m = static_cast<double>(s.at("m")), n = static_cast<double>(s.at("n")),
                 k = static_cast<double>(s.at("k"));
    const double split = static_cast<double>(c.at("split_k"));
    Work w;
    w.flops = 2.0 * m * n * k;
    // Split-K: every slice adds its partials to the workspace, one atomic per element of C, and
    // the last slice of a tile reads the sums back and zeroes them.
    const double split_bytes = split > 1 ? 8.0 * m * n : 0.0;
    w.atomics = split > 1 ? split * m * n : 0.0;
    if (c.at("path") == kSkinny) {
      // B streams once from DRAM; A (at most 16 rows) and C are small beside it.
      w.bytes = 2.0 * (n * k + m * k + m * n) + split_bytes;
      // Measured on the H200 (bench/NOTES.md): 81-87% of a copy's bandwidth with 16-byte loads;
      // the scalar loads of unaligned shapes keep fewer bytes in flight.
      w.memory_efficiency = aligned(s) ? 0.9 : 0.5;
      // CUDA-core FMAs, fed by 16-byte loads (scalar ones when k or n is not a multiple of 8).
      w.compute_efficiency = aligned(s) ? 0.5 : 0.25;
      const double m_tile = static_cast<double>(skinny_m_tile(s));
      const double cols = s.at("trans_b") != 0 ? static_cast<double>(c.at("sk_cols")) : 8.0;
      w.registers = static_cast<int>(std::min(255.0, m_tile * cols + 4.0 * c.at("sk_unroll") * cols / 2 + 40));
      w.shared_bytes = s.at("trans_b") != 0 ? 4 : skinny_m_tile(s) * kSkinnyColsPerBlockN * 4 + 4;
      return w;
    }
    const double bm = static_cast<double>(c.at("bm")), bn = static_cast<double>(c.at("bn"));
    const double tiles_m = std::ceil(m / bm), tiles_n = std::ceil(n / bn);
    // The tensor cores compute whole tiles: at m = 16 a 128-row tile does 8 times the useful work.
    w.flops = 2.0 * tiles_m * bm * tiles_n * bn * k;
    // Every block streams a row panel of A and a column panel of B; the repeats mostly hit L2,
    // more of them with grouped rasterization.
    const double compulsory = 2.0 * (m * k + k * n + m * n);
    const double repeats = 2.0 * ((tiles_n - 1) * m * k + (tiles_m - 1) * k * n);
    w.bytes = compulsory + repeats / (c.at("group_m") > 1 ? 8.0 : 2.0) + split_bytes;
    // B reaches the tensor cores through shared memory behind a barrier per k-tile: 46-56% of a
    // copy's bandwidth at m <= 16 on the H200, where the skinny path reached 81-87%.
    w.memory_efficiency = 0.6;
    // What the blocks read from L2 together: the reason small tiles lose on large problems (at
    // 4096^3, 128x128 tiles read 2.1 GB, 64x64 ones 4.3 GB).
    // A cluster's two blocks read B's tile once between them (multicast).
    w.l2_bytes = 2.0 * tiles_m * tiles_n * (bm + bn / static_cast<double>(c.at("cluster"))) * k;
    // The H200's dense bf16/fp16 tensor-core peak (989 TFLOP/s) is about 14.8 times its fp32 FMA
    // peak (67 TFLOP/s), which the model's peak counts; mma.sync kernels reach about 60-70% of
    // it with a 64x64 warp tile, less with smaller warp tiles (fewer mma per shared load), with
    // fewer than three stages (exposed load latency) and with 32-deep stages (twice the barriers).
    if (c.at("wgmma") == 1) {
      // A persistent grid: every SM walks ceil(units / 132) (tile, k-slice) units, the last wave
      // partly idle. A single wave is a grid of fewer blocks than SMs, which the estimate's own
      // wave efficiency already prices.
      const double units = tiles_m * tiles_n * split;
      const double waves = std::ceil(units / static_cast<double>(kSms));
      const double wave_fill = waves > 1 ? units / (waves * static_cast<double>(kSms)) : 1.0;
      // A block's k-loop runs no faster than its ring refills: each of the stages in flight waits
      // one TMA round trip, which grew with the bytes in flight, 1.6 us with 2 stages to 2.2 us with
      // 5 (H100, 64x64 tiles at m = 64-128, n = 4096-6144, k = 4096: 0.80 down to 0.45 us a
      // k-tile; NOTES, fourteenth session). Where the tiles are few and k is long, this is the
      // bound, and deeper rings win, though less past 8 stages than this prices: 64x4096x4096 ran
      // 0.37 us a k-tile with 8 and 0.34 with 12, where this says 0.35 and 0.30 (NOTES, twentieth
      // session). Its order among the deep rings held, so the formula stays.
      const double stages = static_cast<double>(c.at("stages"));
      const double k_tiles = std::ceil(std::ceil(k / 64.0) / split);
      w.serial_s = waves * k_tiles * (1.2e-6 + 0.2e-6 * stages) / stages;
      // The ring also keeps stages x (bm + bn) x 128 bytes in flight a block, so a grid of fewer
      // blocks than SMs still draws DRAM as far as those bytes cover its latency. Measured: 64
      // blocks of 64x64 tiles with 8 stages (8 MB in flight) read 64x4096x4096's operands at 1.5
      // TB/s, 45% of an H100's peak, on 48% of its SMs, in 0.023 ms where the mma tiles split 4
      // ways took 0.041.
      w.bytes_in_flight = std::min(units, static_cast<double>(kSms)) * stages * (bm + bn) * 128.0;
      // Its partials go out as 16-byte vector reductions, yet each slice cost 40-56 us per million
      // elements of C on an H100 with 8-byte ones (tests/standalone/gemm_wgmma_check --time: 64-512
      // x 4096 x 4096, split 2 against unsplit), about three times what the mma family's scalar
      // adds were priced at, and every split still lost to the unsplit tile with 16-byte ones
      // (64x4096x4096: 64x64 split 2 at 0.73x cuBLAS, unsplit 0.90x; fourteenth session).
      w.atomics *= 3;
      // wgmma reads both operands from shared memory with no register staging: public Hopper
      // kernels reach 70-80% of the dense peak with 128x256 tiles over two consumer warpgroups;
      // a 64-row instruction per consumer with n=64 re-reads A from shared memory for every 64
      // columns, so smaller tiles lose about as the square root of their area, and two stages
      // leave TMA's latency exposed.
      // Pingpong overlaps one consumer's epilogue with the other's k-loop. Since the epilogue
      // stores 16-byte octets it is short, and pingpong ran 0.98-1.08x its cooperative twin (128x128
      // at 4096^3 and 8192^3, both layouts, H100; NOTES, fourteenth session): about 4%, not the
      // doubled tile it was priced as while the epilogue took 17% of the k-loop's time.
      const double area = bm * bn / (128.0 * 256.0);
      // Clusters of two (B multicast) ran at this speed of the same tile without, on an H100 (NOTES,
      // thirteenth session): 1.00-1.14x at 4096^3, 0.89-1.00x at 8192^3 (five tiles, both layouts).
      // The TMA store epilogue has not met a GPU yet (NOTES, nineteenth session), so it is priced
      // a little worse than the register epilogue: surrogate's per-value correction moves it once
      // it is measured, and meanwhile the model's order tries it after the measured epilogue's
      // close rivals instead of pairing every candidate with its twin.
      // - Where tiles are compute-bound: 2% below (the register epilogue measured 5.7% of the
      //   consumers' stalls at 4096^3, the most that moving the stores off them could give).
      // - At the end of a block's walk: 1 us of tail. Its last chunk still has to pass through
      //   shared memory, a barrier and TMA's read before the block may exit, where the register
      //   stores leave at once. This also separates the twins where DRAM, not the tensor cores,
      //   sets the time.
      if (c.at("tma_store") != 0) w.tail_s = 1e-6;
      w.compute_efficiency = 14.8 * 0.78 * std::sqrt(std::min(area, 1.0)) * wave_fill *
                             (c.at("stages") >= 3 ? 1.0 : 0.8) * (c.at("consumers") == 2 ? 1.0 : 0.85) *
                             (c.at("pingpong") != 0 ? 1.04 : 1.0) * (c.at("cluster") > 1 ? 0.98 : 1.0) *
                             (c.at("tma_store") != 0 ? 0.98 : 1.0);
      w.shared_bytes = wgmma_smem_bytes(c);
      w.registers = 168;
      // The producer issues asynchronous copies and the consumers asynchronous wgmmas: one block
      // an SM keeps the tensor cores fed on its own.
      w.latency_warps = 4;
      return w;
    }
    const double warp_area = (bm / static_cast<double>(c.at("warps_m"))) * (bn / static_cast<double>(c.at("warps_n")));
    w.compute_efficiency = 14.8 * 0.65 * std::sqrt(warp_area / (64.0 * 64.0)) * (c.at("stages") >= 3 ? 1.0 : 0.8) *
                           (c.at("bk") == 64 ? 1.0 : 0.9);
    w.shared_bytes = mma_smem_bytes(c);
    w.registers = static_cast<int>(std::min(255.0, warp_area / 32.0 + 64.0));
    // A warp keeps its tile's mma independent of each other: two warps per SM sub-partition hide
    // the ldmatrix and cp.async latency.
    w.latency_warps = 8;
    return w;
  };
  // The inputs are the reference's inputs exactly (it widens the same bf16/fp16 values), so the
  // error is the output's rounding plus fp32 accumulation. The rounding is at most half an ulp:
  // 2^-8 of |C| for bf16 (about 1.7e-3 in relative L2 for random values), 2^-11 for fp16 (2e-4).
  // fp32 accumulation adds about 2^-24 sqrt(k) relative (2e-6 at k = 65536), so the tolerance
  // does not need to grow with k. A dropped or doubled k-tile or split is off by far more.
  d.tolerance = [](const DtypeInfo& t, const Shape&) { return t.name == "bf16" ? 5e-3 : 1e-3; };
  // Per element: the rounding of C (rtol, slightly above 2^-8 for bf16 and 2^-11 for fp16) plus
  // the fp32 accumulation's absolute error, which does not shrink when cancellation brings C near
  // zero: about 2^-24 * k * 0.15 (sgemm's estimate: partial sums of products of magnitude ~0.36
  // grow like sqrt(k)); 4e-6 * k is 60 times that, which leaves room for the tensor cores' own
  // accumulation order and the split-K sums. A wrong element is off by about 0.36 sqrt(k) (23 at
  // k = 4096), and at k = 1 by at least one product, 1/256 (inputs in +-[1/16, 1)), above
  // atol + rtol |C| at every k.
  d.element_bound = [](const DtypeInfo& t, const Shape& s) {
    const double atol = 1e-4 + 4e-6 * static_cast<double>(s.at("k"));
    return ElementBound{atol, t.name == "bf16" ? 4e-3 : 5e-4};
  };
  return d;
}

const BuiltinKernel registered(25, "gemm", gemm_descriptor);

}  // namespace
}  // namespace gmjit::templates
