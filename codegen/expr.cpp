// The expression graph: nodes, type and shape rules, hash-consing, the builder, programs and their
// canonical text. The parser is in expr_parse.cpp, the evaluator in expr_eval.cpp.
#include "codegen/expr.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <map>
#include <tuple>
#include <utility>

#include "gmjit/error.hpp"

namespace gmjit::codegen::expr {

namespace {

[[noreturn]] void fail(std::string message) { throw Error(ErrorKind::usage, 0, std::move(message)); }

enum class OpClass { leaf, unary, binary, compare, select, cast, reduce };

struct OpInfo {
  const char* name;
  OpClass cls;
  const char* spelling;  // in the text: the operator symbol or the function name
};

OpInfo info(Op op) {
  switch (op) {
    case Op::input: return {"input", OpClass::leaf, ""};
    case Op::constant: return {"constant", OpClass::leaf, ""};
    case Op::neg: return {"neg", OpClass::unary, "-"};
    case Op::abs: return {"abs", OpClass::unary, "abs"};
    case Op::exp: return {"exp", OpClass::unary, "exp"};
    case Op::log: return {"log", OpClass::unary, "log"};
    case Op::sqrt: return {"sqrt", OpClass::unary, "sqrt"};
    case Op::rsqrt: return {"rsqrt", OpClass::unary, "rsqrt"};
    case Op::tanh: return {"tanh", OpClass::unary, "tanh"};
    case Op::sigmoid: return {"sigmoid", OpClass::unary, "sigmoid"};
    case Op::silu: return {"silu", OpClass::unary, "silu"};
    case Op::relu: return {"relu", OpClass::unary, "relu"};
    case Op::gelu: return {"gelu", OpClass::unary, "gelu"};
    case Op::gelu_erf: return {"gelu_erf", OpClass::unary, "gelu_erf"};
    case Op::add: return {"add", OpClass::binary, "+"};
    case Op::sub: return {"sub", OpClass::binary, "-"};
    case Op::mul: return {"mul", OpClass::binary, "*"};
    case Op::div: return {"div", OpClass::binary, "/"};
    case Op::min: return {"min", OpClass::binary, "min"};
    case Op::max: return {"max", OpClass::binary, "max"};
    case Op::lt: return {"lt", OpClass::compare, "<"};
    case Op::le: return {"le", OpClass::compare, "<="};
    case Op::gt: return {"gt", OpClass::compare, ">"};
    case Op::ge: return {"ge", OpClass::compare, ">="};
    case Op::eq: return {"eq", OpClass::compare, "=="};
    case Op::ne: return {"ne", OpClass::compare, "!="};
    case Op::where: return {"where", OpClass::select, "where"};
    case Op::cast: return {"cast", OpClass::cast, ""};
    case Op::row_sum: return {"row_sum", OpClass::reduce, "sum"};
    case Op::row_max: return {"row_max", OpClass::reduce, "max"};
    case Op::row_min: return {"row_min", OpClass::reduce, "min"};
    case Op::row_mean: return {"row_mean", OpClass::reduce, "mean"};
  }
  return {"unknown", OpClass::leaf, ""};
}

bool is_infix(Op op) {
  return op == Op::add || op == Op::sub || op == Op::mul || op == Op::div || is_comparison(op);
}

// How an operation is named in a message: '+' for an operator, 'exp' for a function.
std::string quoted(Op op, Dtype cast_to = Dtype::f32) {
  if (op == Op::cast) return std::string("'") + to_string(cast_to) + "'";
  if (op == Op::neg) return "unary '-'";
  return std::string("'") + info(op).spelling + "'";
}

bool is_float(Dtype dtype) { return dtype != Dtype::boolean; }

ShapeClass join(ShapeClass a, ShapeClass b) {
  if (a == b || b == ShapeClass::scalar) return a;
  if (a == ShapeClass::scalar) return b;
  return ShapeClass::full;
}

const char* describe(ShapeClass shape) {
  switch (shape) {
    case ShapeClass::scalar: return "a scalar";
    case ShapeClass::row_vector: return "a [cols] row vector, the same for every row";
    case ShapeClass::per_row: return "one value per row (a reduction's result)";
    case ShapeClass::full: return "[rows, cols]";
  }
  return "?";
}

bool is_identifier(const std::string& name) {
  if (name.empty() || name.size() > 256) return false;
  auto alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  if (!alpha(name[0])) return false;
  return std::all_of(name.begin(), name.end(), [&](char c) { return alpha(c) || (c >= '0' && c <= '9'); });
}

void check_name(const std::string& name, const char* what) {
  if (!is_identifier(name)) {
    fail(std::string(what) + " name '" + name + "' is not an identifier (a letter or '_', then letters, digits, '_'; at most 256)");
  }
  const auto& functions = function_names();
  if (std::binary_search(functions.begin(), functions.end(), name)) {
    fail(std::string(what) + " name '" + name + "' is a function name");
  }
}

std::string format_number(double value) {
  char buffer[64];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, value);
  if (ec != std::errc()) return "0";
  return std::string(buffer, end);
}

}  // namespace

const char* to_string(Dtype dtype) {
  switch (dtype) {
    case Dtype::f32: return "fp32";
    case Dtype::f16: return "fp16";
    case Dtype::bf16: return "bf16";
    case Dtype::boolean: return "bool";
  }
  return "?";
}

Dtype parse_dtype(std::string_view name) {
  if (name == "fp32") return Dtype::f32;
  if (name == "fp16") return Dtype::f16;
  if (name == "bf16") return Dtype::bf16;
  fail("unknown dtype '" + std::string(name) + "' (dtypes: fp32, fp16, bf16)");
}

const char* to_string(ShapeClass shape) {
  switch (shape) {
    case ShapeClass::scalar: return "scalar";
    case ShapeClass::row_vector: return "row_vector";
    case ShapeClass::per_row: return "per_row";
    case ShapeClass::full: return "full";
  }
  return "?";
}

bool varies_along_rows(ShapeClass shape) { return shape == ShapeClass::per_row || shape == ShapeClass::full; }
bool varies_along_cols(ShapeClass shape) { return shape == ShapeClass::row_vector || shape == ShapeClass::full; }

const char* to_string(Op op) { return info(op).name; }
bool is_reduction(Op op) { return info(op).cls == OpClass::reduce; }
bool is_comparison(Op op) { return info(op).cls == OpClass::compare; }

const std::vector<std::string>& function_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n = {"abs",  "exp",  "log",  "sqrt", "rsqrt", "tanh", "sigmoid", "silu", "relu", "gelu",
                                  "gelu_erf", "min", "max", "where", "fp32", "fp16", "bf16", "sum", "mean"};
    std::sort(n.begin(), n.end());
    return n;
  }();
  return names;
}

const Node& Program::node(NodeId id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= nodes_.size()) fail("node id " + std::to_string(id) + " out of range");
  return nodes_[static_cast<std::size_t>(id)];
}

namespace detail {

struct Graph {
  struct Key {
    Op op;
    Dtype dtype;
    std::vector<NodeId> args;
    std::uint64_t value_bits;
    int input;
    bool operator<(const Key& o) const {
      return std::tie(op, dtype, args, value_bits, input) < std::tie(o.op, o.dtype, o.args, o.value_bits, o.input);
    }
  };

  std::vector<Node> nodes;
  std::vector<std::int64_t> tree_size;  // operations when written out as a tree
  std::map<Key, NodeId> index;
  std::vector<Input> inputs;
  std::vector<Output> outputs;

  const Node& at(NodeId id) const { return nodes[static_cast<std::size_t>(id)]; }

  NodeId intern(Node node) {
    std::uint64_t bits = 0;
    std::memcpy(&bits, &node.value, sizeof bits);
    Key key{node.op, node.dtype, node.args, bits, node.input};
    auto found = index.find(key);
    if (found != index.end()) return found->second;
    std::int64_t size = 1;
    for (NodeId a : node.args) size = std::min(size + tree_size[static_cast<std::size_t>(a)], kMaxTreeSize + 1);
    if (size > kMaxTreeSize) {
      fail("expression too large: more than " + std::to_string(kMaxTreeSize) + " operations when written out");
    }
    if (node.depth > kMaxDepth) {
      fail("expression nested deeper than " + std::to_string(kMaxDepth) + " operations");
    }
    auto id = static_cast<NodeId>(nodes.size());
    nodes.push_back(std::move(node));
    tree_size.push_back(size);
    index.emplace(std::move(key), id);
    return id;
  }

  NodeId constant(double value) {
    if (!std::isfinite(value)) fail("a constant must be finite, not " + format_number(value));
    Node n;
    n.op = Op::constant;
    n.value = value;
    n.weak = true;
    return intern(std::move(n));
  }

  // The dtype two float operands of `op` give: equal ones, or a weak one takes the other's.
  std::pair<Dtype, bool> unify(Op op, const Node& a, const Node& b) const {
    if (!is_float(a.dtype) || !is_float(b.dtype)) {
      fail(quoted(op) + " takes numbers, not a boolean (a comparison's result): use where(cond, a, b), or a cast such as fp32(a < b)");
    }
    if (a.weak && b.weak) return {Dtype::f32, true};
    if (a.weak) return {b.dtype, false};
    if (b.weak) return {a.dtype, false};
    if (a.dtype != b.dtype) {
      std::string example = std::string("fp32(a) ") + info(op).spelling + " fp32(b)";
      if (op == Op::where) {
        example = "where(cond, fp32(a), fp32(b))";
      } else if (!is_infix(op)) {
        example = std::string(info(op).spelling) + "(fp32(a), fp32(b))";
      }
      fail(quoted(op) + " mixes " + to_string(a.dtype) + " and " + to_string(b.dtype) +
           ": dtypes are not promoted, cast explicitly, e.g. " + example);
    }
    return {a.dtype, false};
  }

  NodeId apply(Op op, const std::vector<NodeId>& args, Dtype cast_to) {
    const OpClass cls = info(op).cls;
    std::size_t arity = 1;
    if (cls == OpClass::leaf) fail(std::string("'") + to_string(op) + "' is a leaf: use input() or constant()");
    if (cls == OpClass::binary || cls == OpClass::compare) arity = 2;
    if (cls == OpClass::select) arity = 3;
    if (args.size() != arity) {
      fail(quoted(op, cast_to) + " takes " + std::to_string(arity) + " argument" + (arity == 1 ? "" : "s") + ", not " +
           std::to_string(args.size()));
    }
    Node n;
    n.op = op;
    n.args = args;
    for (NodeId a : args) {
      const Node& arg = at(a);
      n.depth = std::max(n.depth, arg.depth + 1);
      n.reduction_depth = std::max(n.reduction_depth, arg.reduction_depth);
      n.shape = join(n.shape, arg.shape);
    }
    const Node& first = at(args[0]);
    switch (cls) {
      case OpClass::unary:
        if (!is_float(first.dtype)) {
          fail(quoted(op) + " takes a number, not a boolean (a comparison's result): use where(cond, a, b), or a cast such as fp32(a < b)");
        }
        // -2 is the literal -2, as the parser reads it, so that text and builder agree.
        if (op == Op::neg && first.op == Op::constant) return constant(-first.value);
        n.dtype = first.dtype;
        n.weak = first.weak;
        break;
      case OpClass::binary:
        std::tie(n.dtype, n.weak) = unify(op, first, at(args[1]));
        break;
      case OpClass::compare:
        unify(op, first, at(args[1]));
        n.dtype = Dtype::boolean;
        break;
      case OpClass::select:
        if (first.dtype != Dtype::boolean) {
          fail(std::string("where's first argument must be a comparison (bool), not ") + to_string(first.dtype));
        }
        std::tie(n.dtype, n.weak) = unify(op, at(args[1]), at(args[2]));
        break;
      case OpClass::cast:
        if (!is_float(cast_to)) fail("a cast goes to fp32, fp16 or bf16, not bool");
        n.dtype = cast_to;
        break;
      case OpClass::reduce:
        if (!is_float(first.dtype)) {
          fail(quoted(op) + " takes numbers, not a boolean (a comparison's result): reduce where(cond, 1, 0) or a cast");
        }
        if (first.shape != ShapeClass::full) {
          fail(quoted(op) + " reduces a [rows, cols] value along the row, but its argument is " + describe(first.shape) +
               ": nothing to broadcast back over the row");
        }
        n.dtype = first.dtype;
        n.weak = first.weak;
        n.shape = ShapeClass::per_row;
        n.reduction_depth += 1;
        break;
      case OpClass::leaf: break;
    }
    return intern(std::move(n));
  }
};

struct Access {
  static Expr make(Graph* graph, NodeId id) { return Expr(graph, id); }
  static Graph* graph(const Expr& e) { return e.graph_; }

  static Graph* common_graph(std::initializer_list<const Expr*> exprs) {
    Graph* graph = nullptr;
    for (const Expr* e : exprs) {
      if (!e->graph_) fail("an empty Expr handle: it was default-constructed, not made by a Builder");
      if (graph && e->graph_ != graph) fail("the operands come from two different Builders");
      graph = e->graph_;
    }
    return graph;
  }

  static Expr apply(Op op, std::initializer_list<const Expr*> exprs, Dtype cast_to = Dtype::f32) {
    Graph* graph = common_graph(exprs);
    std::vector<NodeId> args;
    for (const Expr* e : exprs) args.push_back(e->id_);
    return Expr(graph, graph->apply(op, args, cast_to));
  }

  static Expr constant_like(const Expr& like, double value) {
    Graph* graph = common_graph({&like});
    return Expr(graph, graph->constant(value));
  }
};

}  // namespace detail

using detail::Access;

Dtype Expr::dtype() const { return Access::common_graph({this})->at(id_).dtype; }
ShapeClass Expr::shape() const { return Access::common_graph({this})->at(id_).shape; }
Op Expr::op() const { return Access::common_graph({this})->at(id_).op; }

Builder::Builder() : graph_(std::make_unique<detail::Graph>()) {}
Builder::~Builder() = default;
Builder::Builder(Builder&&) noexcept = default;
Builder& Builder::operator=(Builder&&) noexcept = default;

detail::Graph& Builder::graph() const {
  if (!graph_) fail("a moved-from Builder");
  return *graph_;
}

Expr Builder::input(const std::string& name, Dtype dtype, InputKind kind) {
  graph();
  check_name(name, "input");
  if (!is_float(dtype)) fail("input '" + name + "': an input is fp32, fp16 or bf16, not bool");
  for (const Input& in : graph_->inputs) {
    if (in.name == name) fail("input '" + name + "' is declared twice");
  }
  graph_->inputs.push_back({name, dtype, kind});
  Node n;
  n.op = Op::input;
  n.dtype = dtype;
  n.input = static_cast<int>(graph_->inputs.size() - 1);
  n.shape = kind == InputKind::row ? ShapeClass::row_vector : ShapeClass::full;
  return Access::make(graph_.get(), graph_->intern(std::move(n)));
}

Expr Builder::constant(double value) { return Access::make(graph_.get(), graph().constant(value)); }

void Builder::output(const std::string& name, const Expr& value) {
  graph();
  check_name(name, "output");
  for (const Input& in : graph_->inputs) {
    if (in.name == name) fail("output '" + name + "' has the name of an input");
  }
  for (const Output& out : graph_->outputs) {
    if (out.name == name) fail("output '" + name + "' is assigned twice");
  }
  if (Access::common_graph({&value}) != graph_.get()) fail("output '" + name + "' comes from another Builder");
  const Node& node = graph_->at(value.id());
  if (node.dtype == Dtype::boolean) {
    fail("output '" + name + "' is a comparison (bool): store where(cond, 1, 0) or a cast such as fp32(a < b)");
  }
  if (node.shape != ShapeClass::full) {
    fail("output '" + name + "' is " + describe(node.shape) + ", but an output is [rows, cols]: combine it with a full input");
  }
  graph_->outputs.push_back({name, value.id(), node.dtype});
}

Program Builder::build() const {
  if (graph().outputs.empty()) fail("empty program: it has no output (e.g. y = x * 2)");
  Program p;
  p.inputs_ = graph_->inputs;
  std::vector<NodeId> renumbered(graph_->nodes.size(), -1);
  // Post-order from the outputs, so the numbering depends only on the expressions. Recursion is
  // bounded by kMaxDepth.
  auto visit = [&](auto&& self, NodeId id) -> NodeId {
    auto& slot = renumbered[static_cast<std::size_t>(id)];
    if (slot >= 0) return slot;
    Node n = graph_->at(id);
    for (NodeId& a : n.args) a = self(self, a);
    slot = static_cast<NodeId>(p.nodes_.size());
    p.nodes_.push_back(std::move(n));
    return slot;
  };
  for (const Output& out : graph_->outputs) p.outputs_.push_back({out.name, visit(visit, out.node), out.dtype});
  for (std::size_t i = 0; i < p.nodes_.size(); ++i) {
    const Node& n = p.nodes_[i];
    if (is_reduction(n.op)) {
      p.reductions_.push_back(static_cast<NodeId>(i));
      p.passes_ = std::max(p.passes_, n.reduction_depth);
    }
  }
  std::sort(p.reductions_.begin(), p.reductions_.end(), [&](NodeId a, NodeId b) {
    const int da = p.nodes_[static_cast<std::size_t>(a)].reduction_depth;
    const int db = p.nodes_[static_cast<std::size_t>(b)].reduction_depth;
    return da != db ? da < db : a < b;
  });
  return p;
}

namespace {

void write(const Program& p, NodeId id, std::string& out) {
  const Node& n = p.node(id);
  auto arg = [&](std::size_t i) { write(p, n.args[i], out); };
  switch (info(n.op).cls) {
    case OpClass::leaf:
      if (n.op == Op::input) {
        out += p.inputs()[static_cast<std::size_t>(n.input)].name;
      } else if (std::signbit(n.value)) {
        out += "(-" + format_number(-n.value) + ")";
      } else {
        out += format_number(n.value);
      }
      return;
    case OpClass::unary:
      if (n.op == Op::neg) {
        out += "(-";
        arg(0);
        out += ")";
        return;
      }
      break;
    case OpClass::binary:
    case OpClass::compare:
      if (is_infix(n.op)) {
        out += "(";
        arg(0);
        out += std::string(" ") + info(n.op).spelling + " ";
        arg(1);
        out += ")";
        return;
      }
      break;
    default: break;
  }
  out += n.op == Op::cast ? to_string(n.dtype) : info(n.op).spelling;
  out += "(";
  for (std::size_t i = 0; i < n.args.size(); ++i) {
    if (i) out += ", ";
    arg(i);
  }
  out += ")";
}

}  // namespace

std::string to_canonical(const Program& program) {
  std::string out;
  const char* sep = "";
  for (const Input& in : program.inputs()) {
    out += sep + in.name + ": " + to_string(in.dtype) + (in.kind == InputKind::row ? "[cols]" : "[rows, cols]");
    sep = "; ";
  }
  for (const Output& o : program.outputs()) {
    out += sep + o.name + " = ";
    write(program, o.node, out);
    sep = "; ";
  }
  return out;
}

Expr operator+(const Expr& a, const Expr& b) { return Access::apply(Op::add, {&a, &b}); }
Expr operator-(const Expr& a, const Expr& b) { return Access::apply(Op::sub, {&a, &b}); }
Expr operator*(const Expr& a, const Expr& b) { return Access::apply(Op::mul, {&a, &b}); }
Expr operator/(const Expr& a, const Expr& b) { return Access::apply(Op::div, {&a, &b}); }
Expr operator<(const Expr& a, const Expr& b) { return Access::apply(Op::lt, {&a, &b}); }
Expr operator<=(const Expr& a, const Expr& b) { return Access::apply(Op::le, {&a, &b}); }
Expr operator>(const Expr& a, const Expr& b) { return Access::apply(Op::gt, {&a, &b}); }
Expr operator>=(const Expr& a, const Expr& b) { return Access::apply(Op::ge, {&a, &b}); }
Expr eq(const Expr& a, const Expr& b) { return Access::apply(Op::eq, {&a, &b}); }
Expr ne(const Expr& a, const Expr& b) { return Access::apply(Op::ne, {&a, &b}); }
Expr min(const Expr& a, const Expr& b) { return Access::apply(Op::min, {&a, &b}); }
Expr max(const Expr& a, const Expr& b) { return Access::apply(Op::max, {&a, &b}); }

Expr operator+(const Expr& a, double b) { return a + Access::constant_like(a, b); }
Expr operator+(double a, const Expr& b) { return Access::constant_like(b, a) + b; }
Expr operator-(const Expr& a, double b) { return a - Access::constant_like(a, b); }
Expr operator-(double a, const Expr& b) { return Access::constant_like(b, a) - b; }
Expr operator*(const Expr& a, double b) { return a * Access::constant_like(a, b); }
Expr operator*(double a, const Expr& b) { return Access::constant_like(b, a) * b; }
Expr operator/(const Expr& a, double b) { return a / Access::constant_like(a, b); }
Expr operator/(double a, const Expr& b) { return Access::constant_like(b, a) / b; }
Expr operator<(const Expr& a, double b) { return a < Access::constant_like(a, b); }
Expr operator<=(const Expr& a, double b) { return a <= Access::constant_like(a, b); }
Expr operator>(const Expr& a, double b) { return a > Access::constant_like(a, b); }
Expr operator>=(const Expr& a, double b) { return a >= Access::constant_like(a, b); }
Expr eq(const Expr& a, double b) { return eq(a, Access::constant_like(a, b)); }
Expr ne(const Expr& a, double b) { return ne(a, Access::constant_like(a, b)); }
Expr min(const Expr& a, double b) { return min(a, Access::constant_like(a, b)); }
Expr max(const Expr& a, double b) { return max(a, Access::constant_like(a, b)); }
Expr operator-(const Expr& a) { return Access::apply(Op::neg, {&a}); }

Expr abs(const Expr& x) { return Access::apply(Op::abs, {&x}); }
Expr exp(const Expr& x) { return Access::apply(Op::exp, {&x}); }
Expr log(const Expr& x) { return Access::apply(Op::log, {&x}); }
Expr sqrt(const Expr& x) { return Access::apply(Op::sqrt, {&x}); }
Expr rsqrt(const Expr& x) { return Access::apply(Op::rsqrt, {&x}); }
Expr tanh(const Expr& x) { return Access::apply(Op::tanh, {&x}); }
Expr sigmoid(const Expr& x) { return Access::apply(Op::sigmoid, {&x}); }
Expr silu(const Expr& x) { return Access::apply(Op::silu, {&x}); }
Expr relu(const Expr& x) { return Access::apply(Op::relu, {&x}); }
Expr gelu(const Expr& x) { return Access::apply(Op::gelu, {&x}); }
Expr gelu_erf(const Expr& x) { return Access::apply(Op::gelu_erf, {&x}); }

Expr where(const Expr& cond, const Expr& a, const Expr& b) { return Access::apply(Op::where, {&cond, &a, &b}); }
Expr where(const Expr& cond, double a, const Expr& b) { return where(cond, Access::constant_like(cond, a), b); }
Expr where(const Expr& cond, const Expr& a, double b) { return where(cond, a, Access::constant_like(cond, b)); }
Expr where(const Expr& cond, double a, double b) {
  return where(cond, Access::constant_like(cond, a), Access::constant_like(cond, b));
}

Expr cast(const Expr& x, Dtype dtype) { return Access::apply(Op::cast, {&x}, dtype); }
Expr fp32(const Expr& x) { return cast(x, Dtype::f32); }
Expr fp16(const Expr& x) { return cast(x, Dtype::f16); }
Expr bf16(const Expr& x) { return cast(x, Dtype::bf16); }

Expr sum(const Expr& x) { return Access::apply(Op::row_sum, {&x}); }
Expr max(const Expr& x) { return Access::apply(Op::row_max, {&x}); }
Expr min(const Expr& x) { return Access::apply(Op::row_min, {&x}); }
Expr mean(const Expr& x) { return Access::apply(Op::row_mean, {&x}); }

}  // namespace gmjit::codegen::expr
