#include "templates/registry.hpp"

#define XXH_INLINE_ALL
#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <tuple>

#include "gmjit/error.hpp"

namespace gmjit::templates {

namespace {

using HeaderText = std::shared_ptr<const std::string>;

struct HeaderStore {
  std::shared_mutex mutex;
  // The embedded headers are copied in on first use, one by one: a launch reaches two or three
  // of them, and copying all of them (108 KB, and the page faults of reading and writing it) was
  // most of a fresh process's first template hash. Registered headers go in at once and shadow
  // an embedded one of the same name.
  std::map<std::string, HeaderText> headers;
  bool all_embedded = false;
  // Every launch's first load asks for the headers its template reaches (problem key, compile
  // key); walking the includes and copying the texts each time cost more than the hashing.
  // Computed once per header set: register_header empties it.
  std::map<std::string, std::shared_ptr<const ReachableHeaders>> reachable;
  std::uint64_t generation = 0;
  std::set<std::string> embedded_replaced;  // embedded headers registered with other content
};

HeaderStore& header_store() {
  static HeaderStore store;
  return store;
}

// Under the store's exclusive lock.
const HeaderText* header_text(HeaderStore& store, const std::string& name) {
  if (const auto it = store.headers.find(name); it != store.headers.end()) return &it->second;
  if (store.all_embedded) return nullptr;
  for (const auto& header : embedded_headers()) {
    if (name == header.name) {
      return &store.headers.emplace(name, std::make_shared<const std::string>(header.content)).first->second;
    }
  }
  return nullptr;
}

// Under the store's exclusive lock.
void load_all_embedded(HeaderStore& store) {
  if (store.all_embedded) return;
  for (const auto& header : embedded_headers()) {
    if (store.headers.count(header.name) == 0) {
      store.headers.emplace(header.name, std::make_shared<const std::string>(header.content));
    }
  }
  store.all_embedded = true;
}

// The targets of `#include "..."` lines; angle-bracket includes are toolkit headers.
std::vector<std::string> quoted_includes(const std::string& text) {
  std::vector<std::string> targets;
  for (size_t line = 0; line < text.size();) {
    size_t end = text.find('\n', line);
    if (end == std::string::npos) end = text.size();
    size_t i = text.find_first_not_of(" \t", line);
    if (i < end && text[i] == '#') {
      i = text.find_first_not_of(" \t", i + 1);
      if (i < end && text.compare(i, 7, "include") == 0) {
        const size_t open = text.find_first_not_of(" \t", i + 7);
        if (open < end && text[open] == '"') {
          const size_t close = text.find('"', open + 1);
          if (close < end) targets.push_back(text.substr(open + 1, close - open - 1));
        }
      }
    }
    line = end + 1;
  }
  return targets;
}

// Under the store's exclusive lock.
std::shared_ptr<const ReachableHeaders> walk_includes(HeaderStore& store, const std::string& name) {
  auto out = std::make_shared<ReachableHeaders>();
  std::set<std::string> seen;
  std::vector<std::string> pending{name};
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  while (!pending.empty()) {
    const std::string current = pending.back();
    pending.pop_back();
    if (!seen.insert(current).second) continue;
    const HeaderText* found = header_text(store, current);
    if (!found) continue;  // a toolkit header: pinned by the NVRTC build instead
    const HeaderText content = *found;
    XXH3_64bits_update(&state, current.data(), current.size() + 1);
    XXH3_64bits_update(&state, content->data(), content->size());
    for (auto& included : quoted_includes(*content)) pending.push_back(std::move(included));
    out->headers.emplace_back(current, content);
  }
  out->template_hash = fmt::format("{:016x}", XXH3_64bits_digest(&state));
  return out;
}

}  // namespace

void register_header(const std::string& name, const std::string& content) {
  auto& store = header_store();
  auto text = std::make_shared<const std::string>(content);
  std::unique_lock lock(store.mutex);
  store.headers[name] = std::move(text);
  store.reachable.clear();
  ++store.generation;
  for (const auto& header : embedded_headers()) {
    if (name != header.name) continue;
    if (content == header.content) {
      store.embedded_replaced.erase(name);
    } else {
      store.embedded_replaced.insert(name);
    }
  }
}

bool embedded_headers_replaced() {
  auto& store = header_store();
  std::shared_lock lock(store.mutex);
  return !store.embedded_replaced.empty();
}

std::optional<std::string> find_header(const std::string& name) {
  auto& store = header_store();
  std::unique_lock lock(store.mutex);
  if (const HeaderText* text = header_text(store, name)) return **text;
  return std::nullopt;
}

std::vector<std::pair<std::string, std::string>> all_headers() {
  auto& store = header_store();
  std::unique_lock lock(store.mutex);
  load_all_embedded(store);
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(store.headers.size());
  for (const auto& [name, content] : store.headers) out.emplace_back(name, *content);
  return out;
}

std::shared_ptr<const ReachableHeaders> reachable(const std::string& name) {
  auto& store = header_store();
  {
    std::shared_lock lock(store.mutex);
    if (auto it = store.reachable.find(name); it != store.reachable.end()) return it->second;
  }
  std::unique_lock lock(store.mutex);
  if (auto it = store.reachable.find(name); it != store.reachable.end()) return it->second;
  auto walked = walk_includes(store, name);
  store.reachable.emplace(name, walked);
  return walked;
}

std::vector<std::string> reachable_headers(const std::string& name) {
  std::vector<std::string> names;
  for (const auto& header : reachable(name)->headers) names.push_back(header.first);
  return names;
}

std::string template_hash(const std::string& name) { return reachable(name)->template_hash; }

const DtypeInfo& dtype_info(const std::string& name) {
  static const std::vector<DtypeInfo> known = {
      {"fp32", "float", 4},         {"fp16", "__half", 2},       {"bf16", "__nv_bfloat16", 2},
      {"u8", "unsigned char", 1, true}, {"u32", "unsigned int", 4, true}, {"i64", "long long", 8, true}};
  for (const auto& info : known) {
    if (info.name == name) return info;
  }
  throw Error(ErrorKind::usage, 0, "unknown dtype '" + name + "' (fp32, fp16, bf16, u8, u32, i64)");
}

ElementBound default_element_bound(const DtypeInfo& dtype) {
  if (dtype.integer) return {0.0, 0.0};
  if (dtype.name == "fp16") return {1e-3, 1e-3};
  if (dtype.name == "bf16") return {1e-2, 1e-2};
  return {1e-5, 1e-5};
}

ElementBound element_bound(const KernelDescriptor& kernel, const DtypeInfo& dtype, const Shape& shape) {
  return kernel.element_bound ? kernel.element_bound(dtype, shape) : default_element_bound(dtype);
}

const std::string& spec_dtype(const TensorSpec& spec, const Shape& shape) {
  if (spec.dtype_flag.empty()) return spec.dtype;
  const auto flag = shape.find(spec.dtype_flag);
  return flag != shape.end() && flag->second == 1 ? spec.flag_dtype : spec.dtype;
}

const DtypeInfo& tensor_dtype(const TensorArg& tensor, const DtypeInfo& problem_dtype) {
  return tensor.dtype.empty() ? problem_dtype : dtype_info(tensor.dtype);
}

namespace {

struct CatalogStore {
  std::mutex mutex;
  // Snapshots are never freed: catalog() and find_kernel() hand out references into them, which
  // must outlive any later registration. Registrations are rare, so the copies cost little.
  std::deque<std::vector<KernelDescriptor>> snapshots;
};

struct Registration {
  int position;
  const char* name;
  KernelDescriptor (*describe)();
};

// A function-local static, so registrations from other translation units' static initializers
// find it constructed whatever the order in which those run.
std::vector<Registration>& registrations() {
  static std::vector<Registration> list;
  return list;
}

// Each built-in is described on its first use and kept: a process that launches one kernel
// builds one descriptor, not the catalog (on a first launch that was 160 of ~400 us of CPU,
// most of it page faults on the other descriptors' code). find_kernel hands out these, so a
// built-in has one address for the life of the process whatever is registered later.
const KernelDescriptor* described_builtin(const std::string& name) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<const KernelDescriptor>> described;
  std::lock_guard lock(mutex);
  if (const auto it = described.find(name); it != described.end()) return it->second.get();
  for (const auto& registration : registrations()) {
    if (name != registration.name) continue;
    auto kernel = std::make_unique<const KernelDescriptor>(registration.describe());
    if (kernel->name != name) {
      throw Error(ErrorKind::usage, 0,
                  fmt::format("built-in kernel registered as '{}' describes itself as '{}'", name, kernel->name));
    }
    return described.emplace(name, std::move(kernel)).first->second.get();
  }
  return nullptr;
}

std::vector<KernelDescriptor> builtin_kernels() {
  std::vector<std::pair<int, const KernelDescriptor*>> described;
  std::set<std::string> names;
  for (const auto& registration : registrations()) {
    if (!names.insert(registration.name).second) {
      throw Error(ErrorKind::usage, 0, fmt::format("two built-in kernels are named '{}'", registration.name));
    }
    described.emplace_back(registration.position, described_builtin(registration.name));
  }
  std::sort(described.begin(), described.end(), [](const auto& a, const auto& b) {
    return std::tie(a.first, a.second->name) < std::tie(b.first, b.second->name);
  });
  std::vector<KernelDescriptor> kernels;
  for (const auto& entry : described) kernels.push_back(*entry.second);
  return kernels;
}

CatalogStore& catalog_store() {
  static CatalogStore store;
  static std::once_flag filled;
  std::call_once(filled, [] { store.snapshots.push_back(builtin_kernels()); });
  return store;
}

}  // namespace

BuiltinKernel::BuiltinKernel(int position, const char* name, KernelDescriptor (*describe)()) {
  registrations().push_back({position, name, describe});
}

const std::vector<KernelDescriptor>& catalog() {
  auto& store = catalog_store();
  std::lock_guard lock(store.mutex);
  return store.snapshots.back();
}

const KernelDescriptor& find_kernel(const std::string& name) {
  if (const KernelDescriptor* builtin = described_builtin(name)) return *builtin;
  std::string known;
  for (const auto& kernel : catalog()) {
    if (kernel.name == name) return kernel;
    known += (known.empty() ? "" : ", ") + kernel.name;
  }
  throw Error(ErrorKind::usage, 0, "unknown kernel '" + name + "' (known: " + known + ")");
}

const KernelDescriptor& register_user_kernel(KernelDescriptor kernel) {
  auto& store = catalog_store();
  std::lock_guard lock(store.mutex);
  const std::size_t builtins = store.snapshots.front().size();
  std::vector<KernelDescriptor> next = store.snapshots.back();
  const auto same = std::find_if(next.begin(), next.end(), [&](const auto& k) { return k.name == kernel.name; });
  const auto at = static_cast<std::size_t>(same - next.begin());
  if (at < builtins) {
    throw Error(ErrorKind::usage, 0, fmt::format("name: '{}' is a built-in kernel", kernel.name));
  }
  for (const auto& header : embedded_headers()) {
    if (kernel.header == header.name) {
      throw Error(ErrorKind::usage, 0, fmt::format("header: '{}' is a built-in template's", kernel.header));
    }
  }
  for (std::size_t i = builtins; i < next.size(); ++i) {
    if (next[i].header == kernel.header && next[i].name != kernel.name) {
      throw Error(ErrorKind::usage, 0,
                  fmt::format("header: '{}' already holds kernel '{}'", kernel.header, next[i].name));
    }
  }
  register_header(kernel.header, kernel.header_source);
  if (same == next.end()) {
    next.push_back(std::move(kernel));
  } else {
    *same = std::move(kernel);
  }
  store.snapshots.push_back(std::move(next));
  return store.snapshots.back()[at];
}

bool is_user_kernel(const std::string& name) {
  auto& store = catalog_store();
  std::lock_guard lock(store.mutex);
  const auto& current = store.snapshots.back();
  for (std::size_t i = store.snapshots.front().size(); i < current.size(); ++i) {
    if (current[i].name == name) return true;
  }
  return false;
}

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

NormalizedProblem normalize_problem(const KernelDescriptor& kernel, const Shape& shape, const std::string& dtype) {
  NormalizedProblem out{&kernel, dtype.empty() ? kernel.dtypes.front() : dtype, {}};
  dtype_info(out.dtype);
  if (std::find(kernel.dtypes.begin(), kernel.dtypes.end(), out.dtype) == kernel.dtypes.end()) {
    throw Error(ErrorKind::usage, 0,
                fmt::format("'{}': {} supports dtypes {}", out.dtype, kernel.name, fmt::join(kernel.dtypes, ", ")));
  }
  std::vector<std::string> keys = kernel.problem_keys;
  for (const auto& data : kernel.data_keys) keys.push_back(data.name);
  for (const auto& [key, value] : shape) {
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
      throw Error(ErrorKind::usage, 0,
                  fmt::format("'{}={}': {} has no problem key '{}' (keys: {})", key, value, kernel.name, key,
                              fmt::join(keys, ", ")));
    }
    const bool flag = std::find(kernel.flag_keys.begin(), kernel.flag_keys.end(), key) != kernel.flag_keys.end();
    if (flag && value != 0 && value != 1) {
      throw Error(ErrorKind::usage, 0, fmt::format("'{}={}': {} is a flag, 0 or 1", key, value, key));
    }
    if (!flag && value <= 0) {
      throw Error(ErrorKind::usage, 0, fmt::format("'{}={}': sizes must be positive", key, value));
    }
  }
  for (const auto& key : kernel.problem_keys) {
    if (shape.count(key) == 0) {
      throw Error(ErrorKind::usage, 0,
                  fmt::format("missing problem key '{}' for {} (keys: {})", key, kernel.name, fmt::join(keys, ", ")));
    }
  }
  out.shape = shape;
  for (const auto& data : kernel.data_keys) out.shape.emplace(data.name, data.default_value);
  if (kernel.shape_violation) {
    if (const std::string why = kernel.shape_violation(out.shape); !why.empty()) {
      throw Error(ErrorKind::usage, 0, fmt::format("'{}': {} {}", format_assignments(shape), kernel.name, why));
    }
  }
  return out;
}

NormalizedProblem normalize_problem(const std::string& kernel, const Shape& shape, const std::string& dtype) {
  return normalize_problem(find_kernel(kernel), shape, dtype);
}

Config with_defaults(const KernelDescriptor& kernel, Config config) {
  for (const auto& [key, value] : kernel.default_config) config.emplace(key, value);
  return config;
}

Config resolve_config(const KernelDescriptor& kernel, const Shape& shape, const std::string& dtype,
                      const Config& partial) {
  const NormalizedProblem problem = normalize_problem(kernel, shape, dtype);
  Config config = kernel.default_config;
  for (const auto& [key, value] : partial) {
    const auto param = std::find_if(kernel.params.begin(), kernel.params.end(),
                                    [&](const ParamDomain& p) { return p.name == key; });
    if (param == kernel.params.end()) {
      std::vector<std::string> names;
      for (const auto& p : kernel.params) names.push_back(p.name);
      throw Error(ErrorKind::usage, 0,
                  fmt::format("'{}={}': {} has no parameter '{}' (parameters: {})", key, value, kernel.name, key,
                              fmt::join(names, ", ")));
    }
    if (std::find(param->values.begin(), param->values.end(), value) == param->values.end()) {
      throw Error(ErrorKind::usage, 0,
                  fmt::format("'{}={}': outside the domain of {} ({})", key, value, key, fmt::join(param->values, ", ")));
    }
    config[key] = value;
  }
  if (const std::string why = kernel.violation(config, problem.shape); !why.empty()) {
    throw Error(ErrorKind::usage, 0, fmt::format("'{}': {}", format_assignments(config), why));
  }
  return config;
}

std::vector<Config> all_configs(const KernelDescriptor& kernel) {
  if (kernel.configurations) return kernel.configurations();
  return cross_product(kernel.params);
}

std::vector<Config> cross_product(const std::vector<ParamDomain>& params, const Config& base) {
  std::vector<Config> configs{base};
  for (const auto& param : params) {
    std::vector<Config> next;
    for (const auto& partial : configs) {
      for (const auto value : param.values) {
        Config extended = partial;
        extended[param.name] = value;
        next.push_back(std::move(extended));
      }
    }
    configs = std::move(next);
  }
  return configs;
}

std::vector<Config> valid_configs(const KernelDescriptor& kernel, const Shape& shape) {
  std::vector<Config> valid;
  // The constraints may multiply sizes that only a supported shape keeps from overflowing.
  if (kernel.shape_violation && !kernel.shape_violation(shape).empty()) return valid;
  for (auto& config : all_configs(kernel)) {
    if (kernel.violation(config, shape).empty()) valid.push_back(std::move(config));
  }
  return valid;
}

}  // namespace gmjit::templates
