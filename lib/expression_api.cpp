// The facade over the LLVM code generator: expression text -> checked program -> lowered kernel.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>

#include "codegen/cubin.hpp"
#include "codegen/expr.hpp"
#include "codegen/compiler.hpp"
#include "codegen/expr_kernel.hpp"
#include "codegen/expr_lower.hpp"
#include "codegen/nvptx.hpp"
#include "core/device.hpp"
#include "gmjit/error.hpp"
#include "gmjit/expression.hpp"
#include "lib/output_files.hpp"

namespace gmjit {
namespace {

namespace ex = codegen::expr;

Config complete_config(const Config& partial) {
  Config config = ex::default_config();
  const auto& domains = ex::param_domains();
  for (const auto& [key, value] : partial) {
    const auto param = std::find_if(domains.begin(), domains.end(), [&](const auto& p) { return p.name == key; });
    if (param == domains.end()) {
      throw Error(ErrorKind::usage, 0,
                  fmt::format("'{}={}': expressions have no parameter '{}' (block, items, vector, threads_per_row)",
                              key, value, key));
    }
    if (std::find(param->values.begin(), param->values.end(), value) == param->values.end()) {
      throw Error(ErrorKind::usage, 0,
                  fmt::format("'{}={}': outside the domain of {} ({})", key, value, key, fmt::join(param->values, ", ")));
    }
    config[key] = value;
  }
  return config;
}

std::int64_t dimension(const Shape& shape, const char* key) {
  const auto found = shape.find(key);
  if (found == shape.end()) {
    throw Error(ErrorKind::usage, 0,
                fmt::format("missing problem key '{}' for an expression (keys: rows, cols)", key));
  }
  if (found->second <= 0) {
    throw Error(ErrorKind::usage, 0, fmt::format("'{}={}': sizes must be positive", key, found->second));
  }
  return found->second;
}

}  // namespace

std::vector<ParamInfo> expression_params() {
  std::vector<ParamInfo> out;
  for (const auto& domain : ex::param_domains()) out.push_back({domain.name, domain.values, domain.doc});
  return out;
}

std::string register_expression(const std::string& name, const std::string& expression, const std::string& dtype) {
  return ex::register_kernel(name, expression, ex::parse_dtype(dtype)).name;
}

ExpressionCompileResult compile_expression(const ExpressionRequest& request) {
  const auto started = std::chrono::steady_clock::now();
  ex::ParseOptions options;
  options.default_dtype = ex::parse_dtype(request.dtype);
  const ex::Program program = ex::parse(request.expression, options);
  for (const auto& [key, value] : request.shape) {
    if (key != "rows" && key != "cols") {
      throw Error(ErrorKind::usage, 0,
                  fmt::format("'{}={}': an expression has no problem key '{}' (keys: rows, cols)", key, value, key));
    }
  }
  const std::int64_t rows = dimension(request.shape, "rows");
  const std::int64_t cols = dimension(request.shape, "cols");
  const Shape shape = {{"rows", rows}, {"cols", cols}};
  const Config config = complete_config(request.config);
  // The descriptor a registration of this expression would put in the catalog: its rules, and
  // the compile key the Runtime's binary cache files this configuration under.
  const templates::KernelDescriptor kernel = ex::describe(ex::default_kernel_name(program), program);
  if (const std::string why = kernel.violation(config, shape); !why.empty()) {
    throw Error(ErrorKind::usage, 0, fmt::format("'{}': {}", format_assignments(config), why));
  }
  std::string arch = request.arch;
  if (arch.empty()) {
    detail::Context context(0);
    arch = detail::query_device(0).arch;
  }
  const auto lowered = ex::lower(program, ex::lower_params(config), arch);

  ExpressionCompileResult out;
  out.canonical = kernel.expression;
  out.arch = arch;
  out.shape = shape;
  out.config = config;
  for (const auto& input : program.inputs()) {
    const bool row = input.kind == ex::InputKind::row;
    out.tensors.push_back({input.name, false, ex::to_string(input.dtype), row, row ? cols : rows * cols});
  }
  for (const auto& output : program.outputs()) {
    out.tensors.push_back({output.name, true, ex::to_string(output.dtype), false, rows * cols});
  }
  out.kernel_name = lowered.name;
  out.llvm_ir = lowered.ir;
  out.ptx = lowered.ptx;
  out.cubin = lowered.cubin;
  out.resources = codegen::read_cubin_resources(lowered.cubin, lowered.name);
  out.geometry = lowered.geometry(program, rows, cols);
  out.compile_key = codegen::compile_key(codegen::specialize(kernel, shape, kernel.dtypes.front(), config), arch);
  out.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  return out;
}

std::string expression_json(const ExpressionCompileResult& r) {
  nlohmann::json tensors = nlohmann::json::array();
  for (const auto& t : r.tensors) {
    tensors.push_back({{"name", t.name},
                       {"role", t.output ? "output" : "input"},
                       {"dtype", t.dtype},
                       {"shape", t.row_vector ? nlohmann::json::array({"cols"}) : nlohmann::json::array({"rows", "cols"})},
                       {"count", t.elements}});
  }
  const auto& identity = codegen::nvptx_identity();
  const auto& g = r.geometry;
  return nlohmann::json{
      {"expression", r.canonical},
      {"kernel", r.kernel_name},
      {"arch", r.arch},
      {"shape", r.shape},
      {"config", r.config},
      {"tensors", tensors},
      {"scalars", nlohmann::json::array({"rows", "cols"})},
      {"grid", {g.grid[0], g.grid[1], g.grid[2]}},
      {"block", {g.block[0], g.block[1], g.block[2]}},
      {"registers", r.resources.registers},
      {"shared_bytes", r.resources.shared_bytes},
      {"stack_bytes", r.resources.stack_bytes},
      {"ptx_bytes", r.ptx.size()},
      {"cubin_bytes", r.cubin.size()},
      {"compile_key", r.compile_key},
      {"compile_ms", r.compile_ms},
      {"llvm", identity.llvm_version},
      {"ptx_isa", identity.ptx_isa},
      {"libdevice", identity.libdevice_hash},
      {"nvjitlink", identity.nvjitlink_version}}
      .dump(2);
}

CompileOutputs write_expression_outputs(const ExpressionCompileResult& result, const std::string& directory) {
  const std::string& stem = result.kernel_name;
  const std::string json = expression_json(result);
  return detail::write_outputs(
      directory, stem,
      {{stem + ".ll", result.llvm_ir}, {stem + ".ptx", result.ptx}, {"resources.json", json}}, result.cubin);
}

}  // namespace gmjit
