// The facade: the public compile and catalog functions over codegen and templates.
#include "codegen/compiler.hpp"
#include "codegen/toolkit.hpp"
#include "gmjit/gmjit.hpp"
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
      info.tensors.push_back({spec.name, spec.output, spec.dtype, spec.elements, [descriptor, i](const Shape& shape) {
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

std::optional<std::string> disassemble(const std::vector<char>& cubin, std::string& why_not) {
  return codegen::disassemble(cubin, why_not);
}

}  // namespace gmjit
