#include <fmt/format.h>

#include "templates/row_kernel.hpp"

namespace gmjit::templates {
namespace {

// One block's registers hold rows up to 1024 x 32 elements; slices of rows shorter than this would
// only add candidates that lose to a block per row.
constexpr std::int64_t kSplitMinCols = 16384;
// The arrival counts grow by 32 a launch (see softmax_slice), so no row has more slices.
constexpr std::int64_t kMaxSplit = 32;
// A streamed slice is read twice, the second time from L2 if the slices in flight fit there:
// 1/16 of a row or less (4096 x 393216 fp32: 132 SMs x 2048 threads in blocks of 1024 hold 264
// slices, 25 MB at split=16, 13 MB at split=32; in blocks of 256, four times that, against a
// 60 MB L2). Few elements per thread are its point: the registers then allow 2048 threads per SM,
// so some blocks load while others wait for their row. On the H200 at 4096 x 393216 fp32 the
// best of them took 4.10 ms against 3.74 ms for cached slices: the second pass costs more than
// the occupancy gains there.
constexpr std::int64_t kStreamedMinSplit = 16;
constexpr std::int64_t kStreamedMaxElems = 8;

bool split_rows(const Config& c) { return c.at("strategy") == 2; }

// At least the elements of a slice: cols / split rounded up to whole accesses of up to 8
// elements (16 bytes of bf16), which is what softmax_slice rounds to or more.
std::int64_t slice_bound(const Config& c, const Shape& s) {
  return ceil_div(ceil_div(s.at("cols"), c.at("split")), 8) * 8;
}

std::int64_t split_workspace_words(const Shape& s) {
  if (s.at("cols") < kSplitMinCols) return 2;  // the non-split kernels never touch it
  // A ticket counter and a pad word, an arrival count per row (padded to an even count), then
  // kMaxSplit (max, sum) pairs per row.
  return 2 + ceil_div(s.at("rows"), 2) * 2 + 2 * kMaxSplit * s.at("rows");
}

KernelDescriptor softmax_descriptor() {
  KernelDescriptor d;
  d.name = "softmax";
  d.summary = "y = softmax(x) along the last dim of a row-major rows x cols matrix, fp32 math; "
              "a warp or a block per row, row held in registers or streamed twice, or a long row split over "
              "blocks that merge their (max, sum) through a workspace the library owns";
  d.header = "gmjit/softmax.cuh";
  describe_row_kernel(d, "softmax", "online max/sum");
  for (auto& param : d.params) {
    if (param.name != "strategy") continue;
    param.values.push_back(2);
    param.doc += ", 2: a row split over `split` blocks, each holding its slice in registers (cached=1) or "
                 "streaming it twice, the second read from L2 (cached=0); rows too long for one block";
  }
  d.params.push_back({"split", {1, 4, 8, 16, 32}, "blocks per row with strategy=2; 1 otherwise"});
  d.default_config["split"] = 1;
  d.constraints_doc += fmt::format(
      "; strategy=2: split > 1, cols >= {}; with cached=1 a slice of cols / split elements fits block * elems but "
      "not half of it (a smaller block or elems holds it); with cached=0 split >= {}, elems <= {}, vec=1 and "
      "block * elems <= the slice; split=1 otherwise",
      kSplitMinCols, kStreamedMinSplit, kStreamedMaxElems);
  d.violation = [row_violation = d.violation](const Config& c, const Shape& s) -> std::string {
    if (!split_rows(c)) {
      if (c.at("split") != 1) return fmt::format("split={} applies to strategy=2 only; use split=1", c.at("split"));
      return row_violation(c, s);
    }
    if (c.at("split") == 1) return "strategy=2 splits each row over blocks: split must be above 1";
    if (s.at("cols") < kSplitMinCols) {
      return fmt::format("strategy=2 is for rows of {} or more elements, which one block cannot hold; cols={}",
                         kSplitMinCols, s.at("cols"));
    }
    if (s.at("rows") * c.at("split") > 2147483647) {
      return fmt::format("rows={} x split={} blocks exceed a grid's 2^31 - 1", s.at("rows"), c.at("split"));
    }
    const std::int64_t capacity = c.at("block") * c.at("elems");
    const std::int64_t slice = slice_bound(c, s);
    if (c.at("cached") == 0) {
      if (c.at("split") < kStreamedMinSplit) {
        return fmt::format("a streamed slice is reread from L2, so the rows in flight must fit there: split={} "
                           "leaves slices of {} elements; use split >= {} or cached=1",
                           c.at("split"), slice, kStreamedMinSplit);
      }
      if (c.at("elems") > kStreamedMaxElems || c.at("vec") != 1) {
        return fmt::format("a streamed slice is for few registers and wide accesses: elems <= {} and vec=1 (got "
                           "elems={}, vec={}); cached=1 holds larger slices",
                           kStreamedMaxElems, c.at("elems"), c.at("vec"));
      }
      if (capacity > slice) {
        return fmt::format("block={} x elems={} = {} elements is more than a slice of cols={} / split={} (about {}): "
                           "threads would idle; use a smaller block or elems",
                           c.at("block"), c.at("elems"), capacity, s.at("cols"), c.at("split"), slice);
      }
    } else if (slice > capacity || 2 * slice <= capacity) {
      return fmt::format("a slice of cols={} / split={} is up to {} elements, against block={} x elems={} = {}: it "
                         "must fit, and need more than half",
                         s.at("cols"), c.at("split"), slice, c.at("block"), c.at("elems"), capacity);
    }
    // The access-width and row-length rules are those of a streamed block per row.
    Config streamed = c;
    streamed["strategy"] = 1;
    streamed["cached"] = 0;
    return row_violation(streamed, s);
  };
  d.name_expression = [row_name = d.name_expression](const Config& c, const Shape& s, const DtypeInfo& t) {
    if (!split_rows(c)) return row_name(c, s, t);
    return fmt::format("gmjit::softmax_split<{}, {}, {}, {}, {}, {}>", t.cpp_type, c.at("block"), c.at("elems"),
                       access_bytes(c, s, t), c.at("split"), c.at("cached") != 0 ? "true" : "false");
  };
  d.geometry = [row_geometry = d.geometry](const Config& c, const Shape& s, const DtypeInfo& t) {
    if (!split_rows(c)) return row_geometry(c, s, t);
    LaunchGeometry g;
    g.grid[0] = static_cast<unsigned>(s.at("rows") * c.at("split"));
    g.block[0] = static_cast<unsigned>(c.at("block"));
    return g;
  };
  describe_tensors(d, {{"x", false, {}, R"(["*", "rows", "cols"])"}, {"y", true, {}, R"(["*", "rows", "cols"])"}});
  d.workspace = [](const Shape& s) {
    // The pairs follow one arrival count per row, so the layout changes with rows.
    const bool split = s.at("cols") >= kSplitMinCols;
    return WorkspaceNeed{4 * split_workspace_words(s), split ? s.at("rows") : 0};
  };
  d.reference_expression = [](const DtypeInfo& t, const Shape&) { return fmt::format("gmjit::reference::softmax<{}>", t.cpp_type); };
  // Outputs average 1 / cols: an absolute bound of order one would accept any value of a long row.
  d.element_bound = [row_bound = d.element_bound](const DtypeInfo& t, const Shape& s) {
    ElementBound bound = row_bound(t, s);
    bound.atol /= static_cast<double>(s.at("cols"));
    return bound;
  };
  d.work = [](const Config& c, const Shape& s, const DtypeInfo& t) {
    const double n = static_cast<double>(s.at("rows")) * static_cast<double>(s.at("cols"));
    const bool cached = c.at("cached") != 0;
    Work w;
    // Read once, written once. The second read of cached=0 comes from L2 while the rows (or
    // slices) in flight fit there; longer rows (4096 x 393216 fp32: 264 rows of 1.5 MB at a time)
    // come from DRAM twice.
    w.bytes = 2.0 * n * t.bytes;
    const std::int64_t owners = split_rows(c) ? c.at("block") : row_threads(c);
    const std::int64_t span = split_rows(c) ? slice_bound(c, s) : s.at("cols");
    if (!cached && second_read_from_dram(s.at("rows") * c.at("split"), owners, span, t)) w.bytes += n * t.bytes;
    // Per element, cached: max, subtract, scale, exponent, add, multiply; streamed: one more
    // subtract, scale and exponent in the second pass.
    w.flops = (cached ? 6.0 : 9.0) * n;
    // An exponent is one MUFU.EX2, 16 per SM per clock against 128 FMA lanes (CUDA C Programming
    // Guide, arithmetic instructions, cc 9.0): it costs 8 lane slots and the other operations one
    // each, where peak counts 2 flops per slot.
    const double slots = cached ? 5.0 + 8.0 : 7.0 + 16.0;
    w.compute_efficiency = (cached ? 6.0 : 9.0) / (2.0 * slots);
    w.shared_bytes = c.at("strategy") == 0 ? 0 : 2 * (c.at("block") / 32) * 8;
    // The row's slice as floats plus about 30 for addresses, the partial pair and loop state
    // (ptxas 13.0 gives 32 to 64 across elems = 4..32).
    w.registers = static_cast<int>(c.at("elems") + 30);
    return w;
  };
  return d;
}

const BuiltinKernel registered(50, "softmax", softmax_descriptor);

}  // namespace
}  // namespace gmjit::templates
