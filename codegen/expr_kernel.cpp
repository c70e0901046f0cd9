#include "codegen/expr_kernel.hpp"

#define XXH_INLINE_ALL
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <xxhash.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <memory>

#include "codegen/nvptx.hpp"
#include "gmjit/error.hpp"

namespace gmjit::codegen::expr {
namespace {

// Bumped whenever the lowering changes what a program and its parameters compile to: it is part
// of the virtual header's text, so of every problem key and compile key of expression kernels.
constexpr int kLoweringSchema = 3;

bool is_identifier(const std::string& s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

std::int64_t key(const Shape& shape, const char* name) { return shape.at(name); }

// Inputs of a program that takes log, sqrt or rsqrt of anything are positive in verification:
// random signs would make the reference NaN there, and a NaN reference verifies nothing.
bool needs_positive_inputs(const Program& program) {
  return std::any_of(program.nodes().begin(), program.nodes().end(),
                     [](const Node& n) { return n.op == Op::log || n.op == Op::sqrt || n.op == Op::rsqrt; });
}

// The loosest storage dtype among the outputs: the harness applies one bound to every output.
Dtype widest_error_dtype(const Program& program) {
  Dtype worst = Dtype::f32;
  for (const auto& output : program.outputs()) {
    if (output.dtype == Dtype::bf16) return Dtype::bf16;
    if (output.dtype == Dtype::f16) worst = Dtype::f16;
  }
  return worst;
}

}  // namespace

const std::vector<templates::ParamDomain>& param_domains() {
  static const std::vector<templates::ParamDomain> domains = {
      {"block", {64, 128, 256, 512, 1024}, "threads per block"},
      {"items", {1, 2, 4, 8}, "chunks of `vector` elements each thread handles per loop step"},
      {"vector", {1, 2, 4, 8}, "elements per load and store (must divide cols; 8 for fp16/bf16 storage only)"},
      {"threads_per_row", {32, 64, 128, 256, 512, 1024},
       "programs with reductions: threads sharing one row, 32 (a warp) or the whole block; pointwise programs take 32"},
  };
  return domains;
}

const Config& default_config() {
  static const Config config = {{"block", 256}, {"items", 4}, {"vector", 1}, {"threads_per_row", 32}};
  return config;
}

LowerParams lower_params(const Config& config) {
  LowerParams p;
  p.block = static_cast<int>(config.at("block"));
  p.items = static_cast<int>(config.at("items"));
  p.vector = static_cast<int>(config.at("vector"));
  p.threads_per_row = static_cast<int>(config.at("threads_per_row"));
  return p;
}

std::string lowering_identity() {
  return fmt::format("lowering schema {}, {}", kLoweringSchema, nvptx_identity().key());
}

std::string default_kernel_name(const Program& program) {
  const std::string canonical = to_canonical(program);
  return fmt::format("expr_{:08x}", static_cast<std::uint32_t>(XXH3_64bits(canonical.data(), canonical.size())));
}

templates::KernelDescriptor describe(const std::string& name, const Program& program) {
  if (!is_identifier(name)) {
    throw Error(ErrorKind::usage, 0, fmt::format("expression kernel name '{}' is not an identifier ([A-Za-z_][A-Za-z0-9_]*)", name));
  }
  // Shared by the descriptor's functions, which outlive this call in the catalog.
  const auto shared = std::make_shared<const Program>(program);
  const std::string canonical = to_canonical(program);
  templates::KernelDescriptor d;
  d.name = name;
  d.summary = "generated from the expression " + canonical;
  d.expression = canonical;
  d.header = "gmjit/expr/" + name + ".expr";
  d.header_source = fmt::format("// gmjit expression kernel, {}\n{}\n", lowering_identity(), canonical);
  d.problem_keys = {"rows", "cols"};
  d.dtypes = {to_string(program.outputs().front().dtype)};
  d.params = param_domains();
  d.default_config = default_config();
  d.constraints_doc =
      "threads_per_row is 32 or block for programs with reductions, 32 for pointwise ones; vector divides cols; "
      "vector 8 needs 16-bit storage for every tensor";
  d.violation = [shared](const Config& config, const Shape& shape) -> std::string {
    const LowerParams p = lower_params(config);
    if (!shared->has_reduction() && p.threads_per_row != 32) {
      return "a pointwise program shares no rows: threads_per_row is 32";
    }
    return violation(*shared, p, key(shape, "rows"), key(shape, "cols"));
  };
  d.name_expression = [name](const Config& config, const Shape&, const templates::DtypeInfo&) {
    return fmt::format("{} {{{}}}", name, format_assignments(config));
  };
  d.geometry = [shared](const Config& config, const Shape& shape, const templates::DtypeInfo&) {
    return geometry(*shared, lower_params(config), key(shape, "rows"), key(shape, "cols"));
  };
  std::vector<templates::TensorSpec> specs;
  for (const auto& input : program.inputs()) {
    templates::TensorSpec spec;
    spec.name = input.name;
    spec.dtype = to_string(input.dtype);
    spec.elements = input.kind == InputKind::row ? R"("cols")" : R"(["*", "rows", "cols"])";
    specs.push_back(spec);
  }
  for (const auto& output : program.outputs()) {
    templates::TensorSpec spec;
    spec.name = output.name;
    spec.output = true;
    spec.dtype = to_string(output.dtype);
    spec.elements = R"(["*", "rows", "cols"])";
    specs.push_back(spec);
  }
  templates::describe_tensors(d, std::move(specs));
  d.add_scalars = [](gmjit::detail::KernelArgs& args, const Shape& shape) {
    args.add(static_cast<long long>(key(shape, "rows"))).add(static_cast<long long>(key(shape, "cols")));
  };
  d.host_reference = [shared](const std::vector<std::vector<double>>& inputs, const Shape& shape) {
    return evaluate(*shared, inputs, key(shape, "rows"), key(shape, "cols"));
  };
  // The relative L2 error and the per-element bound follow the outputs' storage (rounding once at
  // the store) plus f32 math; a row sum's error grows with sqrt(cols) terms of magnitude below
  // one, which an output near zero (x - mean(x)) sees as absolute error.
  const Dtype loosest = widest_error_dtype(program);
  const bool reduces = program.has_reduction();
  d.tolerance = [loosest, reduces](const templates::DtypeInfo&, const Shape&) {
    const double storage = loosest == Dtype::bf16 ? 4e-3 : loosest == Dtype::f16 ? 1e-3 : 1e-5;
    return storage + (reduces ? 1e-5 : 0.0);
  };
  d.element_bound = [loosest, reduces](const templates::DtypeInfo&, const Shape& shape) {
    templates::ElementBound b;
    b.atol = 1e-5;
    b.rtol = loosest == Dtype::bf16 ? 1e-2 : loosest == Dtype::f16 ? 1e-3 : 2e-5;
    if (reduces) b.atol += 2e-6 * std::sqrt(static_cast<double>(key(shape, "cols")));
    return b;
  };
  if (needs_positive_inputs(program)) {
    d.input_value = [](const Shape&, std::size_t, std::uint64_t, std::uint64_t bits) {
      return 0.0625 + 0.9375 * static_cast<double>(bits >> 40) * (1.0 / 16777216.0);
    };
  }
  return d;
}

const templates::KernelDescriptor& register_kernel(const std::string& name, const std::string& text,
                                                   Dtype default_dtype) {
  ParseOptions options;
  options.default_dtype = default_dtype;
  const Program program = parse(text, options);
  const std::string chosen = name.empty() ? default_kernel_name(program) : name;
  if (templates::is_user_kernel(chosen) && templates::find_kernel(chosen).expression.empty()) {
    throw Error(ErrorKind::usage, 0,
                fmt::format("expression kernel name '{}' is a kernel registered from a manifest", chosen));
  }
  return templates::register_user_kernel(describe(chosen, program));
}

LoweredKernel lower_canonical(const std::string& canonical, const Config& config, const std::string& arch) {
  return lower(parse(canonical), lower_params(config), arch);
}

}  // namespace gmjit::codegen::expr
