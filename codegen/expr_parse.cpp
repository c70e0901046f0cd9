// The text form's lexer and recursive-descent parser (grammar in expr.hpp). It builds through the
// public Builder, so text and C++ programs obey the same type and shape rules; this file adds the
// column to every message.
#include <algorithm>
#include <charconv>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "codegen/expr.hpp"
#include "gmjit/error.hpp"

namespace gmjit::codegen::expr {

namespace {

enum class Tok {
  end, newline, semicolon, ident, number, lparen, rparen, comma, colon, assign, lbracket, rbracket,
  plus, minus, star, slash, lt, le, gt, ge, eq, ne,
};

struct Token {
  Tok kind = Tok::end;
  std::size_t pos = 0;
  std::size_t len = 0;
  double number = 0;
};

bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

class Parser {
 public:
  Parser(std::string_view text, const ParseOptions& options) : text_(text), options_(options) {}

  Program run() {
    if (options_.default_dtype == Dtype::boolean) {
      throw Error(ErrorKind::usage, 0, "ParseOptions::default_dtype must be fp32, fp16 or bf16, not bool");
    }
    lex();
    while (peek().kind != Tok::end) {
      const Token t = peek();
      if (t.kind == Tok::newline || t.kind == Tok::semicolon) {
        ++i_;
        continue;
      }
      if (t.kind != Tok::ident) fail_at(t.pos, "expected a declaration (x: bf16) or an output (y = ...), found " + describe(t));
      const Tok after = i_ + 1 < tokens_.size() ? tokens_[i_ + 1].kind : Tok::end;
      if (after == Tok::colon) {
        declaration();
      } else if (after == Tok::assign) {
        output();
      } else {
        fail_at(tokens_[i_ + 1].pos, "expected ':' (a declaration) or '=' (an output) after '" + spelling(t) + "', found " +
                                         describe(tokens_[i_ + 1]));
      }
      const Token sep = peek();
      if (sep.kind != Tok::newline && sep.kind != Tok::semicolon && sep.kind != Tok::end) {
        fail_at(sep.pos, "expected ';' or a new line after the " + std::string(after == Tok::colon ? "declaration" : "output") +
                             ", found " + describe(sep));
      }
    }
    return with_location(0, [&] { return builder_.build(); });
  }

 private:
  // Bounds the recursion: each '(' and call nests one level.
  struct Nest {
    explicit Nest(Parser& p, std::size_t pos) : p_(p) {
      if (++p_.nesting_ > kMaxDepth) p_.fail_at(pos, "nested deeper than " + std::to_string(kMaxDepth) + " levels");
    }
    ~Nest() { --p_.nesting_; }
    Parser& p_;
  };

  std::string location(std::size_t pos) const {
    pos = std::min(pos, text_.size());
    std::size_t line = 1;
    std::size_t line_start = 0;
    for (std::size_t k = 0; k < pos; ++k) {
      if (text_[k] == '\n') {
        ++line;
        line_start = k + 1;
      }
    }
    std::string col = "column " + std::to_string(pos - line_start + 1);
    if (text_.find('\n') == std::string_view::npos) return col;
    return "line " + std::to_string(line) + ", " + col;
  }

  [[noreturn]] void fail_at(std::size_t pos, const std::string& message) const {
    throw Error(ErrorKind::usage, 0, location(pos) + ": " + message);
  }

  // Runs a Builder call, giving its error the column of the token that asked for it.
  template <typename F>
  auto with_location(std::size_t pos, F&& f) -> decltype(f()) {
    try {
      return f();
    } catch (const Error& e) {
      fail_at(pos, e.message());
    }
  }

  std::string spelling(const Token& t) const { return std::string(text_.substr(t.pos, t.len)); }

  std::string describe(const Token& t) const {
    switch (t.kind) {
      case Tok::end: return "the end of the text";
      case Tok::newline: return "a new line";
      case Tok::ident: return "'" + spelling(t) + "'";
      case Tok::number: return "the number " + spelling(t);
      default: return "'" + spelling(t) + "'";
    }
  }

  void lex() {
    std::size_t p = 0;
    const std::size_t n = text_.size();
    auto add = [&](Tok kind, std::size_t len) {
      tokens_.push_back({kind, p, len, 0});
      p += len;
    };
    while (p < n) {
      const char c = text_[p];
      const char next = p + 1 < n ? text_[p + 1] : '\0';
      if (c == ' ' || c == '\t' || c == '\r') {
        ++p;
      } else if (c == '#') {
        while (p < n && text_[p] != '\n') ++p;
      } else if (c == '\n') {
        add(Tok::newline, 1);
      } else if (is_alpha(c)) {
        std::size_t e = p;
        while (e < n && (is_alpha(text_[e]) || is_digit(text_[e]))) ++e;
        add(Tok::ident, e - p);
      } else if (is_digit(c) || (c == '.' && is_digit(next))) {
        number(p);
        p += tokens_.back().len;
      } else {
        switch (c) {
          case ';': add(Tok::semicolon, 1); break;
          case '(': add(Tok::lparen, 1); break;
          case ')': add(Tok::rparen, 1); break;
          case ',': add(Tok::comma, 1); break;
          case ':': add(Tok::colon, 1); break;
          case '[': add(Tok::lbracket, 1); break;
          case ']': add(Tok::rbracket, 1); break;
          case '+': add(Tok::plus, 1); break;
          case '-': add(Tok::minus, 1); break;
          case '*': add(Tok::star, 1); break;
          case '/': add(Tok::slash, 1); break;
          case '<': next == '=' ? add(Tok::le, 2) : add(Tok::lt, 1); break;
          case '>': next == '=' ? add(Tok::ge, 2) : add(Tok::gt, 1); break;
          case '=': next == '=' ? add(Tok::eq, 2) : add(Tok::assign, 1); break;
          case '!':
            if (next != '=') fail_at(p, "unexpected '!' (did you mean '!='?)");
            add(Tok::ne, 2);
            break;
          default: {
            const auto byte = static_cast<unsigned char>(c);
            if (byte >= 0x20 && byte < 0x7f) fail_at(p, std::string("unexpected character '") + c + "'");
            static const char hex[] = "0123456789abcdef";
            fail_at(p, std::string("unexpected byte 0x") + hex[byte >> 4] + hex[byte & 15]);
          }
        }
      }
    }
    tokens_.push_back({Tok::end, n, 0, 0});
  }

  // digits [ '.' digits ] [ ('e' | 'E') [ '+' | '-' ] digits ], or the same starting at '.'.
  void number(std::size_t p) {
    const std::size_t n = text_.size();
    std::size_t e = p;
    while (e < n && is_digit(text_[e])) ++e;
    if (e < n && text_[e] == '.') {
      ++e;
      while (e < n && is_digit(text_[e])) ++e;
    }
    if (e < n && (text_[e] == 'e' || text_[e] == 'E')) {
      std::size_t x = e + 1;
      if (x < n && (text_[x] == '+' || text_[x] == '-')) ++x;
      if (x >= n || !is_digit(text_[x])) fail_at(p, "malformed number '" + std::string(text_.substr(p, x - p)) + "': the exponent has no digits");
      while (x < n && is_digit(text_[x])) ++x;
      e = x;
    }
    if (e < n && (is_alpha(text_[e]) || is_digit(text_[e]) || text_[e] == '.')) {
      std::size_t bad = e;
      while (bad < n && (is_alpha(text_[bad]) || is_digit(text_[bad]) || text_[bad] == '.')) ++bad;
      fail_at(p, "malformed number '" + std::string(text_.substr(p, bad - p)) + "'");
    }
    double value = 0;
    const char* first = text_.data() + p;
    const char* last = text_.data() + e;
    auto [ptr, ec] = std::from_chars(first, last, value);
    if (ec == std::errc::result_out_of_range) {
      fail_at(p, "the number " + std::string(text_.substr(p, e - p)) + " is out of range for a double");
    }
    if (ec != std::errc() || ptr != last) fail_at(p, "malformed number '" + std::string(text_.substr(p, e - p)) + "'");
    tokens_.push_back({Tok::number, p, e - p, value});
  }

  const Token& peek() {
    while (nesting_ > 0 && tokens_[i_].kind == Tok::newline) ++i_;
    return tokens_[i_];
  }

  Token take() {
    Token t = peek();
    if (t.kind != Tok::end) ++i_;
    return t;
  }

  Token expect(Tok kind, const char* what) {
    const Token t = peek();
    if (t.kind != kind) fail_at(t.pos, std::string("expected ") + what + ", found " + describe(t));
    return take();
  }

  void declaration() {
    const Token name = take();
    take();  // ':'
    if (seen_output_) fail_at(name.pos, "declarations come before the first output ('" + spelling(name) + "')");
    const Token type = expect(Tok::ident, "a dtype (fp32, fp16, bf16)");
    const Dtype dtype = with_location(type.pos, [&] { return parse_dtype(spelling(type)); });
    InputKind kind = InputKind::full;
    if (peek().kind == Tok::lbracket) {
      Nest nest(*this, peek().pos);
      take();
      const Token first = expect(Tok::ident, "'cols' or 'rows, cols'");
      if (spelling(first) == "rows") {
        expect(Tok::comma, "',' in [rows, cols]");
        const Token second = expect(Tok::ident, "'cols' in [rows, cols]");
        if (spelling(second) != "cols") fail_at(second.pos, "expected 'cols' in [rows, cols], found " + describe(second));
      } else if (spelling(first) == "cols") {
        kind = InputKind::row;
      } else {
        fail_at(first.pos, "expected [cols] (a row vector) or [rows, cols] (a full input), found " + describe(first));
      }
      expect(Tok::rbracket, "']'");
    }
    const std::string n = spelling(name);
    names_.emplace(n, with_location(name.pos, [&] { return builder_.input(n, dtype, kind); }));
  }

  void output() {
    const Token name = take();
    take();  // '='
    seen_output_ = true;
    const std::string n = spelling(name);
    if (names_.count(n)) fail_at(name.pos, "output '" + n + "' has the name of an input");
    const Expr value = expression();
    with_location(name.pos, [&] { builder_.output(n, value); });
    outputs_.insert(n);
  }

  static Op comparison_op(Tok kind) {
    switch (kind) {
      case Tok::lt: return Op::lt;
      case Tok::le: return Op::le;
      case Tok::gt: return Op::gt;
      case Tok::ge: return Op::ge;
      case Tok::eq: return Op::eq;
      case Tok::ne: return Op::ne;
      default: return Op::input;
    }
  }

  Expr expression() {
    Expr left = additive();
    const Op op = comparison_op(peek().kind);
    if (op == Op::input) return left;
    const Token t = take();
    const Expr right = additive();
    if (comparison_op(peek().kind) != Op::input) {
      fail_at(peek().pos, "comparisons do not chain (a < b < c): compare two values at a time");
    }
    return with_location(t.pos, [&] {
      switch (op) {
        case Op::lt: return left < right;
        case Op::le: return left <= right;
        case Op::gt: return left > right;
        case Op::ge: return left >= right;
        case Op::eq: return eq(left, right);
        default: return ne(left, right);
      }
    });
  }

  Expr additive() {
    Expr left = term();
    while (peek().kind == Tok::plus || peek().kind == Tok::minus) {
      const Token t = take();
      const Expr right = term();
      left = with_location(t.pos, [&] { return t.kind == Tok::plus ? left + right : left - right; });
    }
    return left;
  }

  Expr term() {
    Expr left = unary();
    while (peek().kind == Tok::star || peek().kind == Tok::slash) {
      const Token t = take();
      const Expr right = unary();
      left = with_location(t.pos, [&] { return t.kind == Tok::star ? left * right : left / right; });
    }
    return left;
  }

  // A loop, not recursion: a long run of '-' cannot deepen the stack.
  Expr unary() {
    std::vector<std::size_t> minuses;
    while (peek().kind == Tok::minus) {
      minuses.push_back(take().pos);
      if (minuses.size() > static_cast<std::size_t>(kMaxDepth)) fail_at(minuses.back(), "too many unary '-' in a row");
    }
    Expr value = primary();
    for (auto it = minuses.rbegin(); it != minuses.rend(); ++it) {
      value = with_location(*it, [&] { return -value; });
    }
    return value;
  }

  Expr primary() {
    const Token t = peek();
    switch (t.kind) {
      case Tok::number: take(); return with_location(t.pos, [&] { return builder_.constant(t.number); });
      case Tok::lparen: {
        Nest nest(*this, t.pos);
        take();
        Expr value = expression();
        expect(Tok::rparen, "')'");
        return value;
      }
      case Tok::ident: break;
      default: fail_at(t.pos, "expected a number, a name or '(', found " + describe(t));
    }
    take();
    const std::string name = spelling(t);
    if (peek().kind == Tok::lparen) return call(t, name);
    const auto& functions = function_names();
    if (std::binary_search(functions.begin(), functions.end(), name)) {
      fail_at(t.pos, "'" + name + "' is a function: call it as " + name + "(...)");
    }
    if (outputs_.count(name)) fail_at(t.pos, "'" + name + "' is an output: an expression reads only inputs");
    auto found = names_.find(name);
    if (found != names_.end()) return found->second;
    Expr in = with_location(t.pos, [&] { return builder_.input(name, options_.default_dtype); });
    names_.emplace(name, in);
    return in;
  }

  Expr call(const Token& t, const std::string& name) {
    const auto& functions = function_names();
    if (!std::binary_search(functions.begin(), functions.end(), name)) {
      std::string list;
      for (const auto& f : functions) list += (list.empty() ? "" : ", ") + f;
      fail_at(t.pos, "unknown function '" + name + "' (functions: " + list + ")");
    }
    std::vector<Expr> args;
    {
      Nest nest(*this, peek().pos);
      take();  // '('
      if (peek().kind != Tok::rparen) {
        args.push_back(expression());
        while (peek().kind == Tok::comma) {
          take();
          args.push_back(expression());
        }
      }
      expect(Tok::rparen, args.empty() ? "an argument or ')'" : "',' or ')'");
    }
    const std::size_t want = name == "where" ? 3 : (name == "min" || name == "max") && args.size() == 2 ? 2 : 1;
    if (args.size() != want) {
      std::string takes = std::to_string(want) + (want == 1 ? " argument" : " arguments");
      if (name == "min" || name == "max") takes = "1 argument (the row reduction) or 2 (elementwise)";
      fail_at(t.pos, "'" + name + "' takes " + takes + ", not " + std::to_string(args.size()));
    }
    return with_location(t.pos, [&]() -> Expr {
      const Expr& x = args[0];
      if (name == "min") return args.size() == 1 ? min(x) : min(x, args[1]);
      if (name == "max") return args.size() == 1 ? max(x) : max(x, args[1]);
      if (name == "where") return where(x, args[1], args[2]);
      if (name == "fp32") return fp32(x);
      if (name == "fp16") return fp16(x);
      if (name == "bf16") return bf16(x);
      if (name == "sum") return sum(x);
      if (name == "mean") return mean(x);
      if (name == "abs") return abs(x);
      if (name == "exp") return exp(x);
      if (name == "log") return log(x);
      if (name == "sqrt") return sqrt(x);
      if (name == "rsqrt") return rsqrt(x);
      if (name == "tanh") return tanh(x);
      if (name == "sigmoid") return sigmoid(x);
      if (name == "silu") return silu(x);
      if (name == "relu") return relu(x);
      if (name == "gelu") return gelu(x);
      return gelu_erf(x);
    });
  }

  std::string_view text_;
  ParseOptions options_;
  std::vector<Token> tokens_;
  std::size_t i_ = 0;
  int nesting_ = 0;
  bool seen_output_ = false;
  Builder builder_;
  std::map<std::string, Expr> names_;
  std::set<std::string> outputs_;
};

}  // namespace

Program parse(std::string_view text, const ParseOptions& options) { return Parser(text, options).run(); }

}  // namespace gmjit::codegen::expr
