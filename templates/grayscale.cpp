#include <fmt/format.h>

#include "templates/builtin.hpp"

namespace gmjit::templates {
namespace {

constexpr const char* kConstraints =
    "staged=1 needs pixels >= 4; tiles > 1 only when the image has more than one block's tile";

std::int64_t pixel_count(const Shape& s) { return s.at("h") * s.at("w"); }

std::int64_t tile_pixels(const Config& c) { return c.at("block") * c.at("pixels"); }

KernelDescriptor grayscale_descriptor() {
  KernelDescriptor d;
  d.name = "grayscale";
  d.summary = "out = 0.2989 R + 0.5870 G + 0.1140 B over interleaved RGB; float4 pixel quads when aligned, scalar tail";
  d.header = "gmjit/grayscale.cuh";
  d.problem_keys = {"h", "w"};
  d.dtypes = {"fp32"};
  d.params = {
      {"block", {128, 256, 512, 1024}, "threads per block"},
      {"pixels", {1, 4, 8, 16},
       "pixels per thread per tile: 1 moves single floats, multiples of 4 move quads as three float4 loads "
       "and one float4 store, all loads in flight before the first store"},
      {"tiles", {1, 4, 16},
       "tiles of block*pixels pixels per block: 1 is one tile per block, more shrink the grid and make "
       "blocks loop grid-stride"},
      {"staged", {0, 1},
       "1 loads each warp's pixels with contiguous float4 and regroups them into quads through shared "
       "memory (1.5 KiB per warp); 0 loads each quad directly"},
  };
  d.default_config = {{"block", 256}, {"pixels", 4}, {"tiles", 1}, {"staged", 0}};
  d.constraints_doc = kConstraints;
  // The RGB input holds three floats a pixel.
  d.shape_violation = [](const Shape& s) {
    return product_above("h x w", s.at("h"), s.at("w"), kMaxElements / 3, "2^48 / 3");
  };
  d.violation = [](const Config& c, const Shape& s) -> std::string {
    if (c.at("staged") != 0 && c.at("pixels") < 4) return "staged=1 needs pixels >= 4 (it regroups float4 quads)";
    // A grid of one block cannot shrink; its copies would only repeat the tiles=1 measurement.
    if (c.at("tiles") > 1 && pixel_count(s) <= tile_pixels(c)) {
      return fmt::format("tiles={} on {} pixels, which one block's tile of {} already covers", c.at("tiles"),
                         pixel_count(s), tile_pixels(c));
    }
    return {};
  };
  d.name_expression = [](const Config& c, const Shape&, const DtypeInfo&) {
    return fmt::format("gmjit::grayscale<{}, {}, {}>", c.at("block"), c.at("pixels"),
                       c.at("staged") != 0 ? "true" : "false");
  };
  d.geometry = [](const Config& c, const Shape& s, const DtypeInfo&) {
    return grid_stride_launch(ceil_div(pixel_count(s), tile_pixels(c)), c.at("tiles"), c.at("block"));
  };
  describe_tensors(d, {{"rgb", false, {}, R"(["*", 3, "h", "w"])"}, {"out", true, {}, R"(["*", "h", "w"])"}});
  d.add_scalars = [](detail::KernelArgs& args, const Shape& s) { args.add(static_cast<long long>(pixel_count(s))); };
  d.reference_expression = [](const DtypeInfo&, const Shape&) { return std::string("gmjit::reference::grayscale"); };
  d.reference_geometry = [](const Shape& s) { return reference_launch(ceil_div(pixel_count(s), 256)); };
  d.work = [](const Config& c, const Shape& s, const DtypeInfo&) {
    Work w;
    // 12 bytes of RGB in, 4 bytes out per pixel; 3 multiplies and 2 adds.
    w.bytes = 16.0 * static_cast<double>(pixel_count(s));
    w.flops = 5.0 * static_cast<double>(pixel_count(s));
    w.shared_bytes = c.at("staged") != 0 ? c.at("block") / 32 * 96 * 16 : 0;
    // Every quad keeps 12 floats of input in flight.
    w.registers = static_cast<int>(20 + 3 * c.at("pixels"));
    return w;
  };
  // Rounding the coefficients to float and two fused steps cost a few ulps; a wrong channel
  // order or a skipped quad is off by tens of percent.
  d.tolerance = fixed_tolerance(1e-6);
  return d;
}

const BuiltinKernel registered(30, "grayscale", grayscale_descriptor);

}  // namespace
}  // namespace gmjit::templates
