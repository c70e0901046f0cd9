#include "tuner/harness.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <future>
#include <limits>
#include <random>
#include <thread>

#include "codegen/compiler.hpp"
#include "core/laps.hpp"
#include "core/log.hpp"

namespace gmjit::tuner {

std::uint16_t float_to_half(float value) {
  std::uint32_t x = 0;
  std::memcpy(&x, &value, 4);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  if (abs >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds past 65504
  if (abs < 0x38800000u) {  // subnormal half or zero
    if (abs < 0x33000000u) return static_cast<std::uint16_t>(sign);
    const std::uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
    const int shift = 126 - static_cast<int>(abs >> 23);
    std::uint32_t half = mantissa >> shift;
    const std::uint32_t rest = mantissa & ((1u << shift) - 1);
    const std::uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1u))) ++half;
    return static_cast<std::uint16_t>(sign | half);
  }
  std::uint32_t half = ((abs - 0x38000000u) >> 13);
  const std::uint32_t rest = abs & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;
  return static_cast<std::uint16_t>(sign | half);
}

float half_to_float(std::uint16_t bits) {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1fu;
  std::uint32_t mantissa = bits & 0x3ffu;
  std::uint32_t x = 0;
  if (exponent == 0x1f) {
    x = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {
    x = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa != 0) {
    int e = 113;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --e;
    }
    x = sign | (static_cast<std::uint32_t>(e) << 23) | ((mantissa & 0x3ffu) << 13);
  } else {
    x = sign;
  }
  float out = 0;
  std::memcpy(&out, &x, 4);
  return out;
}

std::uint16_t float_to_bf16(float value) {
  std::uint32_t x = 0;
  std::memcpy(&x, &value, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<std::uint16_t>(x >> 16);
}

float bf16_to_float(std::uint16_t bits) {
  const std::uint32_t x = static_cast<std::uint32_t>(bits) << 16;
  float out = 0;
  std::memcpy(&out, &x, 4);
  return out;
}

namespace {

std::int64_t ceil_div_blocks(std::int64_t n, std::int64_t block) { return (n + block - 1) / block; }

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

void store_element(const templates::DtypeInfo& dtype, unsigned char* bytes, std::int64_t i, double value) {
  if (dtype.integer) {
    if (dtype.bytes == 8) {
      // i64, signed; doubles hold every whole number up to 2^53 exactly.
      const auto whole = static_cast<std::int64_t>(std::clamp(std::floor(value), -9007199254740992.0, 9007199254740992.0));
      std::memcpy(bytes + i * 8, &whole, 8);
      return;
    }
    const double whole = std::clamp(std::floor(value), 0.0, dtype.bytes == 1 ? 255.0 : 4294967295.0);
    if (dtype.bytes == 1) {
      bytes[i] = static_cast<unsigned char>(whole);
    } else {
      const auto word = static_cast<std::uint32_t>(whole);
      std::memcpy(bytes + i * 4, &word, 4);
    }
    return;
  }
  const auto narrow = static_cast<float>(value);
  if (dtype.bytes == 4) {
    std::memcpy(bytes + i * 4, &narrow, 4);
  } else {
    const std::uint16_t half = dtype.name == "bf16" ? float_to_bf16(narrow) : float_to_half(narrow);
    std::memcpy(bytes + i * 2, &half, 2);
  }
}

namespace {

// Input tensor `input`, element by element from (seed, input, i) alone: counter-based, so
// filling hundreds of MB costs a few ns per element and any process reproduces it. Without the
// kernel's own distribution: uniform magnitude in [1/16, 1) with a random sign, never zero, so
// a kernel that skips an input cannot match.
std::vector<unsigned char> random_bytes(const templates::KernelDescriptor& kernel, const Shape& shape,
                                        const templates::DtypeInfo& dtype, std::int64_t elements, std::uint64_t seed,
                                        std::size_t input) {
  std::vector<unsigned char> bytes(static_cast<std::size_t>(elements) * dtype.bytes);
  const std::uint64_t stream = splitmix64(seed ^ splitmix64(input + 1));
  const std::uint64_t tensor_bits = splitmix64(stream ^ 0x5bd1e995u);
  const auto fill = [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      const std::uint64_t bits = splitmix64(stream + static_cast<std::uint64_t>(i));
      double value = 0;
      if (kernel.input_value) {
        value = kernel.input_value(shape, input, tensor_bits, bits);
      } else {
        const double magnitude = 0.0625 + 0.9375 * static_cast<double>(bits >> 40) * (1.0 / 16777216.0);
        value = (bits & 1u) ? -magnitude : magnitude;
      }
      store_element(dtype, bytes.data(), i, value);
    }
  };
  // Each element depends on its index alone, so ranges fill on their own threads: one thread took
  // half a second for the operands of a 4096^3 gemm, before the first candidate could run.
  constexpr std::int64_t kElementsPerThread = std::int64_t{1} << 20;
  const std::int64_t threads = std::clamp<std::int64_t>(
      elements / kElementsPerThread, 1, std::max<std::int64_t>(1, std::thread::hardware_concurrency()));
  if (threads == 1) {
    fill(0, elements);
    return bytes;
  }
  std::vector<std::future<void>> parts;
  for (std::int64_t t = 0; t < threads; ++t) {
    parts.push_back(std::async(std::launch::async, fill, elements * t / threads, elements * (t + 1) / threads));
  }
  for (auto& part : parts) part.get();
  return bytes;
}

}  // namespace

double element(const templates::DtypeInfo& dtype, const unsigned char* bytes, std::int64_t i) {
  if (dtype.integer) {
    if (dtype.bytes == 1) return bytes[i];
    if (dtype.bytes == 8) {
      std::int64_t whole = 0;
      std::memcpy(&whole, bytes + i * 8, 8);
      return static_cast<double>(whole);
    }
    std::uint32_t word = 0;
    std::memcpy(&word, bytes + i * 4, 4);
    return word;
  }
  if (dtype.bytes == 4) {
    float value = 0;
    std::memcpy(&value, bytes + i * 4, 4);
    return value;
  }
  std::uint16_t narrow = 0;
  std::memcpy(&narrow, bytes + i * 2, 2);
  return dtype.name == "bf16" ? bf16_to_float(narrow) : half_to_float(narrow);
}

codegen::GeneratedSource compare_source(const templates::DtypeInfo& dtype) {
  codegen::GeneratedSource compare;
  compare.kernel = "verify";
  compare.dtype = dtype.name;
  compare.header = "gmjit/verify.cuh";
  compare.name_expression = fmt::format("gmjit::verify::compare<{}>", dtype.cpp_type);
  compare.file_name = "verify_" + dtype.name + ".cu";
  compare.source = "#include \"gmjit/verify.cuh\"\n";
  return compare;
}

OutputCheck check_output(const templates::DtypeInfo& dtype, const unsigned char* out, const double* ref,
                         std::int64_t n, const templates::ElementBound& bound) {
  OutputCheck check;
  double diff = 0, norm = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const double value = element(dtype, out, i);
    const double expected = ref[i];
    if (std::isfinite(value)) {
      diff += (value - expected) * (value - expected);
    } else {
      ++check.non_finite;
    }
    norm += expected * expected;
    if (!(std::abs(value - expected) <= bound.atol + bound.rtol * std::abs(expected))) {
      if (check.outside++ == 0) {
        check.first = i;
        check.value = value;
        check.expected = expected;
      }
    }
  }
  check.l2_error = norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
  return check;
}

std::string output_failure(const std::string& tensor, std::int64_t n, const OutputCheck& check,
                           const templates::ElementBound& bound, double tolerance) {
  if (check.non_finite > 0) {
    return fmt::format("{} of {} elements of {} are NaN or infinite (unwritten?); the first wrong one, element {}, is "
                       "{} against {:.7g}",
                       check.non_finite, n, tensor, check.first, check.value, check.expected);
  }
  if (check.outside > 0) {
    return fmt::format("{} of {} elements of {} outside |out - ref| <= {:.3g} + {:.3g} |ref|; the first, element {}, is "
                       "{:.7g} against {:.7g} (relative L2 error {:.3g}, tolerance {:.3g})",
                       check.outside, n, tensor, bound.atol, bound.rtol, check.first, check.value, check.expected,
                       check.l2_error, tolerance);
  }
  if (!(check.l2_error <= tolerance)) {
    return fmt::format("relative L2 error {:.3g} above tolerance {:.3g}", check.l2_error, tolerance);
  }
  return {};
}

std::vector<std::vector<unsigned char>> random_inputs(const templates::KernelDescriptor& kernel, const Shape& shape,
                                                      const templates::DtypeInfo& dtype, std::uint64_t seed) {
  std::vector<std::vector<unsigned char>> inputs;
  for (const auto& arg : kernel.tensors(shape)) {
    if (arg.output) continue;
    inputs.push_back(random_bytes(kernel, shape, templates::tensor_dtype(arg, dtype), arg.elements, seed, inputs.size()));
  }
  return inputs;
}

std::vector<std::vector<double>> widen_inputs(const templates::KernelDescriptor& kernel, const Shape& shape,
                                              const templates::DtypeInfo& dtype,
                                              const std::vector<std::vector<unsigned char>>& inputs) {
  std::vector<std::vector<double>> values;
  for (const auto& arg : kernel.tensors(shape)) {
    if (arg.output) continue;
    const auto& type = templates::tensor_dtype(arg, dtype);
    const auto& bytes = inputs.at(values.size());
    std::vector<double>& widened = values.emplace_back(bytes.size() / type.bytes);
    for (std::size_t i = 0; i < widened.size(); ++i) widened[i] = element(type, bytes.data(), static_cast<std::int64_t>(i));
  }
  return values;
}

Timing summarize(std::vector<double> samples) {
  Timing timing;
  const std::size_t n = samples.size();
  if (n == 0) return timing;
  std::sort(samples.begin(), samples.end());
  timing.repetitions = static_cast<int>(n);
  timing.median_ms = n % 2 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
  timing.spread = (samples[std::min(n - 1, (3 * n) / 4)] - samples[n / 4]) / timing.median_ms;
  const double half = 0.98 * std::sqrt(static_cast<double>(n));
  const auto low = static_cast<std::size_t>(std::max(0.0, std::floor(n / 2.0 - half)));
  const auto high = static_cast<std::size_t>(std::min(n - 1.0, std::ceil(n / 2.0 + half) - 1));
  timing.ci_percent = 100.0 * 0.5 * (samples[high] - samples[low]) / timing.median_ms;
  return timing;
}

int batch_size(double single_ms, const MeasureOptions& options) {
  if (!(single_ms > 0) || single_ms >= options.batch_below_ms) return 1;
  return std::clamp(static_cast<int>(std::ceil(options.batch_sample_ms / single_ms)), 2, options.max_batch);
}

Harness::Harness(const templates::KernelDescriptor& kernel, const Shape& shape, const std::string& dtype,
                 const DeviceInfo& device, std::uint64_t seed,
                 std::optional<std::vector<std::vector<double>>> expected)
    : kernel_(kernel), shape_(shape), dtype_(templates::dtype_info(dtype)) {
  detail::Laps laps;
  tolerance_ = kernel.tolerance(dtype_, shape);
  // Outputs are compared on the device, against references that stay there: one compare kernel
  // per output dtype. Its compile and the reference kernel's go on while the inputs are drawn.
  using Build = std::shared_future<std::shared_ptr<const codegen::CompiledModule>>;
  const auto build = [&device](codegen::GeneratedSource source) {
    return Build(std::async(std::launch::async, [source = std::move(source), arch = device.arch] {
      return codegen::shared_compiler().compile(source, arch).module;
    }));
  };
  const bool device_reference = !expected && !kernel.host_reference;
  Build reference_build;
  if (device_reference) reference_build = build(codegen::specialize_reference(kernel, shape, dtype));
  std::map<std::string, Build> compare_builds;
  for (const auto& arg : kernel.tensors(shape)) {
    const auto& type = templates::tensor_dtype(arg, dtype_);
    if (arg.output && !compare_builds.count(type.name)) compare_builds.emplace(type.name, build(compare_source(type)));
  }

  const auto inputs = random_inputs(kernel, shape, dtype_, seed);
  const double inputs_ms = laps.lap() / 1000;
  std::size_t next_input = 0;
  for (const auto& arg : kernel.tensors(shape)) {
    const auto& type = templates::tensor_dtype(arg, dtype_);
    const std::size_t bytes = static_cast<std::size_t>(arg.elements) * type.bytes;
    Tensor tensor{arg, &type, detail::DeviceBuffer(bytes + (arg.output ? kGuardBytes : 0))};
    if (!arg.output) {
      const auto& host = inputs.at(next_input++);
      tensor.buffer.upload(host.data(), host.size());
    }
    tensors_.push_back(std::move(tensor));
  }
  if (kernel.workspace) {
    // Sized and zeroed as the Runtime does, with guard bytes after it.
    workspace_need_ = kernel.workspace(shape);
    workspace_.prepare(static_cast<std::size_t>(workspace_need_->bytes) + kGuardBytes, workspace_need_->layout,
                       stream_.get());
  }
  // Twice the L2 so that a memset over it evicts every line of the previous run's data.
  flush_ = detail::DeviceBuffer(static_cast<std::size_t>(std::max<long long>(device.l2_bytes, 1 << 20)) * 2);
  sums_ = detail::DeviceBuffer(40);  // gmjit::verify::Sums
  const double upload_ms = laps.lap() / 1000;
  for (auto& [type, compiled] : compare_builds) {
    Compare& entry = compare_kernels_[type];
    entry.module = std::make_unique<detail::Module>(compiled.get()->cubin);
    entry.kernel = std::make_unique<detail::Kernel>(entry.module->kernel(compiled.get()->lowered_name));
  }

  // A built-in's host reference runs here, in the process that verifies.
  if (!expected && kernel.host_reference) expected = kernel.host_reference(widen_inputs(kernel, shape, dtype_, inputs), shape);
  if (expected) {
    for (const auto& values : *expected) {
      detail::DeviceBuffer buffer(values.size() * sizeof(double));
      buffer.upload(values.data(), values.size() * sizeof(double));
      reference_.push_back(std::move(buffer));
    }
    return;
  }
  // The reference runs once per problem, on the same inputs, into double outputs.
  const auto& compiled = reference_build.get();
  const double compile_wait_ms = laps.lap() / 1000;
  detail::Module module(compiled->cubin);
  detail::Kernel reference = module.kernel(compiled->lowered_name);
  for (const auto& tensor : tensors_) {
    if (!tensor.arg.output) continue;
    detail::DeviceBuffer out(static_cast<std::size_t>(tensor.arg.elements) * sizeof(double));
    detail::KernelArgs args = reference_arguments(out.get());
    detail::launch(reference, kernel.reference_geometry(shape), args, stream_.get());
    stream_.synchronize();
    reference_.push_back(std::move(out));
    break;  // reference kernels produce the first output; templates here have exactly one
  }
  detail::logger().debug("{} {} at {}: problem ready in {:.0f} ms (inputs {:.0f}, upload {:.0f}, waiting for compiles "
                         "{:.0f}, reference run {:.0f})",
                         kernel.name, dtype, format_assignments(shape), laps.total() / 1000, inputs_ms, upload_ms,
                         compile_wait_ms, laps.lap() / 1000);
}

detail::KernelArgs Harness::reference_arguments(CUdeviceptr reference_output) const {
  detail::KernelArgs args;
  for (const auto& tensor : tensors_) args.add(tensor.arg.output ? reference_output : tensor.buffer.get());
  if (workspace_need_) args.add(workspace_.buffer().get());
  kernel_.add_scalars(args, shape_);
  return args;
}

detail::KernelArgs Harness::arguments(const Config& config) const {
  detail::KernelArgs args;
  std::vector<std::uint64_t> addresses;
  for (const auto& tensor : tensors_) {
    args.add(tensor.buffer.get());
    addresses.push_back(static_cast<std::uint64_t>(tensor.buffer.get()));
  }
  if (workspace_need_) args.add(workspace_.buffer().get());
  kernel_.add_scalars(args, shape_);
  if (kernel_.add_address_args) kernel_.add_address_args(args, config, shape_, dtype_, addresses.data());
  return args;
}

void Harness::poison_outputs() {
  for (auto& tensor : tensors_) {
    if (tensor.arg.output) tensor.buffer.fill_bytes(0xFF, stream_.get());
  }
}

double Harness::verify(detail::Kernel& kernel, const LaunchGeometry& geometry, const Config& config) {
  detail::KernelArgs args = arguments(config);
  // Each candidate starts from a zeroed workspace, as the Runtime's does, so one that leaves it
  // dirty cannot fail the next. The launch checked is the second: a kernel that leaves its
  // workspace in a state the next launch misreads fails here, and the checked launch's time, which
  // sizes the timing's batches (last_verify_ms), holds no first-launch cost (a first launch may
  // also load the function, under lazy module loading): checked as its first launch, a 1-element
  // add read at least the 20 us of the batch rule on an H100 and was timed unbatched.
  if (workspace_need_) workspace_.clear(stream_.get());
  detail::launch(kernel, geometry, args, stream_.get());
  poison_outputs();
  start_.record(stream_.get());
  detail::launch(kernel, geometry, args, stream_.get());
  stop_.record(stream_.get());
  stream_.synchronize();
  last_verify_ms_ = stop_.elapsed_ms_since(start_);
  // The layout of gmjit::verify::Sums.
  struct Sums {
    double diff, norm, non_finite;
    unsigned long long outside, first_from_end;
  };
  static_assert(sizeof(Sums) == 40, "gmjit::verify::Sums is three doubles and two 64-bit counts");
  std::size_t output_index = 0;
  double worst = 0;
  failure_.clear();
  last_l2_error_ = 0;
  if (workspace_need_) {
    unsigned char guard[kGuardBytes];
    workspace_.buffer().download(guard, kGuardBytes, static_cast<std::size_t>(workspace_need_->bytes));
    if (std::any_of(std::begin(guard), std::end(guard), [](unsigned char b) { return b != 0; })) {
      failure_ = "a guard byte past the workspace was overwritten";
      last_l2_error_ = std::numeric_limits<double>::infinity();
      return last_l2_error_;
    }
  }
  for (const auto& tensor : tensors_) {
    if (!tensor.arg.output) continue;
    const std::size_t bytes = static_cast<std::size_t>(tensor.arg.elements) * tensor.dtype->bytes;
    unsigned char guard[kGuardBytes];
    tensor.buffer.download(guard, kGuardBytes, bytes);
    if (std::any_of(std::begin(guard), std::end(guard), [](unsigned char b) { return b != 0xFF; })) {
      failure_ = fmt::format("a guard byte past output {} was overwritten", tensor.arg.name);
      last_l2_error_ = std::numeric_limits<double>::infinity();
      return last_l2_error_;
    }
    const detail::DeviceBuffer& reference = reference_.at(output_index++);
    const templates::ElementBound bound = templates::element_bound(kernel_, *tensor.dtype, shape_);
    sums_.fill_bytes(0, stream_.get());
    detail::KernelArgs compare_args;
    compare_args.add(tensor.buffer.get())
        .add(reference.get())
        .add(static_cast<long long>(tensor.arg.elements))
        .add(bound.atol)
        .add(bound.rtol)
        .add(sums_.get());
    LaunchGeometry g;
    g.block[0] = 256;
    g.grid[0] = static_cast<unsigned>(std::clamp<std::int64_t>(ceil_div_blocks(tensor.arg.elements, 256), 1, 4096));
    detail::launch(*compare_kernels_.at(tensor.dtype->name).kernel, g, compare_args, stream_.get());
    stream_.synchronize();
    Sums sums{};
    sums_.download(&sums, sizeof(sums));
    OutputCheck check;
    check.l2_error = sums.norm > 0 ? std::sqrt(sums.diff / sums.norm) : std::sqrt(sums.diff);
    check.non_finite = static_cast<std::int64_t>(sums.non_finite);
    check.outside = static_cast<std::int64_t>(sums.outside);
    if (check.outside > 0) {
      check.first = tensor.arg.elements - static_cast<std::int64_t>(sums.first_from_end);
      unsigned char value[8] = {};
      tensor.buffer.download(value, tensor.dtype->bytes, static_cast<std::size_t>(check.first) * tensor.dtype->bytes);
      check.value = element(*tensor.dtype, value, 0);
      reference.download(&check.expected, sizeof(double), static_cast<std::size_t>(check.first) * sizeof(double));
    }
    worst = std::max(worst, check.non_finite > 0 ? std::numeric_limits<double>::infinity() : check.l2_error);
    if (failure_.empty()) failure_ = output_failure(tensor.arg.name, tensor.arg.elements, check, bound, tolerance_);
  }
  last_l2_error_ = worst;
  // An element outside its bound fails the candidate whatever its L2 error.
  return failure_.empty() || !std::isfinite(worst) || worst > tolerance_ ? worst
                                                                        : std::numeric_limits<double>::infinity();
}

CUdeviceptr Harness::tensor_address(const std::string& name) const {
  for (const auto& tensor : tensors_)
    if (tensor.arg.name == name) return tensor.buffer.get();
  throw Error(ErrorKind::usage, 0, fmt::format("kernel '{}' has no tensor '{}'", kernel_.name, name));
}

double Harness::sample(const std::function<void(CUstream)>& work) {
  flush_.fill_bytes(static_cast<unsigned char>(++flush_value_), stream_.get());
  start_.record(stream_.get());
  work(stream_.get());
  stop_.record(stream_.get());
  stop_.synchronize();
  return stop_.elapsed_ms_since(start_);
}

double Harness::sample(detail::Kernel& kernel, const LaunchGeometry& geometry, detail::KernelArgs& args, int batch) {
  const auto events = static_cast<std::size_t>(2 * batch);
  while (launch_events_.size() < events) launch_events_.emplace_back();
  for (std::size_t i = 0; i < events; i += 2) {
    flush_.fill_bytes(static_cast<unsigned char>(++flush_value_), stream_.get());
    launch_events_[i].record(stream_.get());
    detail::launch(kernel, geometry, args, stream_.get());
    launch_events_[i + 1].record(stream_.get());
  }
  launch_events_[events - 1].synchronize();
  double total_ms = 0;
  for (std::size_t i = 0; i < events; i += 2) total_ms += launch_events_[i + 1].elapsed_ms_since(launch_events_[i]);
  return total_ms / batch;
}

Timing Harness::time(detail::Kernel& kernel, const LaunchGeometry& geometry, const Config& config,
                     const MeasureOptions& options, double single_ms) {
  detail::KernelArgs args = arguments(config);
  if (single_ms <= 0) {
    detail::launch(kernel, geometry, args, stream_.get());  // warm-up: instruction cache, TLB
    stream_.synchronize();
    single_ms = sample(kernel, geometry, args, 1);
  }
  const int batch = batch_size(single_ms, options);
  std::vector<double> samples;
  const auto began = std::chrono::steady_clock::now();
  Timing timing;
  while (static_cast<int>(samples.size()) < options.max_repetitions) {
    samples.push_back(sample(kernel, geometry, args, batch));
    const int n = static_cast<int>(samples.size());
    // A candidate clearly slower than the best so far cannot win: a few samples settle that.
    const int needed = options.give_up_above_ms > 0 ? std::min(options.min_repetitions, 3) : options.min_repetitions;
    if (n < needed) continue;
    if (n < options.min_repetitions) {
      timing = summarize(samples);
      if (timing.median_ms > options.give_up_above_ms) {
        timing.gave_up = true;
        break;
      }
      continue;
    }
    timing = summarize(samples);
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    if (timing.ci_percent <= options.target_ci_percent || elapsed >= options.max_seconds) break;
    if (options.give_up_above_ms > 0 && timing.median_ms > options.give_up_above_ms) {
      timing.gave_up = true;
      break;
    }
  }
  const bool gave_up = timing.gave_up;
  timing = summarize(samples);
  timing.gave_up = gave_up;
  timing.batch = batch;
  return timing;
}

std::vector<Timing> Harness::retime(const std::vector<Entrant>& entrants, int rounds) {
  std::vector<detail::KernelArgs> args;
  for (const auto& entrant : entrants) args.push_back(arguments(entrant.config));
  std::vector<std::vector<double>> samples(entrants.size());
  for (int round = 0; round < rounds; ++round) {
    for (std::size_t k = 0; k < entrants.size(); ++k) {
      const std::size_t i = (k + static_cast<std::size_t>(round)) % entrants.size();
      samples[i].push_back(sample(*entrants[i].kernel, entrants[i].geometry, args[i], entrants[i].batch));
    }
  }
  std::vector<Timing> timings;
  for (std::size_t i = 0; i < entrants.size(); ++i) {
    timings.push_back(summarize(samples[i]));
    timings.back().batch = entrants[i].batch;
  }
  return timings;
}

}  // namespace gmjit::tuner
