// The float64 host evaluator, the reference a generated kernel is verified against, and the
// rounding of casts.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "codegen/expr.hpp"
#include "gmjit/error.hpp"

namespace gmjit::codegen::expr {

namespace {

[[noreturn]] void fail(std::string message) { throw Error(ErrorKind::usage, 0, std::move(message)); }

// A binary floating-point format: `precision` significand bits (the implicit one included), the
// exponent of its smallest normal number as frexp counts it (mantissa in [0.5, 1)), its largest
// finite value. IEEE 754 binary16 and binary32; bfloat16 is binary32 with 8 significand bits.
struct Format {
  int precision;
  int min_exponent;
  double max_finite;
};

Format format_of(Dtype dtype) {
  switch (dtype) {
    case Dtype::f16: return {11, -13, 65504.0};
    case Dtype::bf16: return {8, -125, std::ldexp(255.0, 120)};
    default: return {24, -125, static_cast<double>(std::numeric_limits<float>::max())};
  }
}

// Ties to even whatever the floating-point environment's rounding mode, which a caller may have
// changed.
double round_half_even(double y) {
  double r = std::floor(y);
  double diff = y - r;
  if (diff > 0.5 || (diff == 0.5 && std::fmod(r, 2.0) != 0.0)) r += 1.0;
  return r;
}

double apply_unary(Op op, double x) {
  switch (op) {
    case Op::neg: return -x;
    case Op::abs: return std::fabs(x);
    case Op::exp: return std::exp(x);
    case Op::log: return std::log(x);
    case Op::sqrt: return std::sqrt(x);
    case Op::rsqrt: return 1.0 / std::sqrt(x);
    case Op::tanh: return std::tanh(x);
    case Op::sigmoid: return 1.0 / (1.0 + std::exp(-x));
    case Op::silu: return x * (1.0 / (1.0 + std::exp(-x)));
    case Op::relu: return std::fmax(x, 0.0);
    case Op::gelu: {
      const double k = std::sqrt(2.0 / 3.14159265358979323846);
      return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
    }
    case Op::gelu_erf: return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    default: return 0;
  }
}

double apply_binary(Op op, double a, double b) {
  switch (op) {
    case Op::add: return a + b;
    case Op::sub: return a - b;
    case Op::mul: return a * b;
    case Op::div: return a / b;
    case Op::min: return std::fmin(a, b);
    case Op::max: return std::fmax(a, b);
    case Op::lt: return a < b ? 1 : 0;
    case Op::le: return a <= b ? 1 : 0;
    case Op::gt: return a > b ? 1 : 0;
    case Op::ge: return a >= b ? 1 : 0;
    case Op::eq: return a == b ? 1 : 0;
    case Op::ne: return a != b ? 1 : 0;
    default: return 0;
  }
}

}  // namespace

double round_to(double value, Dtype dtype) {
  if (dtype == Dtype::boolean) fail("round_to: bool is not a float dtype");
  if (!std::isfinite(value) || value == 0) return value;
  const Format f = format_of(dtype);
  int exponent = 0;
  std::frexp(value, &exponent);
  // The spacing of the format's values around `value`; below the normal range it stays at the
  // subnormals' spacing.
  const int scale = std::max(exponent, f.min_exponent) - f.precision;
  const double rounded = std::ldexp(round_half_even(std::ldexp(value, -scale)), scale);
  if (std::fabs(rounded) > f.max_finite) return std::copysign(std::numeric_limits<double>::infinity(), value);
  return rounded;
}

std::vector<std::vector<double>> evaluate(const Program& program, const std::vector<std::vector<double>>& inputs,
                                          std::int64_t rows, std::int64_t cols) {
  if (rows < 1 || cols < 1) {
    fail("evaluate: rows and cols must be positive, not " + std::to_string(rows) + " x " + std::to_string(cols));
  }
  if (rows > std::numeric_limits<std::int64_t>::max() / cols ||
      static_cast<std::uint64_t>(rows * cols) > std::numeric_limits<std::size_t>::max() / sizeof(double)) {
    fail("evaluate: " + std::to_string(rows) + " x " + std::to_string(cols) + " elements is too many");
  }
  const auto n_rows = static_cast<std::size_t>(rows);
  const auto n_cols = static_cast<std::size_t>(cols);
  if (inputs.size() != program.inputs().size()) {
    fail("evaluate: the program has " + std::to_string(program.inputs().size()) + " inputs, " +
         std::to_string(inputs.size()) + " were given");
  }
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Input& in = program.inputs()[i];
    const std::size_t expected = in.kind == InputKind::row ? n_cols : n_rows * n_cols;
    if (inputs[i].size() != expected) {
      fail("evaluate: input '" + in.name + "' has " + std::to_string(inputs[i].size()) + " values, expected " +
           (in.kind == InputKind::row ? "cols = " : "rows * cols = ") + std::to_string(expected));
    }
  }

  // One row at a time: each node holds its values for the current row (cols of them, or one for
  // a node constant along the row). Nodes that do not vary along rows are computed once.
  const auto& nodes = program.nodes();
  std::vector<std::vector<double>> values(nodes.size());
  for (std::size_t i = 0; i < nodes.size(); ++i) values[i].resize(varies_along_cols(nodes[i].shape) ? n_cols : 1);

  auto compute = [&](std::size_t id, std::size_t row) {
    const Node& n = nodes[id];
    std::vector<double>& out = values[id];
    auto arg = [&](std::size_t k, std::size_t c) {
      const auto& v = values[static_cast<std::size_t>(n.args[k])];
      return v.size() == 1 ? v[0] : v[c];
    };
    if (is_reduction(n.op)) {
      const auto& v = values[static_cast<std::size_t>(n.args[0])];
      double acc = n.op == Op::row_max ? -std::numeric_limits<double>::infinity()
                   : n.op == Op::row_min ? std::numeric_limits<double>::infinity()
                                         : 0.0;
      bool any = false;
      for (double x : v) {
        if (n.op == Op::row_max) {
          acc = std::fmax(acc, x);
        } else if (n.op == Op::row_min) {
          acc = std::fmin(acc, x);
        } else {
          acc += x;
        }
        any = any || !std::isnan(x);
      }
      // fmax/fmin ignore NaN; a row of NaN alone reduces to NaN.
      if (!any && (n.op == Op::row_max || n.op == Op::row_min)) acc = std::numeric_limits<double>::quiet_NaN();
      if (n.op == Op::row_mean) acc /= static_cast<double>(cols);
      out[0] = acc;
      return;
    }
    for (std::size_t c = 0; c < out.size(); ++c) {
      double r = 0;
      switch (n.op) {
        case Op::input: {
          const auto& in = inputs[static_cast<std::size_t>(n.input)];
          r = n.shape == ShapeClass::row_vector ? in[c] : in[row * n_cols + c];
          break;
        }
        case Op::constant: r = n.value; break;
        case Op::where: r = arg(0, c) != 0 ? arg(1, c) : arg(2, c); break;
        case Op::cast: r = round_to(arg(0, c), n.dtype); break;
        default: r = n.args.size() == 1 ? apply_unary(n.op, arg(0, c)) : apply_binary(n.op, arg(0, c), arg(1, c));
      }
      out[c] = r;
    }
  };

  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (!varies_along_rows(nodes[i].shape)) compute(i, 0);
  }
  std::vector<std::vector<double>> outputs(program.outputs().size(), std::vector<double>(n_rows * n_cols));
  for (std::size_t row = 0; row < n_rows; ++row) {
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      if (varies_along_rows(nodes[i].shape)) compute(i, row);
    }
    for (std::size_t o = 0; o < outputs.size(); ++o) {
      const auto& v = values[static_cast<std::size_t>(program.outputs()[o].node)];
      std::copy(v.begin(), v.end(), outputs[o].begin() + static_cast<std::ptrdiff_t>(row * n_cols));
    }
  }
  return outputs;
}

}  // namespace gmjit::codegen::expr
