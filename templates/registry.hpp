#pragma once
// Kernel descriptors: what a template's tuning parameters are, which configurations are valid
// for a problem, how a configuration becomes an NVRTC name expression, how it is launched, and
// the reference it is verified against.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <string>
#include <vector>

#include "gmjit/device.hpp"
#include "gmjit/types.hpp"
#include "core/kernel_args.hpp"

namespace gmjit::templates {

struct EmbeddedHeader {
  const char* name;     // include name, e.g. "gmjit/sgemm.cuh"
  const char* content;
};

// Every .cuh under templates/gmjit, as embedded at build time.
const std::vector<EmbeddedHeader>& embedded_headers();
// The headers NVRTC compiles against: the embedded templates plus any registered at run time
// (a user's own kernels). Registering an existing name replaces its content.
void register_header(const std::string& name, const std::string& content);
// Whether register_header replaced an embedded header in this process: the built-in kernels then
// compile other code than this library's build says.
bool embedded_headers_replaced();
std::optional<std::string> find_header(const std::string& name);
std::vector<std::pair<std::string, std::string>> all_headers();
// The headers `name` reaches through #include "..." of other known headers, itself first, with
// their texts and the template hash over them. Computed once per set of headers and shared (a
// launch's first load needs it twice); register_header makes the next call walk again.
struct ReachableHeaders {
  std::vector<std::pair<std::string, std::shared_ptr<const std::string>>> headers;  // (name, text)
  std::string template_hash;
};
std::shared_ptr<const ReachableHeaders> reachable(const std::string& name);
// The include names of reachable(name).
std::vector<std::string> reachable_headers(const std::string& name);
// Hex xxHash3-64 over the bytes of every header `name` reaches: the template's identity in keys.
std::string template_hash(const std::string& name);

struct ParamDomain {
  std::string name;
  std::vector<std::int64_t> values;
  std::string doc;
};

struct DtypeInfo {
  std::string name;      // fp32, fp16, bf16, u8, u32, i64
  std::string cpp_type;  // float, __half, __nv_bfloat16, unsigned char, unsigned int, long long
  int bytes;
  bool integer = false;  // u8, u32, i64: values are whole numbers and compare exactly
};
// Throws Error(usage) for an unknown dtype name.
const DtypeInfo& dtype_info(const std::string& name);

// One buffer argument of a kernel at a shape, in argument order.
struct TensorArg {
  std::string name;
  std::int64_t elements;
  bool output;
  // Empty: the problem's dtype (a histogram's counts are u32 whatever its input is).
  std::string dtype = {};
};
// The dtype of `tensor` in a problem of dtype `problem_dtype`.
const DtypeInfo& tensor_dtype(const TensorArg& tensor, const DtypeInfo& problem_dtype);

// One buffer argument as the catalog describes it, for every shape: what `gmtune list --json`
// and KernelInfo print, and what describe_tensors turns into the descriptor's tensors().
struct TensorSpec {
  std::string name;
  bool output = false;
  std::string dtype = {};  // empty: the problem's dtype
  // The element count: JSON text of an expression over the problem keys in the manifest's
  // expression language, e.g. `"n"`, `["*", "rows", "cols"]`, `256`.
  std::string elements;
  // Optional: a flag key (one of the kernel's data keys) that, set to 1, makes this tensor
  // `flag_dtype` instead of `dtype`: histogram's counts are i64 with i64_counts=1, which torch
  // users expect, written by the same kernel rather than widened by a second one.
  std::string dtype_flag = {};
  std::string flag_dtype = {};
};
// The dtype name `spec` has at a normalized `shape`, before the problem's dtype fills an empty one.
const std::string& spec_dtype(const TensorSpec& spec, const Shape& shape);

// Scratch a kernel keeps between launches (block partials, look-back flags, a completion
// counter): zeroed once, and every launch leaves it as the next launch of the same kernel needs
// it, so no launch pays for a memset. It belongs to whoever launches (the Runtime, the tuner's
// harness), never to the caller, and is passed after the tensors.
struct WorkspaceNeed {
  std::int64_t bytes = 0;
  // Launches whose layouts differ may not share the buffer's state (softmax's split path places
  // its per-row pairs after `rows` counters): a launch of another layout finds it zeroed first.
  std::int64_t layout = 0;
};

// A problem key a launch may leave out, which then takes `default_value`; part of the problem
// (and so of the cache key) like any other. Most are a property of the test data the tuner
// generates, not of any tensor (histogram's contention): they steer the tuning inputs, and
// tensors, scalars and geometry never read them. A flag among them (also in flag_keys) may choose
// a tensor's dtype instead (TensorSpec::dtype_flag: histogram's i64_counts).
struct DataKey {
  std::string name;
  std::int64_t default_value = 1;
  std::string doc;
};

// A value for element `i` of input tensor `input`, from 64 random bits of that element and 64
// random bits drawn once for the tensor; converted to the tensor's dtype (rounded to nearest for
// floats, truncated for integers).
using InputValue = std::function<double(const Shape& shape, std::size_t input, std::uint64_t tensor_bits,
                                        std::uint64_t element_bits)>;

// What one launch of a configuration costs, for the tuner's analytic model: DRAM bytes moved,
// flops, how close to peak its inner loop can run, and its per-block footprint. The defaults of
// the last four leave a kernel priced by DRAM bytes and flops alone.
struct Work {
  double bytes = 0;
  double flops = 0;
  double compute_efficiency = 1;  // fraction of peak FMA throughput the inner loop can reach
  std::int64_t shared_bytes = 0;  // per block, static + dynamic
  int registers = 32;             // per thread, as expected before compiling
  double memory_efficiency = 1;   // fraction of DRAM bandwidth the access pattern reaches
  double l2_bytes = 0;            // bytes the blocks read from L2 (tiles re-read by many blocks)
  double atomics = 0;             // global atomic read-modify-writes, serialized in L2
  // Resident warps per SM that hide the inner loop's latency: 16 for one load in flight per warp,
  // fewer for warps that keep many independent instructions in flight (large mma tiles).
  int latency_warps = 16;
  // Seconds the slowest block needs at least for its chain of dependent memory round trips (a
  // pipeline that refills only as deep as its stages), whatever the bandwidth and flops allow.
  double serial_s = 0;
  // Seconds a block spends after its last loop that nothing overlaps, added to the estimate: an
  // epilogue the block must wait on before it exits.
  double tail_s = 0;
  // Bytes the whole grid keeps in flight from DRAM (copies a block issues ahead of use, such as a
  // TMA ring's stages), where the kernel knows them: its DRAM time then follows how much of
  // bandwidth x latency they cover (Little's law), not the share of the SMs its blocks occupy. 0:
  // unknown, priced by that share.
  double bytes_in_flight = 0;
};
// Every reference kernel of a built-in template lives in this one embedded header.
inline constexpr const char* kReferenceHeader = "gmjit/reference.cuh";

// The bound every output element must meet beside the L2 check: |out - ref| <= atol + rtol * |ref|.
// The L2 error over a whole output hides a few wrong elements (12 zeros at the end of 2^24 fp16
// elements stay under 1e-3); this bound does not. Integers compare exactly (both zero).
struct ElementBound {
  double atol = 0;
  double rtol = 0;
};
// The bound for outputs of `dtype`, for outputs of magnitude about one rounded once or a few
// times: fp32 1e-5 + 1e-5 |ref|, fp16 1e-3 + 1e-3 |ref| (half an ulp is at most 2^-11 relative),
// bf16 1e-2 + 1e-2 |ref| (one ulp is at most 2^-7 relative), integers exact.
ElementBound default_element_bound(const DtypeInfo& dtype);

// Inputs converted to double in argument order -> one vector per output tensor.
using HostReference = std::function<std::vector<std::vector<double>>(const std::vector<std::vector<double>>& inputs,
                                                                     const Shape& shape)>;

struct KernelDescriptor {
  std::string name;
  std::string summary;
  std::string header;  // the embedded .cuh that defines the kernel
  // The sizes of the tensors, each required at launch.
  std::vector<std::string> problem_keys;
  // Problem keys that choose a layout rather than a size (gemm's trans_b): 0 or 1, where every
  // other key must be positive.
  std::vector<std::string> flag_keys;
  std::vector<DataKey> data_keys;
  std::vector<std::string> dtypes;
  std::vector<ParamDomain> params;
  Config default_config;
  std::string constraints_doc;  // the rules `violation` enforces, for `gmtune list`
  // Optional: the configurations all_configs lists, when the cross product of the domains is
  // mostly ones `violation` always rejects (gemm's two paths each have their own parameters and
  // keep the other path's at one value: 5232 configurations instead of 124416). Each lies in the
  // domains, none twice. Empty: the cross product.
  std::function<std::vector<Config>()> configurations;

  // Why a configuration in its domains is still invalid for this problem; empty when valid.
  std::function<std::string(const Config&, const Shape&)> violation;
  // Optional: why a shape lies beyond what the kernel's index arithmetic supports whatever the
  // configuration (sizes passed as int, element counts whose byte offsets would overflow);
  // empty when it does not. normalize_problem throws it as Error(usage). It runs before tensors()
  // or geometry() see the shape, so its own arithmetic must not overflow.
  std::function<std::string(const Shape&)> shape_violation;
  // The instantiation NVRTC compiles, e.g. gmjit::vector_add<float, 256, 4, 16>.
  std::function<std::string(const Config&, const Shape&, const DtypeInfo&)> name_expression;
  std::function<LaunchGeometry(const Config&, const Shape&, const DtypeInfo&)> geometry;
  // Buffers in kernel argument order (inputs first, then outputs), then the workspace if any,
  // then the scalar arguments. tensors() evaluates tensor_specs; both are set by describe_tensors.
  std::vector<TensorSpec> tensor_specs;
  std::function<std::vector<TensorArg>(const Shape&)> tensors;
  // Empty: the kernel takes no workspace.
  std::function<WorkspaceNeed(const Shape&)> workspace;
  std::function<void(detail::KernelArgs&, const Shape&)> add_scalars;
  // Optional: arguments computed from the tensors' device addresses at each launch, after the
  // scalars (a TMA kernel's tensor maps, detail::tile_map). `addresses` holds one per tensor, in
  // tensors() order. Empty for kernels whose arguments are known without the pointers. It runs on
  // every launch, so what it computes must come from a cache.
  std::function<void(detail::KernelArgs&, const Config&, const Shape&, const DtypeInfo&,
                     const std::uint64_t* addresses)>
      add_address_args;
  // Optional: why a configuration cannot run on `device` (an instruction its architecture lacks);
  // empty when it can. The tuner drops such configurations before compiling them.
  std::function<std::string(const Config&, const DeviceInfo&)> device_violation;
  // Optional: the byte alignment every tensor's address needs under this configuration and
  // problem (16 where the kernel's 16-byte accesses assume it); 0 or empty: an element's own. The
  // Runtime refuses a misaligned tensor as a usage error rather than launch a kernel that faults
  // (a misaligned access ends the caller's CUDA context). The tuner's buffers are always aligned.
  std::function<std::uint32_t(const Config&, const Shape&)> tensor_alignment;

  // The reference kernel takes the same inputs, one double output per output element, and the
  // same scalars; it accumulates in double. Empty when host_reference is set instead. The shape
  // is there for template arguments a problem key selects (gemm's trans_b), never for sizes.
  std::function<std::string(const DtypeInfo&, const Shape&)> reference_expression;
  std::string reference_header = kReferenceHeader;  // the header that defines it
  std::function<LaunchGeometry(const Shape&)> reference_geometry;
  // Largest relative L2 error (||out - ref|| / ||ref||) accepted for a dtype.
  std::function<double(const DtypeInfo&, const Shape&)> tolerance;
  // Optional: the per-element bound, for outputs whose scale or accumulated error the dtype's
  // default does not fit (sgemm's grows with k, softmax's values shrink with cols). Empty:
  // default_element_bound.
  std::function<ElementBound(const DtypeInfo&, const Shape&)> element_bound;
  // Optional: the analytic model's input. Without it the model assumes every tensor is moved
  // once and ranks by occupancy and waves alone.
  std::function<Work(const Config&, const Shape&, const DtypeInfo&)> work;
  // A reference computed on the host: a user's C++ function, which lives only in the process
  // that registered the kernel (so the tuner computes it there and ships it to the worker), or a
  // built-in's (every process has it, so the worker computes it itself).
  HostReference host_reference;
  // Optional: the distribution of the inputs. Without it every input element is uniform in
  // +-[1/16, 1), never zero.
  InputValue input_value;

  // A kernel registered from a manifest keeps both texts (built-ins leave them empty), so the
  // tuner can register the same kernel in its worker processes.
  std::string manifest_json;
  std::string header_source;
  // Non-empty for a kernel generated from an expression (codegen/expr_kernel.hpp): its canonical
  // text, which the compiler lowers through LLVM instead of compiling `header` with NVRTC, and
  // which a worker process registers the same kernel from.
  std::string expression;
};

// The bound applied to `kernel`'s outputs of `dtype`: its element_bound hook, else the default.
ElementBound element_bound(const KernelDescriptor& kernel, const DtypeInfo& dtype, const Shape& shape);

// Every kernel: the built-ins in catalog order, then user kernels in order of first registration.
// The vector is a snapshot: a later registration makes a new one and leaves this one intact, so
// references into it (and from find_kernel) stay valid for the life of the process.
const std::vector<KernelDescriptor>& catalog();
// Throws Error(usage) naming the kernel and the known ones.
const KernelDescriptor& find_kernel(const std::string& name);
// Registers kernel.header_source under kernel.header and adds the kernel to the catalog, or
// replaces the user kernel of the same name (keeping its catalog position). Throws Error(usage)
// when the name is a built-in kernel's, or the header is an embedded one or another user
// kernel's. Descriptors come from parse_manifest (templates/manifest.hpp).
const KernelDescriptor& register_user_kernel(KernelDescriptor kernel);
// True for kernels added by register_user_kernel.
bool is_user_kernel(const std::string& name);

// A problem checked against its kernel and put in its one canonical form: the dtype filled in
// (the kernel's first when empty) and checked, every problem key present and positive (a flag key
// 0 or 1), data keys
// at their defaults when absent, no other key. Every layer that accepts a problem calls this
// (gmjit::validate exposes it); the normalized shape is what keys the cache.
struct NormalizedProblem {
  const KernelDescriptor* kernel = nullptr;
  std::string dtype;
  Shape shape;
};
// Throws Error(usage) naming the offending key or value.
NormalizedProblem normalize_problem(const std::string& kernel, const Shape& shape, const std::string& dtype);
NormalizedProblem normalize_problem(const KernelDescriptor& kernel, const Shape& shape, const std::string& dtype);

// Full validation of a request against a descriptor; throws Error(usage) naming the offending
// key or value: those of normalize_problem (including sizes beyond the kernel's index arithmetic,
// shape_violation), unknown params, values outside their domain, constraint violations. Missing
// params take the defaults. `shape` must be normalized.
Config resolve_config(const KernelDescriptor& kernel, const Shape& shape, const std::string& dtype,
                      const Config& partial);

// `config` with each parameter it does not name at the kernel's default. A parameter is added with
// a default that keeps the kernel as it was, so a configuration recorded before it existed (a
// cached winner, a search recording) names the configuration it ran as.
Config with_defaults(const KernelDescriptor& kernel, Config config);

// Sets kernel.tensor_specs and the tensors() that evaluates them (templates/manifest.cpp holds the
// expression language). Throws Error(usage) for an expression that is not one, or names
// anything but kernel.problem_keys, which must be set first.
void describe_tensors(KernelDescriptor& kernel, std::vector<TensorSpec> specs);

// Every configuration of all_configs that satisfies the constraints; none
// for a shape beyond the kernel (shape_violation).
std::vector<Config> valid_configs(const KernelDescriptor& kernel, const Shape& shape);
// The whole cross product (or the descriptor's `configurations`), valid or not, for recording
// invalid candidates.
std::vector<Config> all_configs(const KernelDescriptor& kernel);
// `base` with every combination of the values of `params` (the others keep base's values).
std::vector<Config> cross_product(const std::vector<ParamDomain>& params, const Config& base = {});

std::int64_t ceil_div(std::int64_t a, std::int64_t b);

// Adds a built-in kernel to the catalog. Each kernel's .cpp defines one at namespace scope, so
// the catalog is whatever the build compiled in: templates/CMakeLists.txt globs the sources and
// links every object, also those that nothing else references. The catalog, and so `gmtune
// list`, orders the built-ins by `position` (then by name), which keeps related kernels together
// (softmax, rmsnorm, layernorm) whatever the link order; a new kernel takes an unused one.
// `describe` runs on the first use of the kernel (find_kernel) or of the catalog, not during static
// initialization; `name` must be the name it describes.
struct BuiltinKernel {
  BuiltinKernel(int position, const char* name, KernelDescriptor (*describe)());
};

// Words of prefix_sum's workspace for n elements, the same for every configuration.
std::int64_t prefix_sum_workspace_words(std::int64_t n);

}  // namespace gmjit::templates
