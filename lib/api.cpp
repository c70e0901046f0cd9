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
    KernelInfo info{d.name,           d.summary, d.header, templates::template_hash(d.header), d.problem_keys, d.dtypes, {},
                    d.default_config, d.constraints_doc, templates::is_user_kernel(d.name)};
    for (const auto& p : d.params) info.params.push_back({p.name, p.values, p.doc});
    kernels.push_back(std::move(info));
  }
  return kernels;
}

CompileResult compile(const CompileRequest& request) {
  const auto& kernel = templates::find_kernel(request.kernel);
  const std::string dtype = request.dtype.empty() ? kernel.dtypes.front() : request.dtype;
  const Config config = templates::resolve_config(kernel, request.shape, dtype, request.config);
  std::string arch = request.arch;
  if (arch.empty()) {
    detail::Context context(0);
    arch = detail::query_device(0).arch;
  }
  const auto generated = codegen::specialize(kernel, request.shape, dtype, config);
  const auto [module, hit] = codegen::shared_compiler().compile(generated, arch);
  CompileResult out;
  out.kernel = kernel.name;
  out.dtype = dtype;
  out.arch = arch;
  out.shape = request.shape;
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
