#include <fmt/format.h>

#include <algorithm>

#include "templates/builtin.hpp"

namespace gmjit::templates {
namespace {

KernelDescriptor vector_add_descriptor() {
  KernelDescriptor d;
  d.name = "vector_add";
  d.summary = "c = a + b, elementwise; 16-byte vector accesses when aligned, scalar tail";
  d.header = "gmjit/vector_add.cuh";
  d.problem_keys = {"n"};
  d.dtypes = {"fp32", "fp16"};
  d.params = {
      {"block", {128, 256, 512, 1024}, "threads per block"},
      {"items", {1, 2, 4, 8}, "vectors each thread loads before it adds (memory-level parallelism)"},
      {"vec_bytes", {4, 8, 16}, "bytes per vector access"},
  };
  d.default_config = {{"block", 256}, {"items", 4}, {"vec_bytes", 16}};
  d.constraints_doc = kNoConstraints;
  d.violation = no_violation;
  d.shape_violation = [](const Shape& s) { return product_above("n", s.at("n"), 1, kMaxElements, kMaxElementsText); };
  d.name_expression = [](const Config& c, const Shape&, const DtypeInfo& t) {
    return fmt::format("gmjit::vector_add<{}, {}, {}, {}>", t.cpp_type, c.at("block"), c.at("items"),
                       c.at("vec_bytes"));
  };
  d.geometry = [](const Config& c, const Shape& s, const DtypeInfo& t) {
    const std::int64_t per_block = c.at("block") * c.at("items") * std::max<std::int64_t>(1, c.at("vec_bytes") / t.bytes);
    return grid_stride_launch(s.at("n"), per_block, c.at("block"));
  };
  describe_tensors(d, {{"a", false, {}, R"("n")"}, {"b", false, {}, R"("n")"}, {"c", true, {}, R"("n")"}});
  d.add_scalars = long_sizes({"n"});
  d.reference_expression = [](const DtypeInfo& t, const Shape&) { return fmt::format("gmjit::reference::vector_add<{}>", t.cpp_type); };
  d.reference_geometry = [](const Shape& s) { return reference_launch(ceil_div(s.at("n"), 256)); };
  // One rounding of the sum: half an ulp relative, with headroom.
  d.work = [](const Config& c, const Shape& s, const DtypeInfo& t) {
    Work w;
    w.bytes = 3.0 * static_cast<double>(s.at("n")) * t.bytes;
    w.flops = static_cast<double>(s.at("n"));
    // Each thread keeps `items` vectors of both inputs in flight.
    w.registers = static_cast<int>(16 + 2 * c.at("items") * std::max<std::int64_t>(1, c.at("vec_bytes") / 4));
    return w;
  };
  d.tolerance = [](const DtypeInfo& t, const Shape&) { return t.name == "fp16" ? 1e-3 : 1e-6; };
  return d;
}

const BuiltinKernel registered(10, "vector_add", vector_add_descriptor);

}  // namespace
}  // namespace gmjit::templates
