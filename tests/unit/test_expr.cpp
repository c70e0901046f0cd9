#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "codegen/expr.hpp"
#include "gmjit/error.hpp"

namespace gmjit::codegen::expr {
namespace {

const char* const kSoftmax = "y = exp(x - max(x)) / sum(exp(x - max(x)))";
const char* const kRmsnorm = "x: bf16; w: bf16[cols]; y = x * rsqrt(mean(x * x) + 1e-6) * w";
const char* const kLayernorm =
    "w: fp32[cols]; b: fp32[cols]\n"
    "y = (x - mean(x)) * rsqrt(mean((x - mean(x)) * (x - mean(x))) + 1e-5) * w + b";

// The canonical text of the one output's expression.
std::string expr_of(const std::string& text, const ParseOptions& options = {}) {
  const std::string canonical = to_canonical(parse(text, options));
  return canonical.substr(canonical.rfind(" = ") + 3);
}

std::string error_of(const std::string& text) {
  try {
    parse(text);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::usage);
    return e.message();
  }
  ADD_FAILURE() << "no error for: " << text;
  return {};
}

int count_op(const Program& p, Op op) {
  int n = 0;
  for (const Node& node : p.nodes()) n += node.op == op;
  return n;
}

const Node& root(const Program& p, std::size_t output = 0) { return p.node(p.outputs().at(output).node); }

TEST(ExprParse, EachOperatorAndFunction) {
  struct Case {
    const char* text;
    Op op;
    const char* canonical;
  };
  const Case cases[] = {
      {"y = a + b", Op::add, "(a + b)"},
      {"y = a - b", Op::sub, "(a - b)"},
      {"y = a * b", Op::mul, "(a * b)"},
      {"y = a / b", Op::div, "(a / b)"},
      {"y = -a", Op::neg, "(-a)"},
      {"y = abs(a)", Op::abs, "abs(a)"},
      {"y = exp(a)", Op::exp, "exp(a)"},
      {"y = log(a)", Op::log, "log(a)"},
      {"y = sqrt(a)", Op::sqrt, "sqrt(a)"},
      {"y = rsqrt(a)", Op::rsqrt, "rsqrt(a)"},
      {"y = tanh(a)", Op::tanh, "tanh(a)"},
      {"y = sigmoid(a)", Op::sigmoid, "sigmoid(a)"},
      {"y = silu(a)", Op::silu, "silu(a)"},
      {"y = relu(a)", Op::relu, "relu(a)"},
      {"y = gelu(a)", Op::gelu, "gelu(a)"},
      {"y = gelu_erf(a)", Op::gelu_erf, "gelu_erf(a)"},
      {"y = min(a, b)", Op::min, "min(a, b)"},
      {"y = max(a, 2)", Op::max, "max(a, 2)"},
      {"y = where(a < b, a, b)", Op::where, "where((a < b), a, b)"},
      {"y = where(a <= b, a, b)", Op::where, "where((a <= b), a, b)"},
      {"y = where(a > b, a, b)", Op::where, "where((a > b), a, b)"},
      {"y = where(a >= b, a, b)", Op::where, "where((a >= b), a, b)"},
      {"y = where(a == b, a, b)", Op::where, "where((a == b), a, b)"},
      {"y = where(a != b, a, b)", Op::where, "where((a != b), a, b)"},
      {"y = fp32(a < b)", Op::cast, "fp32((a < b))"},
      {"y = fp16(a)", Op::cast, "fp16(a)"},
      {"y = bf16(a)", Op::cast, "bf16(a)"},
      {"y = a - sum(a)", Op::sub, "(a - sum(a))"},
      {"y = a - max(a)", Op::sub, "(a - max(a))"},
      {"y = a - min(a)", Op::sub, "(a - min(a))"},
      {"y = a - mean(a)", Op::sub, "(a - mean(a))"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    const Program p = parse(c.text);
    EXPECT_EQ(root(p).op, c.op);
    EXPECT_EQ(expr_of(c.text), c.canonical);
  }
  const Program reductions = parse("s = a - sum(a); m = a - max(a); n = a - min(a); e = a - mean(a)");
  const Op expected[] = {Op::row_sum, Op::row_max, Op::row_min, Op::row_mean};
  for (std::size_t i = 0; i < 4; ++i) {
    const Node& sub = root(reductions, i);
    EXPECT_EQ(reductions.node(sub.args[1]).op, expected[i]);
    EXPECT_EQ(reductions.node(sub.args[1]).shape, ShapeClass::per_row);
  }
  EXPECT_EQ(root(parse("y = where(a < b, a, b)")).dtype, Dtype::f32);
  EXPECT_EQ(parse("y = where(a < b, a, b)").node(root(parse("y = where(a < b, a, b)")).args[0]).dtype, Dtype::boolean);
}

TEST(ExprParse, Precedence) {
  EXPECT_EQ(expr_of("y = a + b * c"), "(a + (b * c))");
  EXPECT_EQ(expr_of("y = (a + b) * c"), "((a + b) * c)");
  EXPECT_EQ(expr_of("y = a - b - c"), "((a - b) - c)");
  EXPECT_EQ(expr_of("y = a / b / c"), "((a / b) / c)");
  EXPECT_EQ(expr_of("y = a / b * c"), "((a / b) * c)");
  EXPECT_EQ(expr_of("y = -a * b"), "((-a) * b)");
  EXPECT_EQ(expr_of("y = a * -b"), "(a * (-b))");
  EXPECT_EQ(expr_of("y = - - a"), "(-(-a))");
  EXPECT_EQ(expr_of("y = fp32(a + b * c < c - a)"), "fp32(((a + (b * c)) < (c - a)))");
  EXPECT_EQ(expr_of("y = where(a * 2 >= b + 1, a, b)"), "where(((a * 2) >= (b + 1)), a, b)");
  // A minus on a literal is the negative literal.
  EXPECT_EQ(expr_of("y = -2 * a"), "((-2) * a)");
  EXPECT_EQ(root(parse("y = -2 * a")).op, Op::mul);
  EXPECT_EQ(parse("y = -2 * a").node(root(parse("y = -2 * a")).args[0]).op, Op::constant);
  EXPECT_EQ(parse("y = -2 * a").node(root(parse("y = -2 * a")).args[0]).value, -2.0);
}

TEST(ExprParse, NumberLiterals) {
  EXPECT_EQ(expr_of("y = a * 1e-6"), "(a * 1e-06)");
  EXPECT_EQ(expr_of("y = a * .5"), "(a * 0.5)");
  EXPECT_EQ(expr_of("y = a * 2."), "(a * 2)");
  EXPECT_EQ(expr_of("y = a * 1.5E+3"), "(a * 1500)");
  EXPECT_EQ(expr_of("y = a * 0.1"), "(a * 0.1)");
  EXPECT_EQ(expr_of("y = a * 1e300"), "(a * 1e+300)");
  EXPECT_EQ(expr_of("y = a * -0"), "(a * (-0))");
}

TEST(ExprParse, DeclarationsAndDefaults) {
  const Program p = parse("w: bf16[cols]; x: fp16; z: fp32[rows, cols]; y = fp32(x) * fp32(w) + z + u");
  ASSERT_EQ(p.inputs().size(), 4u);
  EXPECT_EQ(p.inputs()[0].name, "w");
  EXPECT_EQ(p.inputs()[0].dtype, Dtype::bf16);
  EXPECT_EQ(p.inputs()[0].kind, InputKind::row);
  EXPECT_EQ(p.inputs()[1].dtype, Dtype::f16);
  EXPECT_EQ(p.inputs()[1].kind, InputKind::full);
  EXPECT_EQ(p.inputs()[2].kind, InputKind::full);
  EXPECT_EQ(p.inputs()[3].name, "u");  // undeclared: the default dtype, full
  EXPECT_EQ(p.inputs()[3].dtype, Dtype::f32);
  EXPECT_EQ(p.outputs()[0].dtype, Dtype::f32);

  ParseOptions half;
  half.default_dtype = Dtype::f16;
  const Program q = parse("out = silu(a) * b", half);
  EXPECT_EQ(q.inputs()[0].dtype, Dtype::f16);
  EXPECT_EQ(q.outputs()[0].dtype, Dtype::f16);
  EXPECT_EQ(to_canonical(q), "a: fp16[rows, cols]; b: fp16[rows, cols]; out = (silu(a) * b)");

  // Inputs in order of first appearance; a declared input that is never used stays an input.
  const Program r = parse("unused: bf16\n# a comment\ny = b + a  # trailing\n\nz = a * 2");
  ASSERT_EQ(r.inputs().size(), 3u);
  EXPECT_EQ(r.inputs()[0].name, "unused");
  EXPECT_EQ(r.inputs()[1].name, "b");
  EXPECT_EQ(r.inputs()[2].name, "a");
  ASSERT_EQ(r.outputs().size(), 2u);
  EXPECT_EQ(r.outputs()[1].name, "z");

  // Newlines inside parentheses do not end the statement.
  EXPECT_EQ(expr_of("y = exp(x -\n   max(x))"), "exp((x - max(x)))");
}

TEST(ExprTypes, MixedDtypesNeedACast) {
  EXPECT_EQ(error_of("a: fp16; b: bf16; y = a + b"),
            "column 25: '+' mixes fp16 and bf16: dtypes are not promoted, cast explicitly, e.g. fp32(a) + fp32(b)");
  EXPECT_EQ(error_of("a: fp16; b: fp32; y = max(a, b)"),
            "column 23: 'max' mixes fp16 and fp32: dtypes are not promoted, cast explicitly, e.g. max(fp32(a), fp32(b))");
  EXPECT_EQ(error_of("a: fp16; b: fp32; y = where(a < 0, a, b)"),
            "column 23: 'where' mixes fp16 and fp32: dtypes are not promoted, cast explicitly, e.g. where(cond, fp32(a), fp32(b))");
  EXPECT_NE(error_of("a: fp16; b: bf16; y = a < b").find("'<' mixes fp16 and bf16"), std::string::npos);

  const Program p = parse("a: fp16; b: bf16; y = fp32(a) + fp32(b); z = bf16(a) * b");
  EXPECT_EQ(p.outputs()[0].dtype, Dtype::f32);
  EXPECT_EQ(p.outputs()[1].dtype, Dtype::bf16);

  // Literals take the dtype they meet; built from literals alone, a value is f32.
  EXPECT_EQ(parse("a: bf16; y = a * (2 + 3) - 1").outputs()[0].dtype, Dtype::bf16);
  EXPECT_EQ(parse("a: bf16; y = where(a > 0, 1, 0)").outputs()[0].dtype, Dtype::f32);
  EXPECT_EQ(parse("a: bf16; y = a + where(a > 0, 1, 0)").outputs()[0].dtype, Dtype::bf16);
  EXPECT_EQ(parse("a: fp16; y = a + exp(1)").outputs()[0].dtype, Dtype::f16);
}

TEST(ExprTypes, ShapeClasses) {
  const Program p = parse("w: fp32[cols]; y = (x - max(x)) * w + 1");
  for (const Node& n : p.nodes()) {
    if (n.op == Op::input) {
      const bool row = p.inputs()[static_cast<std::size_t>(n.input)].kind == InputKind::row;
      EXPECT_EQ(n.shape, row ? ShapeClass::row_vector : ShapeClass::full);
    }
    if (n.op == Op::constant) {
      EXPECT_EQ(n.shape, ShapeClass::scalar);
    }
    if (n.op == Op::row_max) {
      EXPECT_EQ(n.shape, ShapeClass::per_row);
    }
  }
  EXPECT_EQ(root(p).shape, ShapeClass::full);
  EXPECT_FALSE(varies_along_rows(ShapeClass::row_vector));
  EXPECT_TRUE(varies_along_cols(ShapeClass::row_vector));
  EXPECT_TRUE(varies_along_rows(ShapeClass::per_row));
  EXPECT_FALSE(varies_along_cols(ShapeClass::per_row));

  // A [cols] vector times a per-row value is full, so it is a valid output.
  const Program outer = parse("w: fp32[cols]; y = w * sum(x)");
  EXPECT_EQ(root(outer).shape, ShapeClass::full);
}

TEST(ExprGraph, SharedSubexpressionsAreOneNode) {
  const Program layernorm = parse(kLayernorm);
  EXPECT_EQ(count_op(layernorm, Op::row_mean), 2);  // mean(x) and the mean of the squares
  EXPECT_EQ(count_op(layernorm, Op::sub), 1);       // x - mean(x), three times in the text
  EXPECT_EQ(layernorm.passes(), 2);
  ASSERT_EQ(layernorm.reductions().size(), 2u);
  const Node& first = layernorm.node(layernorm.reductions()[0]);
  const Node& second = layernorm.node(layernorm.reductions()[1]);
  EXPECT_EQ(first.reduction_depth, 1);
  EXPECT_EQ(second.reduction_depth, 2);
  EXPECT_EQ(layernorm.node(first.args[0]).op, Op::input);

  const Program softmax = parse(kSoftmax);
  EXPECT_EQ(count_op(softmax, Op::exp), 1);
  EXPECT_EQ(count_op(softmax, Op::row_max), 1);
  EXPECT_EQ(count_op(softmax, Op::row_sum), 1);
  EXPECT_EQ(softmax.nodes().size(), 6u);  // x, max, sub, exp, sum, div
  EXPECT_TRUE(softmax.has_reduction());
  EXPECT_EQ(root(softmax).reduction_depth, 2);

  const Program rmsnorm = parse(kRmsnorm);
  EXPECT_EQ(rmsnorm.passes(), 1);
  EXPECT_EQ(rmsnorm.reductions().size(), 1u);

  const Program pointwise = parse("out = silu(a) * b");
  EXPECT_FALSE(pointwise.has_reduction());
  EXPECT_EQ(pointwise.passes(), 0);
  EXPECT_TRUE(pointwise.reductions().empty());

  // Topological: every operand before its user. Outputs share nodes too.
  const Program two = parse("y = exp(x) + 1; z = exp(x) * 2");
  EXPECT_EQ(count_op(two, Op::exp), 1);
  for (std::size_t i = 0; i < two.nodes().size(); ++i) {
    for (NodeId a : two.nodes()[i].args) EXPECT_LT(static_cast<std::size_t>(a), i);
  }
}

TEST(ExprGraph, CanonicalFormIsStable) {
  const char* const programs[] = {
      kSoftmax,
      kRmsnorm,
      kLayernorm,
      "out = silu(a) * b",
      "a: fp16; y = where(a > -1.5, fp32(a), 0.5) - min(fp32(a))\nz = bf16(a * .25)",
      "y = -(x) - -3 + --x",
  };
  for (const char* text : programs) {
    SCOPED_TRACE(text);
    const std::string canonical = to_canonical(parse(text));
    EXPECT_EQ(to_canonical(parse(canonical)), canonical);
    EXPECT_EQ(to_canonical(parse(text)), canonical);  // deterministic
  }
  EXPECT_EQ(to_canonical(parse(kRmsnorm)),
            "x: bf16[rows, cols]; w: bf16[cols]; y = ((x * rsqrt((mean((x * x)) + 1e-06))) * w)");
  // Spacing, comments and redundant parentheses do not change it.
  EXPECT_EQ(to_canonical(parse("y=exp(x-max(x))/sum(exp((x-max(x))))  # softmax")), to_canonical(parse(kSoftmax)));
}

TEST(ExprBuilder, MatchesTheTextForm) {
  Builder b;
  Expr x = b.input("x", Dtype::bf16);
  Expr w = b.row_input("w", Dtype::bf16);
  b.output("y", x * rsqrt(mean(x * x) + 1e-6) * w);
  const Program p = b.build();
  EXPECT_EQ(to_canonical(p), to_canonical(parse(kRmsnorm)));

  Builder s;
  Expr v = s.input("x", Dtype::f32);
  Expr e = exp(v - max(v));
  s.output("y", e / sum(e));
  EXPECT_EQ(to_canonical(s.build()), to_canonical(parse(kSoftmax)));

  Builder l;
  Expr a = l.input("a", Dtype::f16);
  l.output("r", where(a > 0, a, 0.01 * a));
  l.output("c", fp32(a) - 2.0);
  EXPECT_EQ(to_canonical(l.build()), to_canonical(parse("a: fp16; r = where(a > 0, a, 0.01 * a); c = fp32(a) - 2")));
  EXPECT_EQ(eq(a, 1.0).dtype(), Dtype::boolean);
  EXPECT_EQ((-l.constant(2)).op(), Op::constant);
}

TEST(ExprBuilder, RejectsMisuse) {
  Builder b;
  Builder other;
  Expr x = b.input("x", Dtype::f32);
  Expr y = other.input("y", Dtype::f32);
  EXPECT_THROW(x + y, Error);
  EXPECT_THROW(Expr() + x, Error);
  EXPECT_THROW(b.input("x", Dtype::f16), Error);
  EXPECT_THROW(b.input("exp", Dtype::f16), Error);
  EXPECT_THROW(b.input("1x", Dtype::f16), Error);
  EXPECT_THROW(b.input("flag", Dtype::boolean), Error);
  EXPECT_THROW(b.constant(std::numeric_limits<double>::infinity()), Error);
  EXPECT_THROW(b.constant(std::nan("")), Error);
  EXPECT_THROW(b.output("x", x * 2), Error);         // the name of an input
  EXPECT_THROW(b.output("s", sum(x)), Error);        // per row
  EXPECT_THROW(b.output("c", x < 2), Error);         // bool
  EXPECT_THROW(b.output("k", b.constant(1)), Error);  // scalar
  EXPECT_THROW(cast(x, Dtype::boolean), Error);
  EXPECT_THROW(b.build(), Error);  // no output yet
  b.output("z", x * 2);
  EXPECT_THROW(b.output("z", x * 3), Error);
  EXPECT_NO_THROW(b.build());
  Builder moved = std::move(b);
  EXPECT_NO_THROW(moved.build());
  EXPECT_THROW(b.input("q", Dtype::f32), Error);  // NOLINT(bugprone-use-after-move): the point of the check
  EXPECT_THROW(b.build(), Error);

  // A deep chain is rejected when it is built, not when it is printed.
  Builder deep;
  Expr d = deep.input("x", Dtype::f32);
  try {
    for (int i = 0; i < 1000; ++i) d = exp(d);
    FAIL() << "no depth limit";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "expression nested deeper than 256 operations");
  }
  // Sharing makes a small graph whose tree is huge: rejected, since the canonical form is a tree.
  Builder wide;
  Expr t = wide.input("x", Dtype::f32);
  try {
    for (int i = 0; i < 64; ++i) t = t + t;
    FAIL() << "no size limit";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("expression too large"), std::string::npos);
  }
}

TEST(ExprErrors, NameTheColumnAndTheProblem) {
  struct Case {
    const char* text;
    const char* message;
  };
  const Case cases[] = {
      {"y = silux(a)",
       "column 5: unknown function 'silux' (functions: abs, bf16, exp, fp16, fp32, gelu, gelu_erf, log, max, mean, min, "
       "relu, rsqrt, sigmoid, silu, sqrt, sum, tanh, where)"},
      {"y = (a + b", "column 11: expected ')', found the end of the text"},
      {"y = exp(a", "column 10: expected ',' or ')', found the end of the text"},
      {"y = a +", "column 8: expected a number, a name or '(', found the end of the text"},
      {"y = a * * b", "column 9: expected a number, a name or '(', found '*'"},
      {"y = exp(a, b)", "column 5: 'exp' takes 1 argument, not 2"},
      {"y = where(a < b, a)", "column 5: 'where' takes 3 arguments, not 2"},
      {"y = max(a, b, c)", "column 5: 'max' takes 1 argument (the row reduction) or 2 (elementwise), not 3"},
      {"y = exp()", "column 5: 'exp' takes 1 argument, not 0"},
      {"y = a @ b", "column 7: unexpected character '@'"},
      {"y = a ! b", "column 7: unexpected '!' (did you mean '!='?)"},
      {"y = 1e+ * a", "column 5: malformed number '1e+': the exponent has no digits"},
      {"y = 2x", "column 5: malformed number '2x'"},
      {"y = 1.2.3", "column 5: malformed number '1.2.3'"},
      {"y = a * 1e999", "column 9: the number 1e999 is out of range for a double"},
      {"y = a < b < c", "column 11: comparisons do not chain (a < b < c): compare two values at a time"},
      {"y = a + (a < b)", "column 7: '+' takes numbers, not a boolean (a comparison's result): use where(cond, a, b), or a cast such as fp32(a < b)"},
      {"y = where(a, a, a)", "column 5: where's first argument must be a comparison (bool), not fp32"},
      {"y = exp", "column 5: 'exp' is a function: call it as exp(...)"},
      {"", "column 1: empty program: it has no output (e.g. y = x * 2)"},
      {"  # nothing\n", "line 1, column 1: empty program: it has no output (e.g. y = x * 2)"},
      {"x: fp32; x = x + 1", "column 10: output 'x' has the name of an input"},
      {"y = x + 1; x = y", "column 12: output 'x' has the name of an input"},
      {"y = x + 1; z = y * 2", "column 16: 'y' is an output: an expression reads only inputs"},
      {"y = x; y = x * 2", "column 8: output 'y' is assigned twice"},
      {"x: fp32; x: fp16; y = x", "column 10: input 'x' is declared twice"},
      {"x: fp8; y = x", "column 4: unknown dtype 'fp8' (dtypes: fp32, fp16, bf16)"},
      {"x: bool; y = x", "column 4: unknown dtype 'bool' (dtypes: fp32, fp16, bf16)"},
      {"w: fp32[rows]; y = w", "column 13: expected ',' in [rows, cols], found ']'"},
      {"w: fp32[col]; y = w", "column 9: expected [cols] (a row vector) or [rows, cols] (a full input), found 'col'"},
      {"y = x; w: fp32", "column 8: declarations come before the first output ('w')"},
      {"y = x z = x", "column 7: expected ';' or a new line after the output, found 'z'"},
      {"y x", "column 3: expected ':' (a declaration) or '=' (an output) after 'y', found 'x'"},
      {"= x", "column 1: expected a declaration (x: bf16) or an output (y = ...), found '='"},
      {"exp = x", "column 1: output name 'exp' is a function name"},
      {"w: fp32[cols]; y = x - sum(w)",
       "column 24: 'sum' reduces a [rows, cols] value along the row, but its argument is a [cols] row vector, the same "
       "for every row: nothing to broadcast back over the row"},
      {"y = x - mean(max(x))",
       "column 9: 'mean' reduces a [rows, cols] value along the row, but its argument is one value per row (a "
       "reduction's result): nothing to broadcast back over the row"},
      {"y = mean(x)", "column 1: output 'y' is one value per row (a reduction's result), but an output is [rows, cols]: "
                      "combine it with a full input"},
      {"w: fp32[cols]; y = w * 2",
       "column 16: output 'y' is a [cols] row vector, the same for every row, but an output is [rows, cols]: combine it "
       "with a full input"},
      {"y = 2 + 3", "column 1: output 'y' is a scalar, but an output is [rows, cols]: combine it with a full input"},
      {"y = x < 1", "column 1: output 'y' is a comparison (bool): store where(cond, 1, 0) or a cast such as fp32(a < b)"},
      {"y = -(x < 1)", "column 5: unary '-' takes a number, not a boolean (a comparison's result): use where(cond, a, b), or a cast such as fp32(a < b)"},
      {"y = (x\n  + (a", "line 2, column 7: expected ')', found the end of the text"},
      {"y = x\n+ 1", "line 2, column 1: expected a declaration (x: bf16) or an output (y = ...), found '+'"},
      {"y = x \x01", "column 7: unexpected byte 0x01"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    EXPECT_EQ(error_of(c.text), c.message);
  }
}

TEST(ExprErrors, DeepNestingIsAnErrorNotACrash) {
  auto nested = [](int depth, const std::string& open, const std::string& leaf, const std::string& close) {
    std::string s = "y = ";
    for (int i = 0; i < depth; ++i) s += open;
    s += leaf;
    for (int i = 0; i < depth; ++i) s += close;
    return s;
  };
  EXPECT_NO_THROW(parse(nested(200, "(", "x", ")")));
  EXPECT_NO_THROW(parse(nested(200, "exp(", "x", ")")));
  EXPECT_NO_THROW(parse(nested(255, "-(", "x", ")")));  // depth 256: the limit itself
  EXPECT_EQ(error_of(nested(100000, "(", "x", ")")), "column 261: nested deeper than 256 levels");
  EXPECT_EQ(error_of(nested(300, "exp(", "x", ")")), "column 1032: nested deeper than 256 levels");
  EXPECT_EQ(error_of(nested(100000, "exp(", "x", ")")), "column 1032: nested deeper than 256 levels");
  // Each -( adds one operation and one parenthesis: 256 of them make depth 257.
  EXPECT_EQ(error_of(nested(256, "-(", "x", ")")), "column 5: expression nested deeper than 256 operations");
  EXPECT_EQ(error_of(nested(100000, "-", "x", "")), "column 261: too many unary '-' in a row");
  std::string chain = "y = x";
  for (int i = 0; i < 300; ++i) chain += " + x";
  EXPECT_NE(error_of(chain).find("expression nested deeper than 256 operations"), std::string::npos);
  EXPECT_EQ(error_of(nested(100000, "(", "x", "")).substr(0, 12), "column 261: ");
}

TEST(ExprEvaluate, SoftmaxRmsnormLayernorm) {
  const std::vector<double> x = {1, 2, 3, -1, 0, 4};  // 2 x 3
  {
    const auto y = evaluate(parse(kSoftmax), {x}, 2, 3);
    ASSERT_EQ(y.size(), 1u);
    const double s0 = std::exp(-2.0) + std::exp(-1.0) + 1.0;
    const double s1 = std::exp(-5.0) + std::exp(-4.0) + 1.0;
    const double expected[] = {std::exp(-2.0) / s0, std::exp(-1.0) / s0, 1 / s0,
                               std::exp(-5.0) / s1, std::exp(-4.0) / s1, 1 / s1};
    for (int i = 0; i < 6; ++i) EXPECT_NEAR(y[0][i], expected[i], 1e-15);
  }
  {
    const std::vector<double> w = {0.5, 1, 2};
    const auto y = evaluate(parse(kRmsnorm), {x, w}, 2, 3);
    const double r0 = 1 / std::sqrt((1 + 4 + 9) / 3.0 + 1e-6);
    const double r1 = 1 / std::sqrt((1 + 0 + 16) / 3.0 + 1e-6);
    const double expected[] = {0.5 * r0, 2 * r0, 6 * r0, -0.5 * r1, 0, 8 * r1};
    for (int i = 0; i < 6; ++i) EXPECT_NEAR(y[0][i], expected[i], 1e-14);
  }
  {
    const std::vector<double> w = {1, 2, 3};
    const std::vector<double> b = {0.5, 0, -1};
    const Program p = parse(kLayernorm);
    ASSERT_EQ(p.inputs()[2].name, "x");
    const auto y = evaluate(p, {w, b, x}, 2, 3);
    // Row 0: mean 2, variance 2/3; row 1: mean 1, variance (4 + 1 + 9) / 3.
    const double r0 = 1 / std::sqrt(2.0 / 3 + 1e-5);
    const double r1 = 1 / std::sqrt(14.0 / 3 + 1e-5);
    const double expected[] = {-1 * r0 * 1 + 0.5, 0, 1 * r0 * 3 - 1, -2 * r1 * 1 + 0.5, -1 * r1 * 2, 3 * r1 * 3 - 1};
    for (int i = 0; i < 6; ++i) EXPECT_NEAR(y[0][i], expected[i], 1e-14);
  }
}

TEST(ExprEvaluate, Pointwise) {
  const std::vector<double> a = {-2, -0.5, 0, 0.5, 1, 3};
  const std::vector<double> b = {1, 2, 3, 4, 5, 6};
  const Program p = parse(
      "s = silu(a) * b; g = gelu(a); e = gelu_erf(a); r = relu(a); m = min(a, b) + max(a, 0.25)\n"
      "w = where(a >= 0, a, 0.01 * a); c = fp32(a != 0) + abs(a) + sigmoid(a) + tanh(a); d = a / b - b * 2");
  const auto y = evaluate(p, {a, b}, 2, 3);
  ASSERT_EQ(y.size(), 8u);
  const double pi = 3.14159265358979323846;
  for (std::size_t i = 0; i < 6; ++i) {
    const double v = a[i];
    const double sig = 1 / (1 + std::exp(-v));
    EXPECT_DOUBLE_EQ(y[0][i], v * sig * b[i]);
    EXPECT_DOUBLE_EQ(y[1][i], 0.5 * v * (1 + std::tanh(std::sqrt(2 / pi) * (v + 0.044715 * v * v * v))));
    EXPECT_DOUBLE_EQ(y[2][i], 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))));
    EXPECT_DOUBLE_EQ(y[3][i], v > 0 ? v : 0);
    EXPECT_DOUBLE_EQ(y[4][i], std::min(v, b[i]) + std::max(v, 0.25));
    EXPECT_DOUBLE_EQ(y[5][i], v >= 0 ? v : 0.01 * v);
    EXPECT_DOUBLE_EQ(y[6][i], (v != 0 ? 1 : 0) + std::fabs(v) + sig + std::tanh(v));
    EXPECT_DOUBLE_EQ(y[7][i], v / b[i] - b[i] * 2);
  }
  // Reductions of several depths and a row vector, per row.
  const Program q = parse("w: fp32[cols]; y = (x - min(x)) * w + sum(x * w) + max(exp(x - mean(x)))");
  const auto z = evaluate(q, {{10, 20}, {1, 2, 3, 4}}, 2, 2);
  // Row 0 = {1, 2}: min 1, sum(x*w) 50, mean 1.5 -> max exp(x - 1.5) = exp(0.5).
  EXPECT_DOUBLE_EQ(z[0][0], 0 * 10 + 50 + std::exp(0.5));
  EXPECT_DOUBLE_EQ(z[0][1], 1 * 20 + 50 + std::exp(0.5));
  EXPECT_DOUBLE_EQ(z[0][2], 0 * 10 + 110 + std::exp(0.5));
  EXPECT_DOUBLE_EQ(z[0][3], 1 * 20 + 110 + std::exp(0.5));
}

TEST(ExprEvaluate, CastsRoundToNearestEven) {
  // fp16: 11 significand bits, spacing 2^-10 at 1, largest 65504, subnormal spacing 2^-24.
  EXPECT_EQ(round_to(1 + std::ldexp(1, -11), Dtype::f16), 1.0);  // a tie goes to even
  EXPECT_EQ(round_to(1 + 3 * std::ldexp(1, -11), Dtype::f16), 1 + std::ldexp(1, -9));
  EXPECT_EQ(round_to(1 + std::ldexp(1, -11) + std::ldexp(1, -30), Dtype::f16), 1 + std::ldexp(1, -10));
  EXPECT_EQ(round_to(65519, Dtype::f16), 65504);
  EXPECT_EQ(round_to(65520, Dtype::f16), std::numeric_limits<double>::infinity());
  EXPECT_EQ(round_to(-65520, Dtype::f16), -std::numeric_limits<double>::infinity());
  EXPECT_EQ(round_to(std::ldexp(1, -25), Dtype::f16), 0.0);
  EXPECT_EQ(round_to(3 * std::ldexp(1, -25), Dtype::f16), std::ldexp(1, -23));
  EXPECT_EQ(round_to(0.1, Dtype::f16), 0.0999755859375);
  // bf16: 8 significand bits, the range of fp32.
  EXPECT_EQ(round_to(1 + std::ldexp(1, -8), Dtype::bf16), 1.0);
  EXPECT_EQ(round_to(1 + 3 * std::ldexp(1, -8), Dtype::bf16), 1 + std::ldexp(1, -6));
  EXPECT_EQ(round_to(0.1, Dtype::bf16), 0.10009765625);
  EXPECT_EQ(round_to(3.0e38, Dtype::bf16), std::ldexp(226, 120));
  EXPECT_EQ(round_to(3.4e38, Dtype::bf16), std::numeric_limits<double>::infinity());
  // fp32 as the hardware rounds.
  for (double v : {0.1, 1.0 / 3, 1e-40, 3.4028235e38, -2.5e-45, 1e39}) {
    EXPECT_EQ(round_to(v, Dtype::f32), static_cast<double>(static_cast<float>(v))) << v;
  }
  EXPECT_TRUE(std::isnan(round_to(std::nan(""), Dtype::f16)));

  // Inside an expression: only explicit casts round; the rest is double.
  const Program p = parse("a: fp32; y = fp32(fp16(a)) - a; z = bf16(a) * 1; u = fp32(fp16(a) * 3)");
  const auto y = evaluate(p, {{0.1, 1 + std::ldexp(1, -11)}}, 1, 2);
  EXPECT_EQ(y[0][0], 0.0999755859375 - 0.1);
  EXPECT_EQ(y[0][1], -std::ldexp(1, -11));
  EXPECT_EQ(y[1][0], 0.10009765625);
  EXPECT_EQ(y[2][0], static_cast<double>(static_cast<float>(0.0999755859375 * 3)));
}

TEST(ExprEvaluate, ValidatesSizes) {
  const Program p = parse("w: fp32[cols]; y = x * w");
  EXPECT_NO_THROW(evaluate(p, {{1, 2, 3}, {1, 2, 3, 4, 5, 6}}, 2, 3));
  try {
    evaluate(p, {{1, 2, 3}, {1, 2, 3}}, 2, 3);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::usage);
    EXPECT_EQ(e.message(), "evaluate: input 'x' has 3 values, expected rows * cols = 6");
  }
  EXPECT_THROW(evaluate(p, {{1, 2}, {1, 2, 3, 4, 5, 6}}, 2, 3), Error);
  EXPECT_THROW(evaluate(p, {{1, 2, 3}}, 2, 3), Error);
  EXPECT_THROW(evaluate(p, {{}, {}}, 0, 3), Error);
  EXPECT_THROW(evaluate(p, {{1}, {1}}, 1, -1), Error);
  EXPECT_THROW(evaluate(p, {{1}, {1}}, std::numeric_limits<std::int64_t>::max(), 2), Error);
}

}  // namespace
}  // namespace gmjit::codegen::expr
