// libFuzzer target for the expression front end (codegen/expr.hpp): any text either parses or
// fails with a usage error that names its column; a program that parses prints a canonical form
// that parses back to the same canonical form and the same values on a 2 x 3 problem.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "codegen/expr.hpp"
#include "gmjit/error.hpp"

namespace expr = gmjit::codegen::expr;

namespace {

[[noreturn]] void die(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz_expr: %s\n%s\n", what, detail.c_str());
  std::abort();
}

bool same(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b;
}

std::vector<std::vector<double>> evaluate_small(const expr::Program& p) {
  // Values with signs, a zero, fractions and one large enough to overflow fp16 after a product.
  static const double values[] = {-1.5, 0.0, 2.25, 300.0, -0.125, 1e-3};
  std::vector<std::vector<double>> inputs;
  for (std::size_t i = 0; i < p.inputs().size(); ++i) {
    const std::size_t n = p.inputs()[i].kind == expr::InputKind::row ? 3 : 6;
    std::vector<double> v(n);
    for (std::size_t k = 0; k < n; ++k) v[k] = values[(k + i) % 6];
    inputs.push_back(std::move(v));
  }
  return expr::evaluate(p, inputs, 2, 3);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0 || size > 8192) return 0;
  // The first byte picks the default dtype, so the type rules meet every dtype.
  expr::ParseOptions options;
  options.default_dtype = static_cast<expr::Dtype>(data[0] % 3);
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);

  expr::Program program;
  try {
    program = expr::parse(text, options);
  } catch (const gmjit::Error& e) {
    if (e.kind() != gmjit::ErrorKind::usage) die("a parse error of another kind than usage", e.what());
    const std::string& m = e.message();
    if (m.rfind("column ", 0) != 0 && m.rfind("line ", 0) != 0) die("a parse error without its column", m);
    return 0;
  }

  const std::string canonical = expr::to_canonical(program);
  expr::Program again;
  try {
    again = expr::parse(canonical);
  } catch (const gmjit::Error& e) {
    die("the canonical form does not parse", canonical + "\n" + e.what());
  }
  const std::string canonical_again = expr::to_canonical(again);
  if (canonical_again != canonical) die("the canonical form is not stable", canonical + "\n" + canonical_again);
  if (again.nodes().size() != program.nodes().size()) die("the canonical form has another graph", canonical);

  std::vector<std::vector<double>> first;
  std::vector<std::vector<double>> second;
  try {
    first = evaluate_small(program);
    second = evaluate_small(again);
  } catch (const gmjit::Error& e) {
    die("evaluate failed on a valid program", canonical + "\n" + e.what());
  }
  for (std::size_t o = 0; o < first.size(); ++o) {
    for (std::size_t k = 0; k < first[o].size(); ++k) {
      if (!same(first[o][k], second[o][k])) die("the canonical form computes other values", canonical);
    }
  }
  return 0;
}
