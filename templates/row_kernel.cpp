#include "templates/row_kernel.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "templates/builtin.hpp"

namespace gmjit::templates {
namespace {

std::string shape_violation(const Shape& s) {
  // In-row offsets are 32-bit and run up to a chunk (at most 32K elements) past the row end.
  if (s.at("cols") >= (std::int64_t{1} << 30)) {
    return "cols of 2^30 or more need 64-bit in-row offsets, which this template lacks";
  }
  return product_above("rows x cols", s.at("rows"), s.at("cols"), kMaxElements, kMaxElementsText);
}

std::string violation(const Config& c, const Shape& s) {
  const std::int64_t cols = s.at("cols");
  if (auto why = shape_violation(s); !why.empty()) return why;
  // Rows of odd length start at any element, so vec=1 compiles to single-element accesses
  // there; rejecting the copy keeps vec=1 (the default) valid for every shape without tuning
  // the same kernel twice.
  if (c.at("vec") == 0 && cols % 2 != 0) {
    return fmt::format("vec=0 is what vec=1 compiles to for an odd cols (cols={}): single-element accesses; "
                       "use vec=1",
                       cols);
  }
  const std::int64_t capacity = row_threads(c) * c.at("elems");
  if (c.at("cached") != 0 && cols > capacity) {
    return fmt::format("cached=1 keeps a row in registers: at most {} threads x elems={} = {} elements, but "
                       "cols={}; use cached=0 or more threads or elems",
                       row_threads(c), c.at("elems"), capacity, cols);
  }
  return {};
}

}  // namespace

std::int64_t row_threads(const Config& c) { return c.at("strategy") == 0 ? 32 : c.at("block"); }

std::int64_t access_bytes(const Config& c, const Shape& s, const DtypeInfo& t) {
  if (c.at("vec") == 0) return t.bytes;
  const std::int64_t row_bytes = s.at("cols") * t.bytes;
  for (const std::int64_t bytes : {16, 8, 4}) {
    if (bytes <= c.at("elems") * t.bytes && row_bytes % bytes == 0) return bytes;
  }
  return t.bytes;
}

bool second_read_from_dram(std::int64_t rows, std::int64_t owners, std::int64_t span, const DtypeInfo& t) {
  // About 2048 threads per SM on 132 SMs hold rows at once, against half of a 50 MB L2 (H200)
  // for the inputs.
  const double in_flight = std::min(static_cast<double>(rows), 132.0 * 2048.0 / static_cast<double>(owners));
  return in_flight * static_cast<double>(span) * t.bytes > 25e6;
}

void describe_row_kernel(KernelDescriptor& d, const std::string& function, const std::string& second_pass,
                         const std::string& constraints_prefix) {
  d.problem_keys = {"rows", "cols"};
  d.dtypes = {"fp32", "bf16"};
  d.params = {
      {"strategy", {0, 1}, "0: a warp per row (short rows), 1: a block per row (long rows)"},
      {"block", {128, 256, 512, 1024}, "threads per block"},
      {"elems", {4, 8, 16, 32}, "elements each thread holds per pass over its row"},
      {"vec", {0, 1}, "0: one element per access; 1: the widest access up to 16 bytes that divides the row bytes"},
      {"cached", {0, 1}, "1: the row stays in registers (one read); 0: " + second_pass + ", then a second read"},
  };
  d.default_config = {{"strategy", 1}, {"block", 256}, {"elems", 8}, {"vec", 1}, {"cached", 0}};
  d.constraints_doc = constraints_prefix +
                      "vec=0 only for an even cols (for an odd one it duplicates vec=1); cached=1 needs cols <= row "
                      "threads (32 for strategy=0, block for strategy=1) * elems; cols < 2^30";
  d.violation = violation;
  d.shape_violation = shape_violation;
  d.name_expression = [function](const Config& c, const Shape& s, const DtypeInfo& t) {
    return fmt::format("gmjit::{}<{}, {}, {}, {}, {}, {}>", function, t.cpp_type, row_threads(c), c.at("block"),
                       c.at("elems"), access_bytes(c, s, t), c.at("cached") != 0 ? "true" : "false");
  };
  d.geometry = [](const Config& c, const Shape& s, const DtypeInfo&) {
    return grid_stride_launch(s.at("rows"), c.at("block") / row_threads(c), c.at("block"));
  };
  d.add_scalars = [](detail::KernelArgs& args, const Shape& s) {
    args.add(static_cast<long long>(s.at("rows"))).add(static_cast<int>(s.at("cols")));
  };
  d.reference_geometry = [](const Shape& s) { return reference_launch(s.at("rows")); };
  // fp32: fp32 sums of up to cols / threads terms per thread, then a tree, with softmax's e^x to
  // ~2^-22 relative and the norms' rsqrt to 2 ulp: well under 1e-5 at a million columns for
  // inputs of one sign-mixed magnitude range. bf16: the inputs are exact in both kernel and
  // reference, so the error is the output rounding: half an ulp, at most 2^-8 relative per element
  // (8 significant bits), about 2^-8 / sqrt(3) ~ 2.3e-3 in relative L2 at worst; 1e-2 leaves
  // headroom while a wrong statistic, weight or missing element is off by far more.
  d.tolerance = [](const DtypeInfo& t, const Shape&) { return t.name == "bf16" ? 1e-2 : 1e-5; };
  // Per element, twice the L2 tolerance: an error in a row's statistic scales the whole row alike,
  // which the L2 check bounds by the tolerance, and each element adds a few roundings of its own.
  d.element_bound = [](const DtypeInfo& t, const Shape&) {
    const double bound = t.name == "bf16" ? 2e-2 : 2e-5;
    return ElementBound{bound, bound};
  };
}

}  // namespace gmjit::templates
