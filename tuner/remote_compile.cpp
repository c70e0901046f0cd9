#include "tuner/remote_compile.hpp"

#include <nlohmann/json.hpp>

#include <array>
#include <set>
#include <string_view>

#include "gmjit/error.hpp"
#include "templates/registry.hpp"

namespace gmjit {
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(ResourceUsage, registers, barriers, stack_bytes, spill_store_bytes,
                                                spill_load_bytes, shared_bytes, constant_bytes, spills_known)
}  // namespace gmjit

namespace gmjit::codegen {
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(GeneratedSource, kernel, dtype, shape, config, header, name_expression, file_name,
                                   source, expression)
}  // namespace gmjit::codegen

namespace gmjit::tuner {

namespace {

ErrorKind kind_named(const std::string& name) {
  constexpr std::array kinds{ErrorKind::driver, ErrorKind::nvrtc,  ErrorKind::compile, ErrorKind::device_limit,
                             ErrorKind::launch, ErrorKind::cache,  ErrorKind::usage,   ErrorKind::cache_miss};
  for (const ErrorKind kind : kinds) {
    if (name == to_string(kind)) return kind;
  }
  return ErrorKind::compile;
}

// The headers the source reaches that the compile process's build does not embed: a user's
// kernels, registered at run time in this process only. (The pool compiles here once an embedded
// header was replaced.)
nlohmann::json headers_not_embedded(const codegen::GeneratedSource& source) {
  nlohmann::json headers = nlohmann::json::array();
  if (!source.expression.empty()) return headers;
  std::set<std::string_view> embedded;
  for (const auto& header : templates::embedded_headers()) embedded.insert(header.name);
  for (const auto& [name, text] : templates::reachable(source.header)->headers) {
    if (embedded.count(name) == 0) headers.push_back({{"name", name}, {"text", *text}});
  }
  return headers;
}

}  // namespace

Frame compile_request(const codegen::GeneratedSource& source, const std::string& arch) {
  return Frame{{{"op", "compile"}, {"arch", arch}, {"source", source}, {"headers", headers_not_embedded(source)}}, {}};
}

Frame answer_compile_request(const Frame& request) {
  try {
    for (const auto& header : request.header.at("headers")) {
      templates::register_header(header.at("name").get<std::string>(), header.at("text").get<std::string>());
    }
    codegen::Compiler compiler;
    const auto module = compiler
                            .compile(request.header.at("source").get<codegen::GeneratedSource>(),
                                     request.header.at("arch").get<std::string>())
                            .module;
    return Frame{{{"ok", true},
                  {"arch", module->arch},
                  {"options", module->options},
                  {"compile_key", module->compile_key},
                  {"lowered_name", module->lowered_name},
                  {"ptx", module->ptx},
                  {"log", module->log},
                  {"resources", module->resources},
                  {"compile_ms", module->compile_ms}},
                 module->cubin};
  } catch (const Error& e) {
    return Frame{{{"ok", false},
                  {"kind", to_string(e.kind())},
                  {"code", e.code()},
                  {"error", e.message()},
                  {"call", e.call()},
                  {"log", e.log()},
                  {"options", e.options()}},
                 {}};
  } catch (const std::exception& e) {
    return Frame{{{"ok", false}, {"kind", to_string(ErrorKind::compile)}, {"error", e.what()}}, {}};
  }
}

std::shared_ptr<const codegen::CompiledModule> module_from_answer(Frame answer, const codegen::GeneratedSource& source) {
  const auto& h = answer.header;
  if (!h.value("ok", false)) {
    throw Error(kind_named(h.value("kind", std::string())), h.value("code", 0),
                h.value("error", std::string("the compile process failed")), h.value("call", std::string()), {}, 0,
                h.value("log", std::string()), h.value("options", std::vector<std::string>{}));
  }
  auto module = std::make_shared<codegen::CompiledModule>();
  module->source = source;
  module->arch = h.at("arch").get<std::string>();
  module->options = h.at("options").get<std::vector<std::string>>();
  module->compile_key = h.at("compile_key").get<std::string>();
  module->lowered_name = h.at("lowered_name").get<std::string>();
  module->ptx = h.at("ptx").get<std::string>();
  module->log = h.at("log").get<std::string>();
  module->resources = h.at("resources").get<ResourceUsage>();
  module->compile_ms = h.at("compile_ms").get<double>();
  module->cubin = std::move(answer.payload);
  return module;
}

}  // namespace gmjit::tuner
