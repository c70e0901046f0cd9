#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "templates/builtin.hpp"

namespace gmjit::templates {
namespace {

// The static_asserts of sgemm.cuh. Without warp tiles: the load mappings need at least a warp, and
// each thread holds at most 48 floats of the next k-tile in registers (beyond that ptxas spills).
constexpr const char* kConstraints =
    "wm=0: bm, bn <= 128, tn <= 8, threads = (bm/tm)*(bn/tn) in [32, 1024], (bm+bn)*bk <= 48*threads; "
    "wm>0 (warp tiles): tm=8, tn in {8, 16}, vec=1, bm and bn >= 64 and at most twice each other, "
    "threads = (bm/tm)*(bn/tn) in {128, 256}, warp tile wm x 32*tm*tn/wm dividing the block tile, "
    "bk <= 16 for tn=8";

bool warp_tiled(const Config& c) { return c.at("wm") != 0; }

// The warp tile's columns: a warp's 32 threads hold wm x wn outputs, tm x tn each.
std::int64_t warp_cols(const Config& c) { return 32 * c.at("tm") * c.at("tn") / c.at("wm"); }

std::int64_t warp_smem_bytes(const Config& c) {
  // Two stages of [A^T: bk x (bm + 4)][B: bk x bn] floats (sgemm_detail::warp_smem_bytes).
  return 2 * 4 * c.at("bk") * (c.at("bm") + 4 + c.at("bn"));
}

// Why a warp-tiled configuration is invalid whatever the shape; empty when it is not.
std::string warp_violation(const Config& c) {
  const std::int64_t bm = c.at("bm"), bn = c.at("bn"), bk = c.at("bk"), tm = c.at("tm"), tn = c.at("tn"),
                     wm = c.at("wm");
  if (tm != 8 || (tn != 8 && tn != 16) || c.at("vec") != 1) {
    return fmt::format("wm={} (warp tiles) takes tm=8, tn=8 or 16 and vec=1 (got tm={}, tn={}, vec={})", wm, tm, tn,
                       c.at("vec"));
  }
  const std::int64_t threads = (bm / tm) * (bn / tn);
  if (bm < 64 || bn < 64 || bm > 2 * bn || bn > 2 * bm || (threads != 128 && threads != 256)) {
    return fmt::format("wm={} (warp tiles) takes bm, bn >= 64, at most twice each other, and 128 or 256 threads; "
                       "bm={}, bn={}, tn={} give {} threads", wm, bm, bn, tn, threads);
  }
  const std::int64_t wn = warp_cols(c);
  if (bm % wm != 0 || bn % wn != 0) {
    return fmt::format("warp tile {}x{} (wm x 32*tm*tn/wm) does not divide the {}x{} block tile", wm, wn, bm, bn);
  }
  // Measured with ptxas 13.0 (sm_90a): 64 accumulators held to 128 registers by __launch_bounds__
  // spill 36-48 bytes at bk=32 with uneven tiles; every other warp-tiled configuration fits
  // (122-128 registers for 64 accumulators, 223-255 for 128) without local memory.
  if (tm * tn == 64 && bk > 16) {
    return fmt::format("warp tiles of 8 x 8 threads take bk <= 16 (bk={} spills under 128 registers)", bk);
  }
  return {};
}

bool even_tiles(const Config& c, const Shape& s) {
  return s.at("m") % c.at("bm") == 0 && s.at("n") % c.at("bn") == 0 && s.at("k") % c.at("bk") == 0;
}


KernelDescriptor sgemm_descriptor() {
  KernelDescriptor d;
  d.name = "sgemm";
  d.summary = "fp32 C = A * B, row-major, shared-memory tiles with per-thread register blocking";
  d.header = "gmjit/sgemm.cuh";
  d.problem_keys = {"m", "n", "k"};
  d.dtypes = {"fp32"};
  d.params = {
      {"bm", {32, 64, 128, 256}, "rows of C per block (256 with wm > 0 only)"},
      {"bn", {32, 64, 128, 256}, "columns of C per block (256 with wm > 0 only)"},
      {"bk", {8, 16, 32}, "depth of one shared-memory tile"},
      {"tm", {4, 8}, "rows of C per thread"},
      {"tn", {4, 8, 16}, "columns of C per thread (16 with wm > 0 only)"},
      {"vec", {0, 1}, "16-byte global loads and stores (needs k and n multiples of 4)"},
      {"wm", {0, 32, 64},
       "rows of C per warp: 0 = no warp tiles (one register tile per thread); 32 or 64 = warp tiles of "
       "wm x 32*tm*tn/wm, register-double-buffered fragments, dynamic shared memory"},
  };
  d.default_config = {{"bm", 64}, {"bn", 64}, {"bk", 8}, {"tm", 4}, {"tn", 4}, {"vec", 0}, {"wm", 0}};
  // Each variant over its own domains (wm=0: bm, bn <= 128 and tn <= 8; warp tiles: bm, bn >= 64,
  // tm=8, tn >= 8, vec=1): 324 configurations, against 1728 in the cross product, most of which
  // violation rejects at every shape and a sweep would record as invalid trials.
  d.configurations = [params = d.params] {
    auto variant = [&](bool warp) {
      std::vector<ParamDomain> domains;
      for (ParamDomain p : params) {
        std::vector<std::int64_t> kept;
        for (const auto v : p.values) {
          const bool keep = p.name == "wm"                       ? (v != 0) == warp
                            : p.name == "bm" || p.name == "bn"  ? (warp ? v >= 64 : v <= 128)
                            : p.name == "tm"                     ? !warp || v == 8
                            : p.name == "tn"                     ? (warp ? v >= 8 : v <= 8)
                            : p.name == "vec"                    ? !warp || v == 1
                                                                 : true;
          if (keep) kept.push_back(v);
        }
        p.values = std::move(kept);
        domains.push_back(std::move(p));
      }
      return cross_product(domains);
    };
    auto all = variant(false);
    const auto warp = variant(true);
    all.insert(all.end(), warp.begin(), warp.end());
    return all;
  };
  d.constraints_doc = kConstraints;
  d.shape_violation = int_gemm_violation;
  d.violation = [](const Config& c, const Shape& s) -> std::string {
    const std::int64_t bm = c.at("bm"), bn = c.at("bn"), bk = c.at("bk"), tm = c.at("tm"), tn = c.at("tn"),
                       vec = c.at("vec");
    if (warp_tiled(c)) {
      if (auto why = warp_violation(c); !why.empty()) return why;
    } else {
      if (bm > 128 || bn > 128 || tn > 8) {
        return fmt::format("bm={}, bn={}, tn={}: bm, bn = 256 and tn = 16 need warp tiles (wm > 0)", bm, bn, tn);
      }
      const std::int64_t threads = (bm / tm) * (bn / tn);
      if (threads < 32 || threads > 1024 || (bm + bn) * bk > 48 * threads) {
        return fmt::format("tile shape invalid: {}", kConstraints);
      }
    }
    if (vec != 0 && (s.at("k") % 4 != 0 || s.at("n") % 4 != 0)) {
      return "vec=1 needs k and n to be multiples of 4";
    }
    if (auto why = int_gemm_violation(s); !why.empty()) return why;
    // Block rows go in the grid's y dimension, which holds 65535.
    if (ceil_div(s.at("m"), bm) > 65535) {
      return fmt::format("m={} needs {} block rows of bm={}, more than the grid's 65535", s.at("m"),
                         ceil_div(s.at("m"), bm), bm);
    }
    return {};
  };
  d.name_expression = [](const Config& c, const Shape& s, const DtypeInfo&) {
    if (warp_tiled(c)) {
      return fmt::format("gmjit::sgemm_warp<{}, {}, {}, {}, {}, {}, {}>", c.at("bm"), c.at("bn"), c.at("bk"),
                         c.at("wm"), c.at("tm"), c.at("tn"), even_tiles(c, s) ? "true" : "false");
    }
    return fmt::format("gmjit::sgemm<{}, {}, {}, {}, {}, {}, {}>", c.at("bm"), c.at("bn"), c.at("bk"), c.at("tm"),
                       c.at("tn"), c.at("vec") != 0 ? "true" : "false", even_tiles(c, s) ? "true" : "false");
  };
  d.geometry = [](const Config& c, const Shape& s, const DtypeInfo&) {
    LaunchGeometry g;
    g.grid[0] = static_cast<unsigned>(ceil_div(s.at("n"), c.at("bn")));
    g.grid[1] = static_cast<unsigned>(ceil_div(s.at("m"), c.at("bm")));
    g.block[0] = static_cast<unsigned>((c.at("bm") / c.at("tm")) * (c.at("bn") / c.at("tn")));
    if (warp_tiled(c)) g.dynamic_shared_bytes = static_cast<unsigned>(warp_smem_bytes(c));
    return g;
  };
  describe_tensors(d, {{"A", false, {}, R"(["*", "m", "k"])"},
                       {"B", false, {}, R"(["*", "k", "n"])"},
                       {"C", true, {}, R"(["*", "m", "n"])"}});
  d.add_scalars = [](detail::KernelArgs& args, const Shape& s) {
    args.add(static_cast<int>(s.at("m"))).add(static_cast<int>(s.at("n"))).add(static_cast<int>(s.at("k")));
  };
  d.reference_expression = [](const DtypeInfo&, const Shape&) { return std::string("gmjit::reference::sgemm"); };
  d.reference_geometry = [](const Shape& s) {
    LaunchGeometry g;
    g.grid[0] = static_cast<unsigned>(ceil_div(s.at("n"), 16));
    g.grid[1] = static_cast<unsigned>(ceil_div(s.at("m"), 16));
    g.block[0] = 16;
    g.block[1] = 16;
    return g;
  };
  d.work = [](const Config& c, const Shape& s, const DtypeInfo&) {
    const double m = static_cast<double>(s.at("m")), n = static_cast<double>(s.at("n")), k = static_cast<double>(s.at("k"));
    const double bm = static_cast<double>(c.at("bm")), bn = static_cast<double>(c.at("bn"));
    const double tm = static_cast<double>(c.at("tm")), tn = static_cast<double>(c.at("tn"));
    Work w;
    // Every block streams its row panel of A and column panel of B; C is written once.
    w.bytes = 4.0 * (std::ceil(n / bn) * m * k + std::ceil(m / bm) * k * n + m * n);
    w.flops = 2.0 * m * n * k;
    // Per k step a thread reads tm + tn floats from shared memory for tm * tn FMAs; under about
    // 4 FMAs per shared load the loop is bound by shared-memory bandwidth, not the FMA pipes.
    w.compute_efficiency = std::min(1.0, (tm * tn / (tm + tn)) / 4.0) * (c.at("vec") != 0 ? 1.0 : 0.9);
    w.shared_bytes = 4 * (c.at("bm") + 4 + c.at("bn")) * c.at("bk") * 2;
    w.registers = static_cast<int>(tm * tn + tm + tn + 40);
    if (warp_tiled(c)) {
      // __launch_bounds__ holds 64 accumulators to 128 registers; 128 accumulators took 223-255
      // with ptxas 13.0.
      w.registers = tm * tn <= 64 ? 128 : 240;
    }
    return w;
  };
  // fp32 accumulation over k terms drifts like sqrt(k) ulps in relative L2 terms; a skipped or
  // doubled tile is off by far more than this.
  d.tolerance = [](const DtypeInfo&, const Shape& s) {
    return std::max(1e-5, 1e-6 * std::sqrt(static_cast<double>(s.at("k"))));
  };
  // An element of C is a sum of k products of magnitude ~0.36 (inputs in +-[1/16, 1)); its fp32
  // accumulation errs by about 2^-24 * k * 0.15 in absolute terms (a random walk of roundings of
  // partial sums that grow like sqrt(k)), whatever the element's own value, which cancellation can
  // bring near zero: 3.5e-5 at k = 4096, under 2e-4 for the largest of 16M elements. 1e-6 * k is
  // five times that, and a wrong element is off by about 0.36 sqrt(k) (23 at k = 4096).
  d.element_bound = [](const DtypeInfo&, const Shape& s) {
    return ElementBound{std::max(1e-5, 1e-6 * static_cast<double>(s.at("k"))), 1e-5};
  };
  return d;
}

const BuiltinKernel registered(20, "sgemm", sgemm_descriptor);

}  // namespace
}  // namespace gmjit::templates
