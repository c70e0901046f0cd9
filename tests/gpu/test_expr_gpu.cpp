// Expression programs lowered through LLVM (codegen/expr_lower.cpp), run on the GPU and compared
// element by element with expr::evaluate() in float64 on the same inputs: every operator at every
// storage dtype, softmax, rmsnorm, layernorm and silu(a) * b at several LowerParams, odd sizes,
// grids smaller than geometry() asks (so every loop strides), and outputs written in place.
// Inputs are fresh random values, never zero, rounded to their dtype before both sides see them;
// outputs start as NaN (0xFF bytes) with guard bytes after them that must stay untouched.
// Every driver call goes through core/'s wrappers, which throw on any error. The host's share
// (inputs, the reference, the comparison) runs on every core; the GPU's, on the test's thread.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <limits>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "codegen/expr.hpp"
#include "codegen/expr_lower.hpp"
#include "core/device.hpp"
#include "core/kernel_args.hpp"
#include "core/module.hpp"
#include "gpu_test_support.hpp"
#include "require_gpu.hpp"

namespace gmjit {
namespace {

namespace ex = codegen::expr;

// --- Host side: storage bits, inputs, tolerance, comparison (tested below without a GPU) -------

int element_bytes(ex::Dtype dtype) { return dtype == ex::Dtype::f32 ? 4 : 2; }

// IEEE binary16 bits of a value that is one (round_to(v, f16) first).
std::uint16_t half_bits(double v) {
  const std::uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  const double a = std::fabs(v);
  if (std::isnan(v)) return 0x7e00;
  if (std::isinf(v)) return sign | 0x7c00;
  if (a == 0) return sign;
  int e = 0;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  if (e + 14 >= 1) {
    const auto fraction = static_cast<std::uint16_t>(std::ldexp(a, 1 - e) * 1024.0 - 1024.0);
    return static_cast<std::uint16_t>(sign | ((e + 14) << 10) | fraction);
  }
  return static_cast<std::uint16_t>(sign | static_cast<std::uint16_t>(std::ldexp(a, 24)));
}

double half_value(std::uint16_t bits) {
  const double sign = (bits & 0x8000) != 0 ? -1.0 : 1.0;
  const int exponent = (bits >> 10) & 0x1f;
  const int fraction = bits & 0x3ff;
  if (exponent == 0x1f) return fraction != 0 ? std::numeric_limits<double>::quiet_NaN() : sign * INFINITY;
  if (exponent == 0) return sign * std::ldexp(fraction, -24);
  return sign * std::ldexp(1024 + fraction, exponent - 25);
}

// bfloat16 is the top half of a binary32; exact for a value that is one.
std::uint16_t bf16_bits(double v) {
  const float f = static_cast<float>(v);
  std::uint32_t bits = 0;
  std::memcpy(&bits, &f, 4);
  return static_cast<std::uint16_t>(bits >> 16);
}

double bf16_value(std::uint16_t bits) {
  const std::uint32_t wide = std::uint32_t{bits} << 16;
  float f = 0;
  std::memcpy(&f, &wide, 4);
  return f;
}

// Storage bytes of values already rounded to `dtype`.
std::vector<unsigned char> to_storage(const std::vector<double>& values, ex::Dtype dtype) {
  std::vector<unsigned char> bytes(values.size() * static_cast<std::size_t>(element_bytes(dtype)));
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (dtype == ex::Dtype::f32) {
      const float f = static_cast<float>(values[i]);
      std::memcpy(bytes.data() + 4 * i, &f, 4);
    } else {
      const std::uint16_t h = dtype == ex::Dtype::f16 ? half_bits(values[i]) : bf16_bits(values[i]);
      std::memcpy(bytes.data() + 2 * i, &h, 2);
    }
  }
  return bytes;
}

std::vector<double> from_storage(const std::vector<unsigned char>& bytes, ex::Dtype dtype, std::size_t count) {
  std::vector<double> values(count);
  for (std::size_t i = 0; i < count; ++i) {
    if (dtype == ex::Dtype::f32) {
      float f = 0;
      std::memcpy(&f, bytes.data() + 4 * i, 4);
      values[i] = f;
    } else {
      std::uint16_t h = 0;
      std::memcpy(&h, bytes.data() + 2 * i, 2);
      values[i] = dtype == ex::Dtype::f16 ? half_value(h) : bf16_value(h);
    }
  }
  return values;
}

enum class Values {
  signed_range,  // +-[0.25, 3]
  positive,      // [0.25, 3]: log, sqrt, rsqrt
  discrete,      // +-{0.5, 1, 2}: comparisons see equal operands often
};

// `count` fresh values, none zero, each rounded to `dtype` (what the device reads).
std::vector<double> random_values(std::size_t count, ex::Dtype dtype, Values kind, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> magnitude(0.25, 3.0);
  std::uniform_int_distribution<int> coin(0, 1);
  std::uniform_int_distribution<int> pick(0, 2);
  std::vector<double> values(count);
  for (auto& v : values) {
    const double sign = kind == Values::positive || coin(rng) == 0 ? 1.0 : -1.0;
    const double raw = kind == Values::discrete ? std::ldexp(1.0, pick(rng) - 1) : magnitude(rng);
    v = ex::round_to(sign * raw, dtype);
  }
  return values;
}

struct Tolerance {
  double atol = 0;
  double rtol = 0;
};

// Per element |out - ref| <= atol + rtol |ref|. The output's rounding to its storage dtype bounds
// f16 (half an ulp: 2^-11 relative, 2^-25 absolute among the subnormals) and bf16 (2^-8); f32 has
// only the kernel's f32 math (libdevice's few ulps, sums in another order), which `compute_atol`
// bounds where an output can be near zero. A row sum's error grows with sqrt(cols) times its
// terms' magnitude (`sum_scale`), which an output near zero (a - sum(a)) sees as absolute error.
Tolerance tolerance(ex::Dtype out, bool reduces, std::int64_t cols, double sum_scale, double compute_atol = 1e-5) {
  Tolerance t;
  switch (out) {
    case ex::Dtype::f16: t = {1e-6, 1e-3}; break;
    case ex::Dtype::bf16: t = {1e-6, 1e-2}; break;
    default: t = {0, 1e-5}; break;
  }
  t.atol += compute_atol;
  t.rtol += reduces ? 2e-5 : 1e-5;
  if (reduces) t.atol += 1e-6 * sum_scale * std::sqrt(static_cast<double>(cols));
  return t;
}

// Empty when every element is within tolerance; otherwise the count and the first few misses. A
// NaN reference needs a NaN, an infinite one the same infinity; any NaN the reference lacks (an
// element never written keeps its NaN poison) is a miss.
std::string compare(const std::vector<double>& out, const std::vector<double>& ref, const Tolerance& t,
                    std::int64_t cols) {
  if (out.size() != ref.size()) return "size " + std::to_string(out.size()) + " != " + std::to_string(ref.size());
  std::size_t misses = 0;
  std::string first;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const double o = out[i];
    const double r = ref[i];
    bool ok = false;
    if (std::isnan(r)) {
      ok = std::isnan(o);
    } else if (std::isinf(r)) {
      ok = o == r;
    } else {
      ok = !std::isnan(o) && std::fabs(o - r) <= t.atol + t.rtol * std::fabs(r);
    }
    if (ok) continue;
    if (++misses <= 5) {
      first += " [" + std::to_string(static_cast<std::int64_t>(i) / cols) + "," +
               std::to_string(static_cast<std::int64_t>(i) % cols) + "] got " + std::to_string(o) + " want " +
               std::to_string(r) + ";";
    }
  }
  if (misses == 0) return {};
  return std::to_string(misses) + " of " + std::to_string(out.size()) + " elements out of tolerance (atol " +
         std::to_string(t.atol) + ", rtol " + std::to_string(t.rtol) + "):" + first;
}

// --- Cases ----------------------------------------------------------------------------------

struct Case {
  std::string label;
  std::string text;
  Values values = Values::signed_range;
  double sum_scale = 0;  // the magnitude of a row sum's terms where an output can cancel it
  double compute_atol = 1e-5;  // the f32 math's absolute error where an output is near zero
};

const std::vector<std::string> kDtypes = {"fp32", "fp16", "bf16"};

std::vector<Case> operator_cases(const std::string& d) {
  const std::string decl = "a: " + d + "; b: " + d + "; w: " + d + "[cols]; ";
  std::vector<Case> cases;
  for (const char* f : {"abs", "exp", "tanh", "sigmoid", "silu", "relu", "gelu", "gelu_erf"}) {
    cases.push_back({f, decl + "y = " + f + "(a)"});
  }
  for (const char* f : {"log", "sqrt", "rsqrt"}) cases.push_back({f, decl + "y = " + f + "(a)", Values::positive});
  cases.push_back({"neg", decl + "y = -a"});
  cases.push_back({"add", decl + "y = a + b"});
  cases.push_back({"sub", decl + "y = a - b"});
  cases.push_back({"mul", decl + "y = a * b"});
  cases.push_back({"div", decl + "y = a / b"});
  cases.push_back({"min", decl + "y = min(a, b)", Values::discrete});
  cases.push_back({"max", decl + "y = max(a, w)", Values::discrete});
  cases.push_back({"row_broadcast", decl + "y = a * w + 2.5"});
  const char* names[] = {"lt", "le", "gt", "ge", "eq", "ne"};
  const char* ops[] = {"<", "<=", ">", ">=", "==", "!="};
  for (int i = 0; i < 6; ++i) {
    cases.push_back({std::string("where_") + names[i], decl + "y = where(a " + ops[i] + " b, a, w)", Values::discrete});
  }
  // The casts round an f32 value (a * b + 0.1 is not representable in the smaller dtypes).
  for (const char* to : {"fp32", "fp16", "bf16"}) {
    cases.push_back({std::string("cast_") + to, decl + "y = " + to + "(fp32(a) * fp32(b) + 0.1)"});
  }
  cases.push_back({"cast_bool", decl + "y = fp32(a > b) + fp32(a)", Values::discrete});
  cases.push_back({"row_sum", decl + "y = a - sum(a * w)", Values::signed_range, 9});
  cases.push_back({"row_mean", decl + "y = a - mean(a * w)"});
  cases.push_back({"row_max", decl + "y = a - max(a * w)"});
  cases.push_back({"row_min", decl + "y = a * min(a * w)"});
  return cases;
}

std::vector<Case> composite_cases(const std::string& d) {
  return {
      // Outputs near 1 / cols, with relative errors only.
      {"softmax", "x: " + d + "; y = exp(x - max(x)) / sum(exp(x - max(x)))", Values::signed_range, 0, 1e-9},
      {"rmsnorm", "x: " + d + "; w: " + d + "[cols]; y = x * rsqrt(mean(x * x) + 1e-6) * w"},
      {"layernorm",
       "x: " + d + "; w: " + d + "[cols]; b: " + d +
           "[cols]; y = (x - mean(x)) * rsqrt(mean((x - mean(x)) * (x - mean(x))) + 1e-5) * w + b"},
      {"silu_mul", "a: " + d + "; b: " + d + "; y = silu(a) * b"},
  };
}

std::string describe(const ex::LowerParams& p) {
  return "block=" + std::to_string(p.block) + " items=" + std::to_string(p.items) + " vector=" +
         std::to_string(p.vector) + " threads_per_row=" + std::to_string(p.threads_per_row);
}

struct Launch {
  std::int64_t rows = 1;
  std::int64_t cols = 1;
  unsigned grid = 0;      // 0: geometry()'s
  bool in_place = false;  // output 0 written into input 0's buffer
};

constexpr std::size_t kGuard = 64;

// One launch of one lowered kernel, in three steps: prepare() and check() are host work alone and
// run on worker threads (the inputs and the float64 reference of a problem of millions of
// elements take a core most of a second), run_on_gpu() runs on the thread whose context is
// current. Each step frees what the later ones no longer need.
struct Job {
  std::size_t kernel = 0;  // the (case, params) pair, an index into check_cases()'s list
  Launch launch;
  std::uint64_t seed = 0;
  std::vector<std::vector<unsigned char>> input_bytes;  // prepare() -> run_on_gpu()
  std::vector<std::vector<double>> reference;           // prepare() -> check()
  std::vector<std::vector<unsigned char>> results;      // run_on_gpu() -> check(): outputs and guard bytes
  std::string problems;                                 // empty when every output matches
};

// Fresh inputs from the launch's own seed, their storage bytes, and the reference on the same
// values.
void prepare(const Case& c, const ex::Program& program, Job& job) {
  const std::int64_t rows = job.launch.rows;
  const std::int64_t cols = job.launch.cols;
  const auto n = static_cast<std::size_t>(rows * cols);
  std::mt19937_64 rng(job.seed);
  std::vector<std::vector<double>> inputs;
  for (const ex::Input& in : program.inputs()) {
    const std::size_t count = in.kind == ex::InputKind::row ? static_cast<std::size_t>(cols) : n;
    inputs.push_back(random_values(count, in.dtype, c.values, rng));
    job.input_bytes.push_back(to_storage(inputs.back(), in.dtype));
  }
  job.reference = ex::evaluate(program, inputs, rows, cols);
}

// Uploads the inputs, launches on NaN-poisoned outputs and downloads them with their guard bytes.
void run_on_gpu(const ex::Program& program, const ex::LoweredKernel& lowered, detail::Kernel& kernel, Job& job) {
  const std::int64_t rows = job.launch.rows;
  const std::int64_t cols = job.launch.cols;
  const auto n = static_cast<std::size_t>(rows * cols);
  const bool in_place = job.launch.in_place;
  detail::Stream stream;

  std::vector<detail::DeviceBuffer> input_buffers;
  for (const std::vector<unsigned char>& bytes : job.input_bytes) {
    input_buffers.emplace_back(bytes.size() + kGuard);
    input_buffers.back().upload(bytes.data(), bytes.size());
  }
  job.input_bytes = {};

  std::vector<detail::DeviceBuffer> output_buffers;
  for (const ex::Output& out : program.outputs()) {
    output_buffers.emplace_back(n * static_cast<std::size_t>(element_bytes(out.dtype)) + kGuard);
    output_buffers.back().fill_bytes(0xFF, stream.get());
  }
  if (in_place) {
    const ex::Output& out = program.outputs()[0];
    if (program.inputs()[0].kind != ex::InputKind::full || program.inputs()[0].dtype != out.dtype) {
      job.problems = "in place needs input 0 full and of output 0's dtype";
      return;
    }
  }

  detail::KernelArgs args;
  for (const auto& buffer : input_buffers) args.add(buffer.get());
  for (std::size_t o = 0; o < output_buffers.size(); ++o) {
    args.add(in_place && o == 0 ? input_buffers[0].get() : output_buffers[o].get());
  }
  args.add(static_cast<long long>(rows)).add(static_cast<long long>(cols));
  LaunchGeometry geometry = lowered.geometry(program, rows, cols);
  if (job.launch.grid != 0) geometry.grid[0] = job.launch.grid;
  detail::launch(kernel, geometry, args, stream.get());
  stream.synchronize();

  for (std::size_t o = 0; o < program.outputs().size(); ++o) {
    const detail::DeviceBuffer& buffer = in_place && o == 0 ? input_buffers[0] : output_buffers[o];
    const std::size_t bytes = n * static_cast<std::size_t>(element_bytes(program.outputs()[o].dtype));
    job.results.emplace_back(bytes + kGuard);
    buffer.download(job.results.back().data(), job.results.back().size());
  }
}

// The guard bytes past each output (an output in place of input 0 has none of its own) and each
// output against the reference.
void check(const Case& c, const ex::Program& program, Job& job) {
  const std::int64_t cols = job.launch.cols;
  const auto n = static_cast<std::size_t>(job.launch.rows * cols);
  for (std::size_t o = 0; o < job.results.size(); ++o) {
    const ex::Output& out = program.outputs()[o];
    const bool here = job.launch.in_place && o == 0;
    const std::vector<unsigned char>& result = job.results[o];
    const std::size_t bytes = n * static_cast<std::size_t>(element_bytes(out.dtype));
    const bool guarded = here ? true
                              : std::all_of(result.begin() + static_cast<std::ptrdiff_t>(bytes), result.end(),
                                            [](unsigned char x) { return x == 0xFF; });
    if (!guarded) job.problems += " output '" + out.name + "' written past its end;";
    const std::string wrong = compare(from_storage(result, out.dtype, n), job.reference[o],
                                      tolerance(out.dtype, program.has_reduction(), cols, c.sum_scale, c.compute_atol), cols);
    if (!wrong.empty()) job.problems += " output '" + out.name + "': " + wrong;
  }
  job.reference = {};
  job.results = {};
}

// The host side of a list of jobs on every core: prepare(i) in the order of i, and check(i) of each
// job the calling thread hands back after its launch. Jobs run across (case, params) pairs, since
// one job of a pair (its largest size) is most of the pair's host work. The jobs started and not
// yet checked hold at most 4M elements a core (inputs, reference and outputs came to some 35
// bytes an element: about 150 MB a core) unless one job alone is larger; counted in elements,
// not jobs, so that every core can be on one of the largest while the GPU takes them in order.
class HostWork {
 public:
  HostWork(std::vector<std::size_t> elements, std::function<void(std::size_t)> prepare,
           std::function<void(std::size_t)> check)
      : elements_(std::move(elements)),
        prepare_(std::move(prepare)),
        check_(std::move(check)),
        prepared_(elements_.size(), false) {
    const std::size_t threads = std::max(1u, std::thread::hardware_concurrency());
    budget_ = threads * (std::size_t{1} << 22);
    try {
      for (std::size_t t = 0; t < threads; ++t) threads_.emplace_back([this] { work(); });
    } catch (...) {
      stop();
      throw;
    }
  }
  HostWork(const HostWork&) = delete;
  HostWork& operator=(const HostWork&) = delete;
  // A worker may still be inside prepare(): it finishes that job, and no other, before the join.
  ~HostWork() { stop(); }

  // Waits for prepare(i); rethrows what any step threw.
  void wait_prepared(std::size_t i) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return failure_ || prepared_[i]; });
    if (failure_) std::rethrow_exception(failure_);
  }

  void check(std::size_t i) {
    {
      const std::lock_guard lock(mutex_);
      to_check_.push_back(i);
    }
    changed_.notify_all();
  }

  // Waits for every check handed over; rethrows what any step threw.
  void finish() {
    {
      const std::lock_guard lock(mutex_);
      handed_all_ = true;
    }
    changed_.notify_all();
    join();
    if (failure_) std::rethrow_exception(failure_);
  }

 private:
  bool can_prepare() const {
    return next_ < elements_.size() && (in_flight_ == 0 || in_flight_ + elements_[next_] <= budget_);
  }

  void work() {
    std::unique_lock lock(mutex_);
    for (;;) {
      changed_.wait(lock, [&] { return stopped_ || failure_ || !to_check_.empty() || can_prepare() || handed_all_; });
      if (stopped_ || failure_) return;
      // Checks first: they free memory and let the budget admit the next job.
      const bool checking = !to_check_.empty();
      if (!checking && !can_prepare()) return;  // everything handed over is checked or taken
      std::size_t i = 0;
      if (checking) {
        i = to_check_.front();
        to_check_.pop_front();
      } else {
        i = next_++;
        in_flight_ += elements_[i];
      }
      lock.unlock();
      std::exception_ptr thrown;
      try {
        if (checking) {
          check_(i);
        } else {
          prepare_(i);
        }
      } catch (...) {
        thrown = std::current_exception();
      }
      lock.lock();
      if (thrown && !failure_) failure_ = thrown;
      if (checking) {
        in_flight_ -= elements_[i];
      } else {
        prepared_[i] = true;
      }
      changed_.notify_all();
    }
  }

  void stop() {
    {
      const std::lock_guard lock(mutex_);
      stopped_ = true;
    }
    changed_.notify_all();
    join();
  }

  void join() {
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }

  const std::vector<std::size_t> elements_;
  const std::function<void(std::size_t)> prepare_;
  const std::function<void(std::size_t)> check_;
  std::size_t budget_ = 0;
  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<bool> prepared_;
  std::deque<std::size_t> to_check_;
  std::size_t next_ = 0;
  std::size_t in_flight_ = 0;
  bool handed_all_ = false;
  bool stopped_ = false;
  std::exception_ptr failure_;
};

using Sizes = std::vector<std::pair<std::int64_t, std::int64_t>>;

// Every pair of {1, 7, 33, 1000, 4097} but 4097 x 4097, whose float64 reference alone costs
// seconds per kernel on the host.
Sizes every_size() {
  Sizes sizes;
  for (const std::int64_t r : {1, 7, 33, 1000, 4097}) {
    for (const std::int64_t c : {1, 7, 33, 1000, 4097}) {
      if (r * c < 4097 * 4097) sizes.emplace_back(r, c);
    }
  }
  return sizes;
}

// cols a multiple of 4, so vector 2 and 4 apply.
Sizes vector_sizes() { return {{1, 4}, {7, 36}, {33, 1000}, {1000, 4096}, {4097, 8}, {3, 12}}; }

// Lowers each case with each params, runs it at each size that the params allow, and reports every
// failure together. Seeds number the launches in that order, whichever thread prepares them.
void check_cases(const std::vector<Case>& cases, const std::vector<ex::LowerParams>& params, const Sizes& sizes,
                 const std::vector<unsigned>& grids = {0}, bool in_place = false) {
  const std::string arch = gpu_test::device0().arch;
  detail::Context context(0);
  std::vector<ex::Program> programs;
  std::vector<std::pair<std::size_t, std::size_t>> kernels;  // (case, params)
  std::vector<Job> jobs;
  std::uint64_t seed = 1;
  for (std::size_t ci = 0; ci < cases.size(); ++ci) {
    programs.push_back(ex::parse(cases[ci].text));
    for (std::size_t pi = 0; pi < params.size(); ++pi) {
      kernels.emplace_back(ci, pi);
      for (const auto& [rows, cols] : sizes) {
        if (!ex::violation(programs[ci], params[pi], rows, cols).empty()) continue;
        for (const unsigned grid : grids) {
          Job job;
          job.kernel = kernels.size() - 1;
          job.launch = {rows, cols, grid, in_place};
          job.seed = seed++;
          jobs.push_back(std::move(job));
        }
      }
    }
  }

  std::vector<std::size_t> elements;
  for (const Job& job : jobs) elements.push_back(static_cast<std::size_t>(job.launch.rows * job.launch.cols));
  HostWork host(
      std::move(elements),
      [&](std::size_t i) {
        const std::size_t ci = kernels[jobs[i].kernel].first;
        prepare(cases[ci], programs[ci], jobs[i]);
      },
      [&](std::size_t i) {
        const std::size_t ci = kernels[jobs[i].kernel].first;
        check(cases[ci], programs[ci], jobs[i]);
      });
  std::size_t next = 0;
  for (std::size_t k = 0; k < kernels.size(); ++k) {
    const ex::Program& program = programs[kernels[k].first];
    const ex::LoweredKernel lowered = ex::lower(program, params[kernels[k].second], arch);
    detail::Module module(lowered.cubin);
    detail::Kernel kernel = module.kernel(lowered.name);
    for (; next < jobs.size() && jobs[next].kernel == k; ++next) {
      host.wait_prepared(next);
      run_on_gpu(program, lowered, kernel, jobs[next]);
      host.check(next);
    }
  }
  host.finish();

  std::vector<std::string> problems;
  for (const Job& job : jobs) {
    if (job.problems.empty()) continue;
    const Case& c = cases[kernels[job.kernel].first];
    problems.push_back(c.label + " [" + c.text + "] " + describe(params[kernels[job.kernel].second]) +
                       " rows=" + std::to_string(job.launch.rows) + " cols=" + std::to_string(job.launch.cols) +
                       " grid=" + std::to_string(job.launch.grid) + ":" + job.problems);
  }
  std::printf("%zu launches checked\n", jobs.size());
  EXPECT_GT(jobs.size(), 0u);
  std::string all;
  for (const auto& p : problems) all += p + "\n";
  EXPECT_TRUE(problems.empty()) << problems.size() << " failures:\n" << all;
}

const std::vector<ex::LowerParams> kOperatorParams = {{256, 4, 1, 32}, {128, 1, 1, 128}};
const Sizes kOperatorSizes = {{1, 1}, {7, 33}, {33, 4097}, {1000, 7}, {4097, 1}, {1000, 1000}};

TEST(SM90_ExprGpu, EveryOperatorAtFp32) {
  GMJIT_REQUIRE_SM90();
  check_cases(operator_cases("fp32"), kOperatorParams, kOperatorSizes);
}

TEST(SM90_ExprGpu, EveryOperatorAtFp16) {
  GMJIT_REQUIRE_SM90();
  check_cases(operator_cases("fp16"), kOperatorParams, kOperatorSizes);
}

TEST(SM90_ExprGpu, EveryOperatorAtBf16) {
  GMJIT_REQUIRE_SM90();
  check_cases(operator_cases("bf16"), kOperatorParams, kOperatorSizes);
}

TEST(SM90_ExprGpu, EveryOperatorWithVectorLoads) {
  GMJIT_REQUIRE_SM90();
  for (const auto& d : kDtypes) {
    SCOPED_TRACE(d);
    check_cases(operator_cases(d), {{256, 2, 4, 32}, {64, 4, 2, 64}}, vector_sizes());
  }
}

TEST(SM90_ExprGpu, CompositesAtEverySizeWithScalarLoads) {
  GMJIT_REQUIRE_SM90();
  for (const auto& d : kDtypes) {
    SCOPED_TRACE(d);
    check_cases(composite_cases(d), {{256, 4, 1, 32}, {256, 4, 1, 256}, {32, 1, 1, 32}}, every_size());
  }
}

TEST(SM90_ExprGpu, CompositesWithVectorLoadsAtSeveralParams) {
  GMJIT_REQUIRE_SM90();
  const std::vector<ex::LowerParams> params = {
      {256, 4, 4, 32}, {128, 2, 2, 32}, {512, 4, 4, 512}, {1024, 16, 4, 1024}, {64, 1, 2, 64}, {256, 8, 2, 256}};
  for (const auto& d : kDtypes) {
    SCOPED_TRACE(d);
    check_cases(composite_cases(d), params, vector_sizes());
  }
}

// A grid far smaller than geometry() asks: every thread takes many steps of the grid-stride loops
// (elements, or rows).
TEST(SM90_ExprGpu, SmallGridsStrideOverTheProblem) {
  GMJIT_REQUIRE_SM90();
  for (const auto& d : kDtypes) {
    SCOPED_TRACE(d);
    check_cases(composite_cases(d), {{256, 4, 1, 32}, {128, 2, 4, 128}, {256, 1, 2, 32}},
                {{1000, 1000}, {4097, 36}, {33, 4096}}, {1, 3});
  }
}

// The ABI allows an output to be the buffer of a full input of its dtype.
TEST(SM90_ExprGpu, OutputInPlaceOfItsInput) {
  GMJIT_REQUIRE_SM90();
  for (const auto& d : kDtypes) {
    SCOPED_TRACE(d);
    check_cases({composite_cases(d)[0], composite_cases(d)[1], composite_cases(d)[3]},
                {{256, 4, 1, 32}, {256, 4, 4, 256}, {128, 2, 2, 32}}, {{7, 36}, {1000, 1000}, {33, 4096}}, {0, 2},
                true);
  }
}

// --- The host side, checked without a GPU ---------------------------------------------------

TEST(ExprGpuHost, HalfAndBfloatBitsRoundTrip) {
  EXPECT_EQ(half_bits(1.0), 0x3c00);
  EXPECT_EQ(half_bits(-2.0), 0xc000);
  EXPECT_EQ(half_bits(65504.0), 0x7bff);
  EXPECT_EQ(half_bits(std::ldexp(1.0, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(half_bits(std::ldexp(1.0, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(half_bits(INFINITY), 0x7c00);
  EXPECT_EQ(half_bits(-0.0), 0x8000);
  EXPECT_EQ(bf16_bits(1.0), 0x3f80);
  EXPECT_EQ(bf16_bits(-2.0), 0xc000);
  EXPECT_TRUE(std::isnan(half_value(0xffff)));
  EXPECT_TRUE(std::isnan(bf16_value(0xffff)));
  std::mt19937_64 rng(3);
  for (const ex::Dtype dtype : {ex::Dtype::f16, ex::Dtype::bf16, ex::Dtype::f32}) {
    for (const Values kind : {Values::signed_range, Values::positive, Values::discrete}) {
      const std::vector<double> v = random_values(1000, dtype, kind, rng);
      for (const double x : v) {
        ASSERT_NE(x, 0.0);
        ASSERT_EQ(x, ex::round_to(x, dtype));
        if (kind == Values::positive) ASSERT_GT(x, 0.0);
      }
      EXPECT_EQ(from_storage(to_storage(v, dtype), dtype, v.size()), v) << ex::to_string(dtype);
    }
  }
  // Every finite half round-trips, subnormals included.
  for (std::uint32_t bits = 0; bits < 0x10000; ++bits) {
    const double x = half_value(static_cast<std::uint16_t>(bits));
    if (std::isnan(x)) continue;
    ASSERT_EQ(half_bits(x), bits) << bits;
    ASSERT_EQ(ex::round_to(x, ex::Dtype::f16), x) << bits;
  }
}

TEST(ExprGpuHost, CompareUsesAbsoluteAndRelativeToleranceAndRejectsPoison) {
  const Tolerance t{1e-5, 1e-3};
  EXPECT_EQ(compare({1.0, 100.0, 0.0}, {1.0005, 100.09, 5e-6}, t, 3), "");
  EXPECT_NE(compare({1.0}, {1.002}, t, 1), "");
  EXPECT_NE(compare({0.0}, {2e-5}, t, 1), "");
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<unsigned char> poison(8, 0xFF);
  const std::string wrong = compare(from_storage(poison, ex::Dtype::f16, 4), {1, 2, 3, 4}, t, 2);
  EXPECT_NE(wrong.find("4 of 4"), std::string::npos) << wrong;
  EXPECT_NE(wrong.find("[1,1]"), std::string::npos) << wrong;
  EXPECT_EQ(compare({nan, INFINITY}, {nan, INFINITY}, t, 2), "");
  EXPECT_NE(compare({1.0}, {nan}, t, 1), "");
  EXPECT_NE(compare({-INFINITY}, {INFINITY}, t, 1), "");
  EXPECT_NE(compare({1.0, 2.0}, {1.0}, t, 1), "");
}

TEST(ExprGpuHost, ToleranceFollowsTheStorageDtypeAndTheRowLength) {
  const Tolerance f32 = tolerance(ex::Dtype::f32, false, 7, 0);
  const Tolerance f16 = tolerance(ex::Dtype::f16, false, 7, 0);
  const Tolerance bf16 = tolerance(ex::Dtype::bf16, false, 7, 0);
  EXPECT_LE(f32.rtol, 3e-5);
  // Half an ulp of the stored output always passes; a whole ulp of bf16 (2^-7) does not.
  EXPECT_GE(f16.rtol, std::ldexp(1.0, -11));
  EXPECT_GE(bf16.rtol, std::ldexp(1.0, -8));
  EXPECT_LT(bf16.rtol, std::ldexp(1.0, -6));
  EXPECT_LT(f16.rtol, std::ldexp(1.0, -9));
  EXPECT_GT(tolerance(ex::Dtype::f32, true, 4097, 9).atol, tolerance(ex::Dtype::f32, true, 7, 9).atol);
  EXPECT_EQ(tolerance(ex::Dtype::f32, true, 4097, 0).atol, tolerance(ex::Dtype::f32, true, 7, 0).atol);
  // The reference of a stored value rounded to nearest is within the tolerance of every dtype.
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> dist(-100, 100);
  for (int i = 0; i < 10000; ++i) {
    const double r = dist(rng);
    for (const ex::Dtype d : {ex::Dtype::f32, ex::Dtype::f16, ex::Dtype::bf16}) {
      const Tolerance t = tolerance(d, false, 1, 0);
      ASSERT_EQ(compare({ex::round_to(r, d)}, {r}, t, 1), "") << ex::to_string(d) << " " << r;
    }
  }
}

// HostWork runs only where a GPU is; a hang or a lost job there costs GPU time, so it is checked
// here with the calling thread's step standing in for the launch.
TEST(ExprGpuHost, HostWorkPreparesBeforeAndChecksAfterEachJobAndPassesOnFailures) {
  // Sizes past the budget too, which must still run (alone).
  std::vector<std::size_t> elements;
  for (std::size_t i = 0; i < 300; ++i) elements.push_back(i % 50 == 7 ? std::size_t{1} << 40 : (i * 7919) % 100'000);
  std::vector<int> step(elements.size(), 0);  // 1 prepared, 2 launched, 3 checked
  {
    HostWork host(
        elements, [&](std::size_t i) { step[i] = step[i] == 0 ? 1 : -1; },
        [&](std::size_t i) { step[i] = step[i] == 2 ? 3 : -1; });
    for (std::size_t i = 0; i < elements.size(); ++i) {
      host.wait_prepared(i);
      step[i] = step[i] == 1 ? 2 : -1;
      host.check(i);
    }
    host.finish();
  }
  EXPECT_EQ(std::count(step.begin(), step.end(), 3), static_cast<std::ptrdiff_t>(step.size()));

  // A worker's exception reaches the calling thread, and the workers stop.
  const auto thrown = [&](std::size_t failing_prepare, std::size_t failing_check) {
    try {
      HostWork host(
          elements, [&](std::size_t i) { if (i == failing_prepare) throw std::runtime_error("prepare"); },
          [&](std::size_t i) { if (i == failing_check) throw std::runtime_error("check"); });
      for (std::size_t i = 0; i < elements.size(); ++i) {
        host.wait_prepared(i);
        host.check(i);
      }
      host.finish();
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(thrown(123, elements.size()), "prepare");
  EXPECT_EQ(thrown(elements.size(), 45), "check");
  EXPECT_EQ(thrown(elements.size(), elements.size()), "");
}

// evaluate() of the cases, on the host, gives finite values on the inputs the GPU tests use: no
// NaN reference can hide an unwritten (NaN-poisoned) element.
TEST(ExprGpuHost, EveryCaseHasAFiniteReference) {
  std::mt19937_64 rng(11);
  for (const auto& d : kDtypes) {
    std::vector<Case> cases = operator_cases(d);
    for (const Case& c : composite_cases(d)) cases.push_back(c);
    for (const Case& c : cases) {
      const ex::Program program = ex::parse(c.text);
      const std::int64_t rows = 7;
      const std::int64_t cols = 33;
      std::vector<std::vector<double>> inputs;
      for (const ex::Input& in : program.inputs()) {
        inputs.push_back(random_values(in.kind == ex::InputKind::row ? cols : rows * cols, in.dtype, c.values, rng));
      }
      for (const auto& out : ex::evaluate(program, inputs, rows, cols)) {
        for (const double x : out) ASSERT_TRUE(std::isfinite(x)) << c.text;
      }
    }
  }
}

}  // namespace
}  // namespace gmjit
