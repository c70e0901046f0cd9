// The facade: the public compile and catalog functions over codegen and templates.
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "codegen/compiler.hpp"
#include "codegen/toolkit.hpp"
#include "gmjit/gmjit.hpp"
#include "lib/output_files.hpp"
#include "core/device.hpp"
#include "templates/registry.hpp"

namespace gmjit {

const char* version() { return GMJIT_VERSION; }

std::vector<KernelInfo> list_kernels() {
  std::vector<KernelInfo> kernels;
  for (const auto& d : templates::catalog()) {
    KernelInfo info;
    info.name = d.name;
    info.summary = d.summary;
    info.header = d.header;
    info.template_hash = templates::template_hash(d.header);
    info.problem_keys = d.problem_keys;
    for (const auto& key : d.data_keys) info.data_keys.push_back({key.name, key.default_value, key.doc});
    for (std::size_t i = 0; i < d.tensor_specs.size(); ++i) {
      const auto& spec = d.tensor_specs[i];
      // Catalog entries live as long as the process, so the descriptor can be held by address.
      const templates::KernelDescriptor* descriptor = &d;
      info.tensors.push_back({spec.name, spec.output, spec.dtype, spec.dtype_flag, spec.flag_dtype, spec.elements,
                              [descriptor, i](const Shape& shape) {
                                const auto problem = templates::normalize_problem(*descriptor, shape, {});
                                return descriptor->tensors(problem.shape).at(i).elements;
                              }});
    }
    info.dtypes = d.dtypes;
    for (const auto& p : d.params) info.params.push_back({p.name, p.values, p.doc});
    info.default_config = d.default_config;
    info.constraints = d.constraints_doc;
    info.user = templates::is_user_kernel(d.name);
    kernels.push_back(std::move(info));
  }
  return kernels;
}

namespace {

nlohmann::json kernel_json(const KernelInfo& k) {
  nlohmann::json params = nlohmann::json::array();
  for (const auto& p : k.params) params.push_back({{"name", p.name}, {"values", p.values}, {"doc", p.doc}});
  nlohmann::json data_keys = nlohmann::json::array();
  for (const auto& d : k.data_keys) data_keys.push_back({{"name", d.name}, {"default", d.default_value}, {"doc", d.doc}});
  nlohmann::json tensors = nlohmann::json::array();
  for (const auto& t : k.tensors) {
    tensors.push_back({{"name", t.name},
                       {"role", t.output ? "output" : "input"},
                       {"dtype", t.dtype.empty() ? nlohmann::json(nullptr) : nlohmann::json(t.dtype)},
                       {"elements", nlohmann::json::parse(t.elements_expression)}});
    if (!t.dtype_flag.empty()) tensors.back()["dtype_flag"] = {{"key", t.dtype_flag}, {"dtype", t.flag_dtype}};
  }
  return {{"name", k.name}, {"summary", k.summary}, {"header", k.header},
          {"template_hash", k.template_hash}, {"problem_keys", k.problem_keys}, {"data_keys", data_keys},
          {"tensors", tensors}, {"dtypes", k.dtypes}, {"params", params},
          {"default_config", k.default_config}, {"constraints", k.constraints}, {"user", k.user}};
}


}  // namespace

std::string list_kernels_json() {
  nlohmann::json kernels = nlohmann::json::array();
  for (const auto& k : list_kernels()) kernels.push_back(kernel_json(k));
  return nlohmann::json{{"kernels", kernels}}.dump(2);
}

std::string describe_kernel_json(const std::string& kernel, const Shape& shape, const std::string& dtype) {
  const std::string name = templates::find_kernel(kernel).name;  // throws Error(usage) naming the kernels
  for (const auto& k : list_kernels()) {
    if (k.name != name) continue;
    nlohmann::json out = kernel_json(k);
    if (shape.empty()) return out.dump(2);
    const Problem problem = validate(kernel, shape, dtype);
    out["problem"] = {{"dtype", problem.dtype}, {"shape", problem.shape}};
    // The descriptor's tensors at the normalized shape: counts, and dtypes a flag may choose.
    const auto tensors = templates::find_kernel(name).tensors(problem.shape);
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      out["tensors"][i]["count"] = tensors[i].elements;
      out["tensors"][i]["resolved_dtype"] = tensors[i].dtype.empty() ? problem.dtype : tensors[i].dtype;
    }
    return out.dump(2);
  }
  throw Error(ErrorKind::usage, 0, "unknown kernel '" + kernel + "'");
}

Problem validate(const std::string& kernel, const Shape& shape, const std::string& dtype) {
  auto normalized = templates::normalize_problem(kernel, shape, dtype);
  return Problem{normalized.kernel->name, std::move(normalized.dtype), std::move(normalized.shape), {}};
}

CompileResult compile(const CompileRequest& request) {
  const auto problem = templates::normalize_problem(request.kernel, request.shape, request.dtype);
  const auto& kernel = *problem.kernel;
  const std::string& dtype = problem.dtype;
  const Config config = templates::resolve_config(kernel, problem.shape, dtype, request.config);
  std::string arch = request.arch;
  if (arch.empty()) {
    detail::Context context(0);
    arch = detail::query_device(0).arch;
  }
  const auto generated = codegen::specialize(kernel, problem.shape, dtype, config);
  const auto [module, hit] = codegen::shared_compiler().compile(generated, arch);
  CompileResult out;
  out.kernel = kernel.name;
  out.dtype = dtype;
  out.arch = arch;
  out.shape = problem.shape;
  out.config = config;
  out.name_expression = generated.name_expression;
  out.lowered_name = module->lowered_name;
  out.file_name = generated.file_name;
  out.source = generated.source;
  out.ptx = module->ptx;
  out.cubin = module->cubin;
  out.log = module->log;
  out.options = module->options;
  out.resources = module->resources;
  out.compile_key = module->compile_key;
  out.template_hash = templates::template_hash(kernel.header);
  out.compile_ms = module->compile_ms;
  out.memory_cache_hit = hit;
  out.description_json = codegen::resources_json(*module);
  return out;
}

std::string resources_json(const CompileResult& r) { return r.description_json; }

CompileOutputs write_compile_outputs(const CompileResult& result, const std::string& directory) {
  const std::string stem = std::filesystem::path(result.file_name).stem().string();
  const std::string resources = resources_json(result);
  return detail::write_outputs(directory, stem,
                               // .cu for a template's translation unit, .expr for an expression's text
                               {{stem + std::filesystem::path(result.file_name).extension().string(), result.source},
                                {stem + ".ptx", result.ptx},
                                {"resources.json", resources},
                                {stem + ".log", result.log}},
                               result.cubin);
}

std::optional<std::string> disassemble(const std::vector<char>& cubin, std::string& why_not) {
  return codegen::disassemble(cubin, why_not);
}

}  // namespace gmjit
