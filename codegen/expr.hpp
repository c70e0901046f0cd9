#pragma once
/// @file expr.hpp
/// The expression front end of the LLVM code generator (issue 20): a typed, hash-consed graph of
/// fused pointwise and row-reduction computations over [rows, cols] tensors, a C++ builder, a text
/// parser, a canonical text form (the part of a cache key that says what a kernel computes) and a
/// float64 host evaluator (the verification reference). No LLVM, no CUDA.
///
/// Shapes. Every program works on a [rows, cols] problem, row-major. An input is `full` (a
/// [rows, cols] tensor) or `row` (a [cols] vector broadcast over the rows: weights, biases). A row
/// reduction (`sum`, `max`, `min`, `mean` of one argument) reduces along the last axis and is
/// broadcast back over the row, so `x - max(x)` is full-shaped. Nested reductions are allowed
/// (softmax's `sum(exp(x - max(x)))`). Every output is full-shaped.
///
/// Types. A node's dtype is its storage dtype (what it would be if stored); the math itself is done
/// in the compute type, f32, for every float dtype: the lowering loads f16/bf16, computes in f32,
/// and rounds only at an explicit cast (`fp16(x)`, ...) and at the final store. `boolean` is only
/// the type of a comparison, consumed by `where` or by a cast (true = 1, false = 0).
/// The type rule is strict: an operation on two different float dtypes is a usage error; the
/// message asks for an explicit cast (`fp32(a) + fp32(b)`). A number literal has no dtype of its
/// own: an expression built only from literals ("weak") takes the dtype of the operand it meets,
/// and is f32 where nothing decides (`where(x > 0, 1, 0)` is f32 whatever x is).
///
/// Text syntax (parse()):
///
///     program := item { sep item }          sep: ';' or a newline; empty items are allowed
///     item    := decl | output
///     decl    := NAME ':' DTYPE [ '[' 'cols' ']' | '[' 'rows' ',' 'cols' ']' ]
///     output  := NAME '=' expr
///     expr    := sum [ ('<' | '<=' | '>' | '>=' | '==' | '!=') sum ]     (comparisons do not chain)
///     sum     := term { ('+' | '-') term }
///     term    := unary { ('*' | '/') unary }
///     unary   := { '-' } primary                 (so -x * y is (-x) * y)
///     primary := NUMBER | NAME | NAME '(' expr { ',' expr } ')' | '(' expr ')'
///
/// DTYPE is fp32, fp16 or bf16. `x: bf16` or `x: bf16[rows, cols]` declares a full input,
/// `w: bf16[cols]` a row vector; declarations come before the first output. A NAME that is neither
/// declared nor a function is a full input of ParseOptions::default_dtype. Inputs are numbered in
/// the order they first appear (declaration or use). NUMBER is decimal: `2`, `1.5`, `.5`, `2.`,
/// `1e-6`, `1.5E+3`. `#` starts a comment to the end of the line. Newlines inside parentheses do
/// not separate items. An expression cannot read an output. Functions:
///
///     abs exp log sqrt rsqrt tanh sigmoid silu relu gelu gelu_erf      one argument, elementwise
///     min(a, b) max(a, b)                                              elementwise
///     sum(x) max(x) min(x) mean(x)                                     row reductions of a full x
///     where(cond, a, b)                                                cond a comparison
///     fp32(x) fp16(x) bf16(x)                                          casts (round to nearest even)
///
/// Every error (syntax, types, shapes, limits) is a gmjit::Error of kind usage whose message starts
/// with `column C: ` (`line L, column C: ` in a text of several lines), 1-based, and names the
/// problem. Nesting deeper than kMaxDepth is an error, never a stack overflow.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace gmjit::codegen::expr {

/// Storage dtypes fp32, fp16, bf16, and boolean for comparisons.
enum class Dtype { f32, f16, bf16, boolean };
/// "fp32", "fp16", "bf16", "bool".
const char* to_string(Dtype dtype);
/// "fp32", "fp16" or "bf16"; anything else is a usage error listing those.
Dtype parse_dtype(std::string_view name);

/// How a value varies over the [rows, cols] problem. The lowering keeps a row_vector value per
/// column, a per_row value per row (in a register across the row), a full value per element.
enum class ShapeClass {
  scalar,      ///< the same everywhere: literals and what is built from them only
  row_vector,  ///< varies along cols, the same for every row: a `row` input ([cols])
  per_row,     ///< one value per row, the same along it: a reduction's result
  full,        ///< varies along both
};
/// "scalar", "row_vector", "per_row", "full".
const char* to_string(ShapeClass shape);
bool varies_along_rows(ShapeClass shape);
bool varies_along_cols(ShapeClass shape);

enum class InputKind {
  full,  ///< [rows, cols], row-major contiguous
  row,   ///< [cols], broadcast over the rows
};

/// Operations. The float64 definitions the evaluator uses (the lowering computes the same in f32):
/// sigmoid(x) = 1 / (1 + exp(-x)); silu(x) = x * sigmoid(x); relu(x) = fmax(x, 0) (NaN gives 0);
/// gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (the tanh form);
/// gelu_erf(x) = 0.5 x (1 + erf(x / sqrt(2))) (the exact form); rsqrt(x) = 1 / sqrt(x);
/// min/max (elementwise and row) follow fmin/fmax: a NaN is ignored unless all are NaN;
/// row_mean = row_sum / cols.
enum class Op {
  input,     ///< Node::input names it
  constant,  ///< Node::value
  neg, abs, exp, log, sqrt, rsqrt, tanh, sigmoid, silu, relu, gelu, gelu_erf,
  add, sub, mul, div, min, max,
  lt, le, gt, ge, eq, ne,  ///< give boolean
  where,                   ///< args: cond (boolean), a, b
  cast,                    ///< to Node::dtype
  row_sum, row_max, row_min, row_mean,
};
/// A unique name: "input", "constant", "neg", "exp", "add", "lt", "row_sum", ... (the text form
/// spells a reduction as sum/max/min/mean, the arithmetic and comparisons as operators).
const char* to_string(Op op);
bool is_reduction(Op op);
bool is_comparison(Op op);

using NodeId = std::int32_t;

/// How deep an expression may nest, in the graph and in the text; deeper is a usage error.
inline constexpr int kMaxDepth = 256;
/// How many operations an expression may have when written out as a tree (the canonical form);
/// a builder can share subexpressions so the tree is much larger than the graph.
inline constexpr std::int64_t kMaxTreeSize = 1'000'000;

struct Node {
  Op op = Op::constant;
  /// Storage dtype; boolean for comparisons. Computed in f32 whatever it is (see the file comment).
  Dtype dtype = Dtype::f32;
  ShapeClass shape = ShapeClass::scalar;
  /// Built from literals only: its dtype was not chosen by an input or a cast.
  bool weak = false;
  /// Operands, each with a smaller id (the node list is topological).
  std::vector<NodeId> args;
  double value = 0;  ///< Op::constant: finite
  int input = -1;    ///< Op::input: the index in Program::inputs()
  /// 1 for a leaf, else 1 + the deepest operand.
  int depth = 1;
  /// The row passes that must be done before this node's value is known: a reduction has
  /// 1 + the largest reduction_depth in its argument, any other node the largest of its
  /// operands'. 0 where no reduction is involved.
  int reduction_depth = 0;
};

struct Input {
  std::string name;
  Dtype dtype = Dtype::f32;  ///< f32, f16 or bf16
  InputKind kind = InputKind::full;
};

struct Output {
  std::string name;
  NodeId node = -1;
  Dtype dtype = Dtype::f32;  ///< the storage dtype: the expression's dtype
};

/// Inputs, the nodes reachable from the outputs, and the outputs. Built by Builder::build or
/// parse() and valid by construction: every output full-shaped and not boolean, names unique.
/// Nodes are numbered in post-order from the outputs (first output first, operands left to
/// right), so the numbering depends only on the outputs' expressions.
class Program {
 public:
  /// In the order evaluate() takes them, declared ones included even when unused.
  const std::vector<Input>& inputs() const { return inputs_; }
  const std::vector<Output>& outputs() const { return outputs_; }
  /// Topological: every node after its operands; identical subexpressions are one node.
  const std::vector<Node>& nodes() const { return nodes_; }
  const Node& node(NodeId id) const;

  bool has_reduction() const { return passes_ > 0; }
  /// The reductions, ordered by (reduction_depth, id): those of one depth can be computed in one
  /// pass over the row, after the passes of the smaller depths.
  const std::vector<NodeId>& reductions() const { return reductions_; }
  /// The largest reduction_depth: how many row passes come before the elementwise pass.
  int passes() const { return passes_; }

 private:
  friend class Builder;
  std::vector<Input> inputs_;
  std::vector<Output> outputs_;
  std::vector<Node> nodes_;
  std::vector<NodeId> reductions_;
  int passes_ = 0;
};

/// The deterministic text of a program, which parse() reads back to the same program: every input
/// declared with dtype and shape in input order, then each output with every operation in
/// parentheses, e.g. `x: bf16[rows, cols]; w: bf16[cols]; y = ((x * rsqrt((mean((x * x)) + 1e-06))) * w)`.
std::string to_canonical(const Program& program);

struct ParseOptions {
  /// The dtype of an input that is used without a declaration (f32, f16 or bf16).
  Dtype default_dtype = Dtype::f32;
};

/// Parses the text form (see the file comment). Throws gmjit::Error(usage) naming the column.
Program parse(std::string_view text, const ParseOptions& options = {});

/// Evaluates in float64: the verification reference. `inputs` in program input order, a full one
/// rows * cols values, a row one cols. Values are taken as given (pass what the device reads);
/// only explicit casts round (to nearest even, with overflow to infinity and subnormals), outputs
/// are not rounded to their storage dtype. Returns one rows * cols vector per output. Throws
/// usage on sizes that do not match.
std::vector<std::vector<double>> evaluate(const Program& program, const std::vector<std::vector<double>>& inputs,
                                          std::int64_t rows, std::int64_t cols);

/// The names the text form reserves for its functions (no input or output may take one), sorted.
const std::vector<std::string>& function_names();

/// Rounds to the nearest value of `dtype` (f32, f16 or bf16), ties to even, as a cast does.
double round_to(double value, Dtype dtype);

namespace detail {
struct Graph;
struct Access;
}  // namespace detail

/// A handle on a node of a Builder's graph. Cheap to copy; valid while its Builder lives.
/// Operators and functions on handles create nodes (or find the identical one already there) and
/// throw gmjit::Error(usage) on a type or shape error; handles of two builders do not mix.
class Expr {
 public:
  Expr() = default;  ///< empty: using it is a usage error
  bool valid() const { return graph_ != nullptr; }
  NodeId id() const { return id_; }
  Dtype dtype() const;
  ShapeClass shape() const;
  Op op() const;

 private:
  friend struct detail::Access;
  Expr(detail::Graph* graph, NodeId id) : graph_(graph), id_(id) {}
  detail::Graph* graph_ = nullptr;
  NodeId id_ = -1;
};

/// Builds a Program:
///
///     Builder b;
///     Expr x = b.input("x", Dtype::bf16);
///     Expr w = b.row_input("w", Dtype::bf16);
///     b.output("y", x * rsqrt(mean(x * x) + 1e-6) * w);
///     Program p = b.build();
class Builder {
 public:
  Builder();
  ~Builder();
  Builder(Builder&&) noexcept;
  Builder& operator=(Builder&&) noexcept;
  Builder(const Builder&) = delete;
  Builder& operator=(const Builder&) = delete;

  /// A full [rows, cols] input; names are unique identifiers that are not function names.
  Expr input(const std::string& name, Dtype dtype, InputKind kind = InputKind::full);
  /// A [cols] input broadcast over the rows.
  Expr row_input(const std::string& name, Dtype dtype) { return input(name, dtype, InputKind::row); }
  /// A literal (finite): weak, it takes the dtype of what it meets.
  Expr constant(double value);
  /// Names an output; it must be full-shaped and not boolean, its name new.
  void output(const std::string& name, const Expr& value);
  /// The program of the inputs and outputs so far; the builder stays usable.
  Program build() const;

 private:
  detail::Graph& graph() const;  // throws on a moved-from builder
  std::unique_ptr<detail::Graph> graph_;
};

Expr operator+(const Expr& a, const Expr& b);
Expr operator+(const Expr& a, double b);
Expr operator+(double a, const Expr& b);
Expr operator-(const Expr& a, const Expr& b);
Expr operator-(const Expr& a, double b);
Expr operator-(double a, const Expr& b);
Expr operator*(const Expr& a, const Expr& b);
Expr operator*(const Expr& a, double b);
Expr operator*(double a, const Expr& b);
Expr operator/(const Expr& a, const Expr& b);
Expr operator/(const Expr& a, double b);
Expr operator/(double a, const Expr& b);
Expr operator-(const Expr& a);

/// Comparisons give boolean. == and != are named functions so that handles keep their meaning in
/// containers and test assertions.
Expr operator<(const Expr& a, const Expr& b);
Expr operator<(const Expr& a, double b);
Expr operator<=(const Expr& a, const Expr& b);
Expr operator<=(const Expr& a, double b);
Expr operator>(const Expr& a, const Expr& b);
Expr operator>(const Expr& a, double b);
Expr operator>=(const Expr& a, const Expr& b);
Expr operator>=(const Expr& a, double b);
Expr eq(const Expr& a, const Expr& b);
Expr eq(const Expr& a, double b);
Expr ne(const Expr& a, const Expr& b);
Expr ne(const Expr& a, double b);

Expr abs(const Expr& x);
Expr exp(const Expr& x);
Expr log(const Expr& x);
Expr sqrt(const Expr& x);
Expr rsqrt(const Expr& x);
Expr tanh(const Expr& x);
Expr sigmoid(const Expr& x);
Expr silu(const Expr& x);
Expr relu(const Expr& x);
Expr gelu(const Expr& x);      ///< the tanh approximation
Expr gelu_erf(const Expr& x);  ///< the exact, erf form
Expr min(const Expr& a, const Expr& b);
Expr min(const Expr& a, double b);
Expr max(const Expr& a, const Expr& b);
Expr max(const Expr& a, double b);

Expr where(const Expr& cond, const Expr& a, const Expr& b);
Expr where(const Expr& cond, double a, const Expr& b);
Expr where(const Expr& cond, const Expr& a, double b);
Expr where(const Expr& cond, double a, double b);

Expr cast(const Expr& x, Dtype dtype);  ///< dtype f32, f16 or bf16
Expr fp32(const Expr& x);
Expr fp16(const Expr& x);
Expr bf16(const Expr& x);

/// Row reductions of a full-shaped x along cols, broadcast back over the row.
Expr sum(const Expr& x);
Expr max(const Expr& x);
Expr min(const Expr& x);
Expr mean(const Expr& x);

}  // namespace gmjit::codegen::expr
