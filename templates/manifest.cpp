#include "templates/manifest.hpp"

#include <fmt/args.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <variant>

#include "gmjit/error.hpp"

namespace gmjit::templates {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& field, const std::string& what) {
  throw Error(ErrorKind::usage, 0, fmt::format("kernel manifest: {}: {}", field, what));
}

std::string index_path(const std::string& field, std::size_t i) { return fmt::format("{}[{}]", field, i); }

enum class Op {
  add, sub, mul, div, mod, ceil_div, min, max, lt, le, gt, ge, eq, ne, logical_and, logical_or, logical_not
};

struct OpInfo {
  const char* name;
  Op op;
  std::size_t min_args;
  std::size_t max_args;
};

constexpr std::size_t kAny = std::numeric_limits<std::size_t>::max();
constexpr OpInfo kOps[] = {
    {"+", Op::add, 2, kAny},    {"-", Op::sub, 1, 2},    {"*", Op::mul, 2, kAny},
    {"/", Op::div, 2, 2},       {"%", Op::mod, 2, 2},    {"ceil_div", Op::ceil_div, 2, 2},
    {"min", Op::min, 2, kAny},  {"max", Op::max, 2, kAny},
    {"<", Op::lt, 2, 2},        {"<=", Op::le, 2, 2},    {">", Op::gt, 2, 2},
    {">=", Op::ge, 2, 2},       {"==", Op::eq, 2, 2},    {"!=", Op::ne, 2, 2},
    {"and", Op::logical_and, 2, kAny}, {"or", Op::logical_or, 2, kAny}, {"not", Op::logical_not, 1, 1},
};

enum class Source { literal, problem, param, elem_bytes, op };

struct Expr {
  Source source = Source::literal;
  std::int64_t value = 0;
  std::string name;
  Op op = Op::add;
  std::vector<Expr> args;
};

// An expression with the manifest path it came from, which every evaluation error names.
struct Field {
  std::string path;
  Expr expr;
};

// The names a field may use: exactly what its descriptor function receives. Tensors, scalars and
// the reference see the shape alone; constraints have no dtype.
struct Scope {
  const std::vector<std::string>* problem_keys = nullptr;
  const std::vector<std::string>* params = nullptr;
  bool elem_bytes = false;
};

struct Values {
  const Shape* shape = nullptr;
  const Config* config = nullptr;
  std::int64_t elem_bytes = 0;
};

bool contains(const std::vector<std::string>* names, const std::string& name) {
  return names != nullptr && std::find(names->begin(), names->end(), name) != names->end();
}

Expr parse_expr(const json& j, const std::string& field, const Scope& scope) {
  Expr e;
  if (j.is_number_integer()) {
    if (j.is_number_unsigned() && j.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)) {
      fail(field, fmt::format("{} does not fit a 64-bit signed integer", j.dump()));
    }
    e.value = j.get<std::int64_t>();
    return e;
  }
  if (j.is_string()) {
    e.name = j.get<std::string>();
    if (contains(scope.problem_keys, e.name)) {
      e.source = Source::problem;
    } else if (contains(scope.params, e.name)) {
      e.source = Source::param;
    } else if (scope.elem_bytes && e.name == "elem_bytes") {
      e.source = Source::elem_bytes;
    } else {
      std::vector<std::string> known;
      if (scope.problem_keys != nullptr) {
        known.insert(known.end(), scope.problem_keys->begin(), scope.problem_keys->end());
      }
      if (scope.params != nullptr) known.insert(known.end(), scope.params->begin(), scope.params->end());
      if (scope.elem_bytes) known.push_back("elem_bytes");
      fail(field, fmt::format("unknown name '{}' (this field may use: {})", e.name,
                              known.empty() ? "integers only" : fmt::format("{}", fmt::join(known, ", "))));
    }
    return e;
  }
  if (j.is_array() && !j.empty() && j[0].is_string()) {
    const std::string name = j[0].get<std::string>();
    const auto info = std::find_if(std::begin(kOps), std::end(kOps), [&](const OpInfo& o) { return name == o.name; });
    if (info == std::end(kOps)) {
      std::vector<std::string> names;
      for (const auto& o : kOps) names.emplace_back(o.name);
      fail(index_path(field, 0), fmt::format("unknown operation '{}' (known: {})", name, fmt::join(names, " ")));
    }
    const std::size_t count = j.size() - 1;
    if (count < info->min_args || count > info->max_args) {
      const std::string expected = info->max_args == kAny ? fmt::format("at least {}", info->min_args)
                                   : info->min_args == info->max_args
                                       ? fmt::format("{}", info->min_args)
                                       : fmt::format("{} or {}", info->min_args, info->max_args);
      fail(field, fmt::format("'{}' takes {} arguments, got {}", name, expected, count));
    }
    e.source = Source::op;
    e.op = info->op;
    for (std::size_t i = 1; i < j.size(); ++i) e.args.push_back(parse_expr(j[i], index_path(field, i), scope));
    return e;
  }
  fail(field, fmt::format("expected an integer, a name or [operation, arguments...]; got {}", j.dump()));
}

Field parse_field(const json& j, const std::string& path, const Scope& scope) {
  return {path, parse_expr(j, path, scope)};
}

std::string describe_values(const Values& v) {
  std::map<std::string, std::int64_t> all;
  if (v.shape != nullptr) all.insert(v.shape->begin(), v.shape->end());
  if (v.config != nullptr) all.insert(v.config->begin(), v.config->end());
  return format_assignments(all);
}

class Evaluator {
 public:
  Evaluator(const std::string& kernel, const Field& field, const Values& values)
      : kernel_(kernel), field_(field), values_(values) {}

  std::int64_t run() const { return eval(field_.expr); }

 private:
  [[noreturn]] void error(const std::string& what) const {
    throw Error(
        ErrorKind::usage, 0,
        fmt::format("kernel '{}', manifest field {}: {} at {}", kernel_, field_.path, what, describe_values(values_)));
  }

  std::int64_t lookup(const std::map<std::string, std::int64_t>* values, const std::string& name) const {
    if (values != nullptr) {
      if (const auto it = values->find(name); it != values->end()) return it->second;
    }
    error(fmt::format("no value for '{}'", name));
  }

  template <typename Builtin>
  std::int64_t checked(Builtin builtin, std::int64_t x, std::int64_t y) const {
    std::int64_t result = 0;
    if (builtin(x, y, &result)) error("64-bit integer overflow");
    return result;
  }
  static bool add(std::int64_t x, std::int64_t y, std::int64_t* r) { return __builtin_add_overflow(x, y, r); }
  static bool sub(std::int64_t x, std::int64_t y, std::int64_t* r) { return __builtin_sub_overflow(x, y, r); }
  static bool mul(std::int64_t x, std::int64_t y, std::int64_t* r) { return __builtin_mul_overflow(x, y, r); }

  std::int64_t eval(const Expr& e) const {
    switch (e.source) {
      case Source::literal: return e.value;
      case Source::problem: return lookup(values_.shape, e.name);
      case Source::param: return lookup(values_.config, e.name);
      case Source::elem_bytes: return values_.elem_bytes;
      case Source::op: return apply(e);
    }
    return 0;
  }

  std::int64_t apply(const Expr& e) const {
    const auto& a = e.args;
    std::int64_t r = 0;
    switch (e.op) {
      case Op::add:
        r = eval(a[0]);
        for (std::size_t i = 1; i < a.size(); ++i) r = checked(add, r, eval(a[i]));
        return r;
      case Op::mul:
        r = eval(a[0]);
        for (std::size_t i = 1; i < a.size(); ++i) r = checked(mul, r, eval(a[i]));
        return r;
      case Op::sub:
        if (a.size() == 1) return checked(sub, 0, eval(a[0]));
        return checked(sub, eval(a[0]), eval(a[1]));
      case Op::div:
      case Op::mod:
      case Op::ceil_div: {
        const std::int64_t x = eval(a[0]), y = eval(a[1]);
        if (y == 0) error("division by zero");
        if (x == INT64_MIN && y == -1) error("64-bit integer overflow");
        if (e.op == Op::div) return x / y;
        if (e.op == Op::mod) return x % y;
        // Rounds toward +infinity for every sign, unlike (x + y - 1) / y.
        return x / y + ((x % y != 0 && (x < 0) == (y < 0)) ? 1 : 0);
      }
      case Op::min:
      case Op::max:
        r = eval(a[0]);
        for (std::size_t i = 1; i < a.size(); ++i) {
          r = e.op == Op::min ? std::min(r, eval(a[i])) : std::max(r, eval(a[i]));
        }
        return r;
      case Op::lt: return eval(a[0]) < eval(a[1]);
      case Op::le: return eval(a[0]) <= eval(a[1]);
      case Op::gt: return eval(a[0]) > eval(a[1]);
      case Op::ge: return eval(a[0]) >= eval(a[1]);
      case Op::eq: return eval(a[0]) == eval(a[1]);
      case Op::ne: return eval(a[0]) != eval(a[1]);
      // Short-circuit, so a rule can guard a division: ["and", ["!=", "b", 0], ["==", ["%", "n", "b"], 0]].
      case Op::logical_and:
        for (const auto& arg : a) {
          if (eval(arg) == 0) return 0;
        }
        return 1;
      case Op::logical_or:
        for (const auto& arg : a) {
          if (eval(arg) != 0) return 1;
        }
        return 0;
      case Op::logical_not: return eval(a[0]) == 0;
    }
    return 0;
  }

  const std::string& kernel_;
  const Field& field_;
  const Values& values_;
};

enum class ScalarType { i32, i64, f32 };

struct ScalarSpec {
  std::string name;
  ScalarType type = ScalarType::i64;
  Field value;
};

struct Dims {
  std::vector<Field> grid;
  std::vector<Field> block;
  std::optional<Field> shared_bytes;
};

// Everything the descriptor's functions evaluate, shared by all of them.
struct Manifest {
  std::string name;
  std::vector<std::string> problem_keys;
  std::vector<std::string> params;
  std::string name_format;
  std::vector<std::pair<Field, std::string>> constraints;  // rule, message
  Dims geometry;
  std::vector<ScalarSpec> scalars;
  std::string reference_format;
  Dims reference_geometry;
  std::map<std::string, double> tolerance;

  std::int64_t eval(const Field& f, const Shape& shape, const Config* config, std::int64_t elem_bytes) const {
    Values values{&shape, config, elem_bytes};
    return Evaluator(name, f, values).run();
  }

  std::int64_t bounded(const Field& f, const Shape& shape, const Config* config, std::int64_t elem_bytes,
                       std::int64_t least, std::int64_t most) const {
    const std::int64_t v = eval(f, shape, config, elem_bytes);
    if (v < least || v > most) {
      Values values{&shape, config, elem_bytes};
      throw Error(ErrorKind::usage, 0,
                  fmt::format("kernel '{}', manifest field {}: {} is outside [{}, {}] at {}", name, f.path, v, least,
                              most, describe_values(values)));
    }
    return v;
  }

  unsigned dimension(const Field& f, const Shape& shape, const Config* config, std::int64_t elem_bytes,
                     std::int64_t least) const {
    return static_cast<unsigned>(bounded(f, shape, config, elem_bytes, least, std::numeric_limits<unsigned>::max()));
  }

  LaunchGeometry launch(const Dims& dims, const Shape& shape, const Config* config, std::int64_t elem_bytes) const {
    LaunchGeometry g;
    for (std::size_t i = 0; i < dims.grid.size(); ++i) {
      g.grid[i] = dimension(dims.grid[i], shape, config, elem_bytes, 1);
    }
    for (std::size_t i = 0; i < dims.block.size(); ++i) {
      g.block[i] = dimension(dims.block[i], shape, config, elem_bytes, 1);
    }
    if (dims.shared_bytes) g.dynamic_shared_bytes = dimension(*dims.shared_bytes, shape, config, elem_bytes, 0);
    return g;
  }
};

void only_fields(const json& object, const std::string& path, std::initializer_list<const char*> known) {
  for (const auto& item : object.items()) {
    if (std::none_of(known.begin(), known.end(), [&](const char* k) { return item.key() == k; })) {
      std::vector<std::string> names(known.begin(), known.end());
      fail(path.empty() ? item.key() : path + "." + item.key(),
           fmt::format("unknown field (known: {})", fmt::join(names, ", ")));
    }
  }
}

std::string join_path(const std::string& path, const char* key) { return path.empty() ? key : path + "." + key; }

const json& require(const json& object, const std::string& path, const char* key) {
  if (!object.contains(key)) fail(join_path(path, key), "missing");
  return object.at(key);
}

const json& require_object(const json& j, const std::string& path) {
  if (!j.is_object()) fail(path, fmt::format("expected an object, got {}", j.dump()));
  return j;
}

const json& require_array(const json& j, const std::string& path) {
  if (!j.is_array()) fail(path, fmt::format("expected an array, got {}", j.dump()));
  return j;
}

// Calls each(element, its path) for every element of the array j at `path`, each an object
// with no field outside `known`.
template <typename Each>
void for_each_object(const json& j, const std::string& path, std::initializer_list<const char*> known, Each each) {
  const json& array = require_array(j, path);
  for (std::size_t i = 0; i < array.size(); ++i) {
    const std::string at = index_path(path, i);
    only_fields(require_object(array[i], at), at, known);
    each(array[i], at);
  }
}

std::string require_string(const json& j, const std::string& path) {
  if (!j.is_string()) fail(path, fmt::format("expected a string, got {}", j.dump()));
  return j.get<std::string>();
}

bool is_identifier(const std::string& s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

std::string require_identifier(const json& j, const std::string& path) {
  std::string s = require_string(j, path);
  if (!is_identifier(s)) fail(path, fmt::format("'{}' is not an identifier ([A-Za-z_][A-Za-z0-9_]*)", s));
  return s;
}

std::int64_t require_integer(const json& j, const std::string& path) {
  if (!j.is_number_integer() ||
      (j.is_number_unsigned() && j.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))) {
    fail(path, fmt::format("expected a 64-bit integer, got {}", j.dump()));
  }
  return j.get<std::int64_t>();
}

// Problem keys and parameters share one namespace in expressions and name expressions, beside
// the names those reserve.
std::string claim_name(const json& j, const std::string& path, std::set<std::string>& taken) {
  std::string name = require_identifier(j, path);
  if (name == "T" || name == "dtype" || name == "elem_bytes") fail(path, fmt::format("'{}' is reserved", name));
  if (!taken.insert(name).second) fail(path, fmt::format("'{}' is already a problem key or parameter", name));
  return name;
}

std::vector<Field> parse_dims(const json& j, const std::string& path, const Scope& scope) {
  if (!j.is_array() || j.empty() || j.size() > 3) {
    fail(path, fmt::format("expected [x], [x, y] or [x, y, z] (missing ones are 1), got {}", j.dump()));
  }
  std::vector<Field> dims;
  for (std::size_t i = 0; i < j.size(); ++i) dims.push_back(parse_field(j[i], index_path(path, i), scope));
  return dims;
}

// Named placeholders only: fmt also lets {} and {0} reach named arguments by position, which
// would silently depend on the order arguments are pushed.
using NamedArgs = std::vector<std::pair<std::string, std::variant<std::string, std::int64_t>>>;

std::string format_named(const std::string& format, const NamedArgs& args, bool reversed = false) {
  fmt::dynamic_format_arg_store<fmt::format_context> store;
  auto push = [&](const auto& arg) {
    std::visit([&](const auto& value) { store.push_back(fmt::arg(arg.first.c_str(), value)); }, arg.second);
  };
  if (reversed) {
    std::for_each(args.rbegin(), args.rend(), push);
  } else {
    std::for_each(args.begin(), args.end(), push);
  }
  return fmt::vformat(format, store);
}

void check_format(const std::string& format, const NamedArgs& sample, const std::string& path) {
  if (format.empty()) fail(path, "empty");
  std::vector<std::string> names;
  for (const auto& arg : sample) names.push_back("{" + arg.first + "}");
  try {
    if (format_named(format, sample) != format_named(format, sample, true)) {
      fail(path, "placeholders must be named ({} or {0} are not allowed)");
    }
  } catch (const fmt::format_error& e) {
    fail(path, fmt::format("'{}': {} (placeholders here: {})", format, e.what(), fmt::join(names, " ")));
  }
}

Dims parse_geometry(const json& j, const std::string& path, const Scope& scope) {
  require_object(j, path);
  only_fields(j, path, {"grid", "block", "shared_bytes"});
  Dims dims;
  dims.grid = parse_dims(require(j, path, "grid"), path + ".grid", scope);
  dims.block = parse_dims(require(j, path, "block"), path + ".block", scope);
  if (j.contains("shared_bytes")) dims.shared_bytes = parse_field(j["shared_bytes"], path + ".shared_bytes", scope);
  return dims;
}

}  // namespace

KernelDescriptor parse_manifest(const std::string& manifest_json, const std::string& header_source) {
  json root;
  try {
    root = json::parse(manifest_json);
  } catch (const json::parse_error& e) {
    throw Error(ErrorKind::usage, 0, fmt::format("kernel manifest: not valid JSON: {}", e.what()));
  }
  if (!root.is_object()) fail("(top level)", "expected an object");
  only_fields(root, "",
              {"name", "summary", "header", "header_file", "problem_keys", "dtypes", "params", "default_config",
               "constraints", "name_expression", "geometry", "tensors", "scalars", "reference", "tolerance"});

  auto m = std::make_shared<Manifest>();
  KernelDescriptor d;
  d.manifest_json = manifest_json;
  d.header_source = header_source;
  d.name = m->name = require_identifier(require(root, "", "name"), "name");
  if (root.contains("summary")) d.summary = require_string(root["summary"], "summary");

  d.header = require_string(require(root, "", "header"), "header");
  if (d.header.empty() || d.header.front() == '/' || d.header.rfind("gmjit/", 0) == 0 ||
      d.header.find_first_of("\"<> \t\n\\") != std::string::npos) {
    fail("header", fmt::format("'{}' is not a usable include name (relative, no quotes, spaces or backslashes; "
                               "gmjit/ is reserved for the built-in templates)",
                               d.header));
  }
  if (header_source.empty()) fail("header", "the .cuh source is empty");
  if (root.contains("header_file")) require_string(root["header_file"], "header_file");

  std::set<std::string> taken;
  const json& keys = require_array(require(root, "", "problem_keys"), "problem_keys");
  if (keys.empty()) fail("problem_keys", "a kernel needs at least one problem key");
  for (std::size_t i = 0; i < keys.size(); ++i) {
    m->problem_keys.push_back(claim_name(keys[i], index_path("problem_keys", i), taken));
  }
  d.problem_keys = m->problem_keys;

  const json& dtypes = require_array(require(root, "", "dtypes"), "dtypes");
  if (dtypes.empty()) fail("dtypes", "a kernel needs at least one dtype");
  for (std::size_t i = 0; i < dtypes.size(); ++i) {
    const std::string at = index_path("dtypes", i);
    const std::string name = require_string(dtypes[i], at);
    try {
      dtype_info(name);
    } catch (const Error& e) {
      fail(at, e.message());
    }
    if (std::find(d.dtypes.begin(), d.dtypes.end(), name) != d.dtypes.end()) fail(at, "'" + name + "' repeats");
    d.dtypes.push_back(name);
  }

  if (root.contains("params")) {
    for_each_object(root["params"], "params", {"name", "values", "doc"}, [&](const json& item, const auto& at) {
      ParamDomain p;
      p.name = claim_name(require(item, at, "name"), at + ".name", taken);
      const json& values = require_array(require(item, at, "values"), at + ".values");
      if (values.empty()) fail(at + ".values", "a parameter needs at least one value");
      for (std::size_t v = 0; v < values.size(); ++v) {
        const std::int64_t value = require_integer(values[v], index_path(at + ".values", v));
        if (std::find(p.values.begin(), p.values.end(), value) != p.values.end()) {
          fail(index_path(at + ".values", v), fmt::format("{} repeats", value));
        }
        p.values.push_back(value);
      }
      if (item.contains("doc")) p.doc = require_string(item["doc"], at + ".doc");
      m->params.push_back(p.name);
      d.params.push_back(std::move(p));
    });
  }

  for (const auto& p : d.params) d.default_config[p.name] = p.values.front();
  if (root.contains("default_config")) {
    for (const auto& item : require_object(root["default_config"], "default_config").items()) {
      const std::string at = "default_config." + item.key();
      const auto param =
          std::find_if(d.params.begin(), d.params.end(), [&](const auto& p) { return p.name == item.key(); });
      if (param == d.params.end()) fail(at, "not a parameter");
      const std::int64_t value = require_integer(item.value(), at);
      if (std::find(param->values.begin(), param->values.end(), value) == param->values.end()) {
        fail(at, fmt::format("{} is outside the domain ({})", value, fmt::join(param->values, ", ")));
      }
      d.default_config[item.key()] = value;
    }
  }

  const Scope shape_scope{&m->problem_keys, nullptr, false};
  const Scope config_scope{&m->problem_keys, &m->params, false};
  const Scope launch_scope{&m->problem_keys, &m->params, true};

  std::vector<std::string> messages;
  if (root.contains("constraints")) {
    for_each_object(root["constraints"], "constraints", {"rule", "message"}, [&](const json& item, const auto& at) {
      Field rule = parse_field(require(item, at, "rule"), at + ".rule", config_scope);
      std::string message = require_string(require(item, at, "message"), at + ".message");
      if (message.empty()) fail(at + ".message", "empty");
      messages.push_back(message);
      m->constraints.emplace_back(std::move(rule), std::move(message));
    });
  }
  d.constraints_doc = messages.empty() ? "none beyond the domains" : fmt::format("{}", fmt::join(messages, "; "));

  m->name_format = require_string(require(root, "", "name_expression"), "name_expression");
  {
    NamedArgs sample{{"T", std::string("float")}, {"dtype", std::string("fp32")}};
    std::int64_t distinct = 1000;
    for (const auto& name : m->params) sample.emplace_back(name, ++distinct);
    for (const auto& name : m->problem_keys) sample.emplace_back(name, ++distinct);
    check_format(m->name_format, sample, "name_expression");
  }

  m->geometry = parse_geometry(require(root, "", "geometry"), "geometry", launch_scope);

  std::set<std::string> arg_names;
  std::vector<TensorSpec> tensor_specs;
  const json& tensors = require(root, "", "tensors");
  for_each_object(tensors, "tensors", {"name", "elements", "output"}, [&](const json& item, const auto& at) {
    TensorSpec t;
    t.name = require_identifier(require(item, at, "name"), at + ".name");
    if (!arg_names.insert(t.name).second) fail(at + ".name", "'" + t.name + "' repeats");
    parse_field(require(item, at, "elements"), at + ".elements", shape_scope);
    t.elements = item["elements"].dump();
    const json& output = require(item, at, "output");
    if (!output.is_boolean()) fail(at + ".output", fmt::format("expected true or false, got {}", output.dump()));
    t.output = output.get<bool>();
    if (!t.output && !tensor_specs.empty() && tensor_specs.back().output) {
      fail(at, "inputs come before outputs (kernel argument order)");
    }
    tensor_specs.push_back(std::move(t));
  });
  if (tensor_specs.empty() || !tensor_specs.back().output) fail("tensors", "a kernel needs at least one output tensor");
  describe_tensors(d, std::move(tensor_specs));

  if (root.contains("scalars")) {
    for_each_object(root["scalars"], "scalars", {"name", "type", "value"}, [&](const json& item, const auto& at) {
      ScalarSpec s;
      s.name = require_identifier(require(item, at, "name"), at + ".name");
      if (!arg_names.insert(s.name).second) fail(at + ".name", "'" + s.name + "' repeats");
      const std::string type = require_string(require(item, at, "type"), at + ".type");
      if (type == "i32") {
        s.type = ScalarType::i32;
      } else if (type == "i64") {
        s.type = ScalarType::i64;
      } else if (type == "f32") {
        s.type = ScalarType::f32;
      } else {
        fail(at + ".type", fmt::format("'{}' is not i32, i64 or f32", type));
      }
      s.value = parse_field(require(item, at, "value"), at + ".value", shape_scope);
      m->scalars.push_back(std::move(s));
    });
  }

  if (root.contains("reference")) {
    const json& reference = require_object(root["reference"], "reference");
    only_fields(reference, "reference", {"name_expression", "grid", "block"});
    m->reference_format =
        require_string(require(reference, "reference", "name_expression"), "reference.name_expression");
    check_format(m->reference_format, {{"T", std::string("float")}, {"dtype", std::string("fp32")}},
                 "reference.name_expression");
    m->reference_geometry.grid = parse_dims(require(reference, "reference", "grid"), "reference.grid", shape_scope);
    m->reference_geometry.block = parse_dims(require(reference, "reference", "block"), "reference.block", shape_scope);
  }

  for (const auto& item : require_object(require(root, "", "tolerance"), "tolerance").items()) {
    const std::string at = "tolerance." + item.key();
    if (std::find(d.dtypes.begin(), d.dtypes.end(), item.key()) == d.dtypes.end()) fail(at, "not one of dtypes");
    if (!item.value().is_number() || !std::isfinite(item.value().get<double>()) || item.value().get<double>() <= 0) {
      fail(at, fmt::format("expected a positive relative L2 error, got {}", item.value().dump()));
    }
    m->tolerance[item.key()] = item.value().get<double>();
  }
  for (const auto& dtype : d.dtypes) {
    if (m->tolerance.count(dtype) == 0) fail("tolerance." + dtype, "missing");
  }

  d.violation = [m](const Config& c, const Shape& s) -> std::string {
    for (const auto& [rule, message] : m->constraints) {
      try {
        if (m->eval(rule, s, &c, 0) == 0) return message;
      } catch (const Error& e) {
        return e.message();  // a rule that cannot be evaluated (division by zero) rejects the config
      }
    }
    return {};
  };
  d.name_expression = [m](const Config& c, const Shape& s, const DtypeInfo& t) {
    NamedArgs args{{"T", t.cpp_type}, {"dtype", t.name}};
    for (const auto& [name, value] : c) args.emplace_back(name, value);
    for (const auto& [name, value] : s) args.emplace_back(name, value);
    try {
      return format_named(m->name_format, args);
    } catch (const fmt::format_error& e) {
      throw Error(ErrorKind::usage, 0,
                  fmt::format("kernel '{}', manifest field name_expression: {}", m->name, e.what()));
    }
  };
  d.geometry = [m](const Config& c, const Shape& s, const DtypeInfo& t) {
    return m->launch(m->geometry, s, &c, t.bytes);
  };
  d.add_scalars = [m](detail::KernelArgs& args, const Shape& s) {
    for (const auto& scalar : m->scalars) {
      const std::int64_t v = m->eval(scalar.value, s, nullptr, 0);
      switch (scalar.type) {
        case ScalarType::i32:
          if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max()) {
            throw Error(ErrorKind::usage, 0,
                        fmt::format("kernel '{}', manifest field {}: {} does not fit i32 at {}", m->name,
                                    scalar.value.path, v, format_assignments(s)));
          }
          args.add(static_cast<int>(v));
          break;
        case ScalarType::i64: args.add(static_cast<long long>(v)); break;
        case ScalarType::f32: args.add(static_cast<float>(v)); break;
      }
    }
  };
  if (!m->reference_format.empty()) {
    d.reference_header = d.header;
    d.reference_expression = [m](const DtypeInfo& t, const Shape&) {
      return format_named(m->reference_format, {{"T", t.cpp_type}, {"dtype", t.name}});
    };
    d.reference_geometry = [m](const Shape& s) { return m->launch(m->reference_geometry, s, nullptr, 0); };
  }
  d.tolerance = [m](const DtypeInfo& t, const Shape&) {
    const auto it = m->tolerance.find(t.name);
    if (it == m->tolerance.end()) {
      throw Error(ErrorKind::usage, 0, fmt::format("kernel '{}' has no tolerance for dtype {}", m->name, t.name));
    }
    return it->second;
  };
  // A kernel that declares a looser L2 tolerance than the dtype's element bound accepts errors
  // of that size in every element too; a tighter one keeps the dtype's bound.
  d.element_bound = [tolerance = d.tolerance](const DtypeInfo& t, const Shape& s) {
    const ElementBound base = default_element_bound(t);
    const double declared = tolerance(t, s);
    return ElementBound{std::max(base.atol, declared), std::max(base.rtol, declared)};
  };
  return d;
}

void describe_tensors(KernelDescriptor& kernel, std::vector<TensorSpec> specs) {
  struct Compiled {
    Manifest context;  // only its name and eval(): tensors see the shape alone
    std::vector<Field> elements;
    std::vector<TensorSpec> specs;
  };
  auto compiled = std::make_shared<Compiled>();
  compiled->context.name = kernel.name;
  compiled->context.problem_keys = kernel.problem_keys;
  const Scope scope{&compiled->context.problem_keys, nullptr, false};
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const std::string path = index_path("tensors", i) + ".elements";
    const json expression = json::parse(specs[i].elements, nullptr, false);
    if (expression.is_discarded()) fail(path, fmt::format("'{}' is not JSON", specs[i].elements));
    compiled->elements.push_back(parse_field(expression, path, scope));
    if (!specs[i].dtype.empty()) dtype_info(specs[i].dtype);
    if (!specs[i].dtype_flag.empty()) {
      const bool optional_flag =
          std::find(kernel.flag_keys.begin(), kernel.flag_keys.end(), specs[i].dtype_flag) != kernel.flag_keys.end() &&
          std::any_of(kernel.data_keys.begin(), kernel.data_keys.end(),
                      [&](const DataKey& key) { return key.name == specs[i].dtype_flag; });
      if (!optional_flag) {
        fail(index_path("tensors", i) + ".dtype_flag",
             fmt::format("'{}' is not one of {}'s optional flag keys", specs[i].dtype_flag, kernel.name));
      }
      dtype_info(specs[i].flag_dtype);
    }
  }
  compiled->specs = specs;
  kernel.tensor_specs = std::move(specs);
  kernel.tensors = [compiled](const Shape& s) {
    std::vector<TensorArg> out;
    out.reserve(compiled->specs.size());
    for (std::size_t i = 0; i < compiled->specs.size(); ++i) {
      const TensorSpec& spec = compiled->specs[i];
      out.push_back({spec.name, compiled->context.bounded(compiled->elements[i], s, nullptr, 0, 1, INT64_MAX),
                     spec.output, spec_dtype(spec, s)});
    }
    return out;
  };
}

const KernelDescriptor& register_manifest_kernel(const std::string& manifest_json, const std::string& header_source) {
  return register_user_kernel(parse_manifest(manifest_json, header_source));
}

}  // namespace gmjit::templates
