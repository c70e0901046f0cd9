#include <fmt/format.h>

#include "templates/builtin.hpp"

namespace gmjit::templates {
namespace {

constexpr const char* kConstraints = "tile * (tile / rows_per_thread) <= 1024 threads; fewer than 2^31 tiles";

std::int64_t tile_count(const Config& c, const Shape& s) {
  return ceil_div(s.at("rows"), c.at("tile")) * ceil_div(s.at("cols"), c.at("tile"));
}

KernelDescriptor transpose_descriptor() {
  KernelDescriptor d;
  d.name = "transpose";
  d.summary = "fp32 out (cols x rows) = in (rows x cols)^T through padded shared-memory tiles, coalesced both ways";
  d.header = "gmjit/transpose.cuh";
  d.problem_keys = {"rows", "cols"};
  d.dtypes = {"fp32"};
  d.params = {
      {"tile", {32, 64}, "square tile edge; its shared-memory copy has one column of padding"},
      {"rows_per_thread", {1, 2, 4, 8, 16},
       "tile rows each thread moves each way; the block is tile x (tile / rows_per_thread) threads"},
  };
  d.default_config = {{"tile", 32}, {"rows_per_thread", 4}};
  d.constraints_doc = kConstraints;
  d.shape_violation = [](const Shape& s) {
    if (auto why = product_above("rows x cols", s.at("rows"), s.at("cols"), kMaxElements, kMaxElementsText);
        !why.empty()) {
      return why;
    }
    // A block per tile in a 1-D grid: even the largest tile must leave fewer than 2^31 of them.
    return product_above("64 x 64 tiles", ceil_div(s.at("rows"), 64), ceil_div(s.at("cols"), 64), 2147483647,
                         "2^31 - 1");
  };
  d.violation = [](const Config& c, const Shape& s) -> std::string {
    const std::int64_t tile = c.at("tile"), rpt = c.at("rows_per_thread");
    if (tile * (tile / rpt) > 1024) {
      return fmt::format("a {} x {} block has {} threads, more than 1024", tile, tile / rpt, tile * (tile / rpt));
    }
    if (tile_count(c, s) > 2147483647) return "2^31 tiles or more do not fit the 1-D grid";
    return {};
  };
  d.name_expression = [](const Config& c, const Shape&, const DtypeInfo&) {
    return fmt::format("gmjit::transpose<{}, {}>", c.at("tile"), c.at("rows_per_thread"));
  };
  d.geometry = [](const Config& c, const Shape& s, const DtypeInfo&) {
    LaunchGeometry g;
    g.grid[0] = static_cast<unsigned>(tile_count(c, s));
    g.block[0] = static_cast<unsigned>(c.at("tile"));
    g.block[1] = static_cast<unsigned>(c.at("tile") / c.at("rows_per_thread"));
    return g;
  };
  describe_tensors(d, {{"in", false, {}, R"(["*", "rows", "cols"])"}, {"out", true, {}, R"(["*", "rows", "cols"])"}});
  d.add_scalars = long_sizes({"rows", "cols"});
  d.reference_expression = [](const DtypeInfo&, const Shape&) { return std::string("gmjit::reference::transpose"); };
  d.reference_geometry = [](const Shape& s) { return reference_launch(ceil_div(s.at("rows") * s.at("cols"), 256)); };
  d.work = [](const Config& c, const Shape& s, const DtypeInfo& t) {
    Work w;
    w.bytes = 2.0 * static_cast<double>(s.at("rows") * s.at("cols")) * t.bytes;
    w.shared_bytes = c.at("tile") * (c.at("tile") + 1) * 4;
    w.registers = static_cast<int>(24 + c.at("rows_per_thread"));
    return w;
  };
  // A copy: every element must come back bit for bit.
  d.tolerance = fixed_tolerance(0.0);
  return d;
}

const BuiltinKernel registered(40, "transpose", transpose_descriptor);

}  // namespace
}  // namespace gmjit::templates
