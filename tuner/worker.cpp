#include "tuner/worker.hpp"

#include <fmt/format.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <chrono>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "codegen/compiler.hpp"
#include "codegen/expr_kernel.hpp"
#include "gmjit/error.hpp"
#include "core/device.hpp"
#include "core/log.hpp"
#include "core/module.hpp"
#include "templates/manifest.hpp"
#include "templates/registry.hpp"
#include "tuner/harness.hpp"
#include "tuner/protocol.hpp"
#include "tuner/remote_compile.hpp"
#include "tuner/session.hpp"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace gmjit::tuner {

nlohmann::json device_to_json(const DeviceInfo& d) {
  return {{"ordinal", d.ordinal},
          {"name", d.name},
          {"cc_major", d.cc_major},
          {"cc_minor", d.cc_minor},
          {"arch", d.arch},
          {"sm_count", d.sm_count},
          {"l2_bytes", d.l2_bytes},
          {"shared_optin_bytes", d.shared_optin_bytes},
          {"global_memory_bytes", d.global_memory_bytes},
          {"driver_version", d.driver_version},
          {"nvrtc_major", d.nvrtc_major},
          {"nvrtc_minor", d.nvrtc_minor}};
}

DeviceInfo device_from_json(const nlohmann::json& j) {
  DeviceInfo d;
  d.ordinal = j.at("ordinal").get<int>();
  d.name = j.at("name").get<std::string>();
  d.cc_major = j.at("cc_major").get<int>();
  d.cc_minor = j.at("cc_minor").get<int>();
  d.arch = j.at("arch").get<std::string>();
  d.sm_count = j.at("sm_count").get<int>();
  d.l2_bytes = j.at("l2_bytes").get<long long>();
  d.shared_optin_bytes = j.at("shared_optin_bytes").get<int>();
  d.global_memory_bytes = j.at("global_memory_bytes").get<long long>();
  d.driver_version = j.at("driver_version").get<int>();
  d.nvrtc_major = j.at("nvrtc_major").get<int>();
  d.nvrtc_minor = j.at("nvrtc_minor").get<int>();
  return d;
}

DeviceInfo simulated_device(int ordinal) {
  DeviceInfo d;
  d.ordinal = ordinal;
  d.name = "gmjit simulated H200";
  // Several simulated devices, for tests of multi-device sweeps: as many as GMJIT_SIMULATED_DEVICES names.
  if (const auto names = simulated_device_names(); !names.empty()) {
    if (ordinal < 0 || static_cast<std::size_t>(ordinal) >= names.size()) {
      throw Error(ErrorKind::driver, 0,
                  fmt::format("simulated device {} does not exist (GMJIT_SIMULATED_DEVICES names {})", ordinal, names.size()));
    }
    d.name = names[static_cast<std::size_t>(ordinal)];
  }
  d.cc_major = 9;
  d.cc_minor = 0;
  d.arch = "sm_90a";
  d.sm_count = 132;
  d.l2_bytes = 60LL << 20;
  d.shared_optin_bytes = 232448;
  d.global_memory_bytes = 141LL << 30;
  d.driver_version = 13000;
  d.nvrtc_major = 13;
  d.nvrtc_minor = 0;
  return d;
}

namespace {

LaunchGeometry geometry_from_json(const nlohmann::json& j) {
  LaunchGeometry g;
  for (int i = 0; i < 3; ++i) {
    g.grid[i] = j.at("grid").at(i).get<unsigned>();
    g.block[i] = j.at("block").at(i).get<unsigned>();
  }
  g.dynamic_shared_bytes = j.at("shared_bytes").get<unsigned>();
  for (int i = 0; i < 3; ++i) g.cluster[i] = j.at("cluster").at(i).get<unsigned>();
  return g;
}

nlohmann::json failure(const std::string& status, const std::string& detail) {
  return {{"ok", true}, {"status", status}, {"detail", detail}};
}

// What a problem message needs on either backend: the kernel (a user's kernel is registered
// here first, since this process did not see the registration) and the parsed request.
struct ProblemRequest {
  const templates::KernelDescriptor* kernel = nullptr;
  std::string dtype;
  Shape shape;
  std::uint64_t seed = 1;
};

ProblemRequest read_problem(const Frame& frame) {
  const auto& h = frame.header;
  if (h.contains("user_kernel")) {
    templates::register_manifest_kernel(h["user_kernel"].at("manifest").get<std::string>(),
                                        h["user_kernel"].at("source").get<std::string>());
  }
  if (h.contains("expression")) {
    codegen::expr::register_kernel(h["expression"].at("name").get<std::string>(),
                                   h["expression"].at("text").get<std::string>());
  }
  ProblemRequest request;
  request.kernel = &templates::find_kernel(h.at("kernel").get<std::string>());
  request.dtype = h.at("dtype").get<std::string>();
  request.shape = h.at("shape").get<Shape>();
  request.seed = h.at("seed").get<std::uint64_t>();
  return request;
}

// A problem whose buffers cannot all be on the device is refused before anything is allocated,
// by either backend: its tensors, a double-precision reference of each output and the L2 flush
// buffer, as the harness allocates them (a lower bound: the CUDA context and modules take more).
// Otherwise the host would first generate inputs of that size, which can exhaust the host instead.
void check_fits_device(const ProblemRequest& request, const DeviceInfo& device) {
  const auto& dtype = templates::dtype_info(request.dtype);
  double bytes = 2.0 * static_cast<double>(device.l2_bytes);
  for (const auto& tensor : request.kernel->tensors(request.shape)) {
    const double elements = static_cast<double>(tensor.elements);
    bytes += elements * static_cast<double>(templates::tensor_dtype(tensor, dtype).bytes);
    if (tensor.output) bytes += elements * sizeof(double);
  }
  if (bytes > static_cast<double>(device.global_memory_bytes)) {
    constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
    throw Error(ErrorKind::device_limit, 0,
                fmt::format("the problem's tensors and references need {:.1f} GiB of device memory; {} has {:.1f} GiB",
                            bytes / kGiB, device.name, static_cast<double>(device.global_memory_bytes) / kGiB));
  }
}

std::optional<std::vector<std::vector<double>>> expected_outputs(const Frame& frame) {
  if (!frame.header.contains("expected_elements")) return std::nullopt;
  std::vector<std::vector<double>> outputs;
  std::size_t offset = 0;
  for (const auto& count : frame.header["expected_elements"]) {
    std::vector<double> values(count.get<std::size_t>());
    const std::size_t bytes = values.size() * sizeof(double);
    if (offset + bytes > frame.payload.size()) throw Error(ErrorKind::usage, 0, "expected outputs truncated");
    std::memcpy(values.data(), frame.payload.data() + offset, bytes);
    offset += bytes;
    outputs.push_back(std::move(values));
  }
  return outputs;
}

class Backend {
 public:
  virtual ~Backend() = default;
  virtual DeviceInfo device() const = 0;
  virtual void set_problem(const Frame& frame) = 0;
  // Returns the answer; sets `context_lost` when this process must exit after answering.
  virtual nlohmann::json trial(const Frame& frame, bool& context_lost) = 0;
  virtual nlohmann::json retime(const nlohmann::json& ids, int rounds) = 0;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int ordinal) : context_(ordinal), device_(detail::query_device(ordinal)) {}
  DeviceInfo device() const override { return device_; }

  void set_problem(const Frame& frame) override {
    loaded_.clear();
    harness_.reset();
    const ProblemRequest request = read_problem(frame);
    check_fits_device(request, device_);
    harness_ = std::make_unique<Harness>(*request.kernel, request.shape, request.dtype, device_, request.seed,
                                         expected_outputs(frame));
  }

  nlohmann::json trial(const Frame& frame, bool& context_lost) override {
    if (!harness_) throw Error(ErrorKind::usage, 0, "trial before problem");
    const auto& h = frame.header;
    const auto id = h.at("id").get<std::int64_t>();
    try {
      auto loaded = std::make_unique<Loaded>(frame.payload, h.at("lowered_name").get<std::string>(),
                                             geometry_from_json(h.at("geometry")), h.at("config").get<Config>());
      if (loaded->geometry.dynamic_shared_bytes > 0) loaded->kernel.reserve_dynamic_shared(loaded->geometry.dynamic_shared_bytes);
      const double error = harness_->verify(loaded->kernel, loaded->geometry, loaded->config);
      // The L2 error also when an element outside its bound failed the candidate: it shows what
      // the L2 check alone would have let through.
      const double l2 = harness_->last_l2_error();
      nlohmann::json answer = {{"ok", true}, {"verify_error", std::isfinite(l2) ? l2 : -1.0}};
      if (!(error <= harness_->tolerance())) {
        answer["status"] = "wrong_result";
        answer["detail"] = harness_->failure();
        return answer;
      }
      const Timing timing = harness_->time(loaded->kernel, loaded->geometry, loaded->config,
                                           h.at("measure").get<MeasureOptions>(), harness_->last_verify_ms());
      answer.update(nlohmann::json(timing));
      answer["status"] = "ok";
      loaded->batch = timing.batch;
      loaded_[id] = std::move(loaded);
      return answer;
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::device_limit) return failure("invalid", e.what());
      // A sticky error (illegal address, misaligned access, trap) poisons the context: any
      // later call fails too. Then this process is useless and must be replaced.
      try {
        context_.synchronize();
      } catch (const Error& sticky) {
        context_lost = true;
        return failure("crashed", e.what());
      }
      return failure("launch_failed", e.what());
    }
  }

  nlohmann::json retime(const nlohmann::json& ids, int rounds) override {
    std::vector<Harness::Entrant> entrants;
    for (const auto& id : ids) {
      Loaded& loaded = *loaded_.at(id.get<std::int64_t>());
      entrants.push_back({&loaded.kernel, loaded.geometry, loaded.config, loaded.batch});
    }
    nlohmann::json timings = nlohmann::json::array();
    for (const auto& t : harness_->retime(entrants, rounds)) timings.push_back(t);
    return {{"ok", true}, {"timings", timings}};
  }

 private:
  struct Loaded {
    Loaded(const std::vector<char>& cubin, const std::string& lowered, const LaunchGeometry& g, Config c)
        : module(cubin), kernel(module.kernel(lowered)), geometry(g), config(std::move(c)) {}
    detail::Module module;
    detail::Kernel kernel;
    LaunchGeometry geometry;
    Config config;
    int batch = 1;
  };
  detail::Context context_;
  DeviceInfo device_;
  std::unique_ptr<Harness> harness_;
  std::map<std::int64_t, std::unique_ptr<Loaded>> loaded_;
};

// A device that exists only as arithmetic, so the search, the protocol and the watchdog are
// tested without a GPU. A configuration's time is a fixed function of its parameters and the
// shape; a parameter named `mode` acts out the failures of tests/data/broken (3 crashes the
// process, 4 hangs it, 5 computes a wrong result). Where the problem came with expected outputs
// (a user kernel's host reference), a candidate's outputs are those values rounded to the output
// dtype, a parameter named `tail` zeroes that many of their last elements (the kernel of
// tests/data/wrong_tail), and they are verified on the host as the device verifies.
class SimulatedBackend final : public Backend {
 public:
  explicit SimulatedBackend(int ordinal) : device_(simulated_device(ordinal)) {}
  DeviceInfo device() const override { return device_; }

  void set_problem(const Frame& frame) override {
    problem_ = {};
    const ProblemRequest request = read_problem(frame);
    check_fits_device(request, device_);
    problem_ = request;
    times_.clear();
    expected_ = expected_outputs(frame);
  }

  nlohmann::json trial(const Frame& frame, bool&) override {
    if (!problem_.kernel) throw Error(ErrorKind::usage, 0, "trial before problem");
    const Config config = frame.header.at("config").get<Config>();
    if (auto mode = config.find("mode"); mode != config.end()) {
      if (mode->second == 3) std::abort();
      if (mode->second == 4) {
        // The pid lets a test find this process while it hangs (tests/nvrtc/test_worker_lifetime.cpp).
        detail::logger().debug("gmjit-worker {}: simulated hang on candidate {}", ::getpid(),
                               frame.header.at("id").get<std::int64_t>());
        for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
      }
      if (mode->second == 5) {
        return {{"ok", true}, {"status", "wrong_result"}, {"verify_error", 0.5},
                {"detail", "relative L2 error 0.5 above tolerance 1e-06"}};
      }
    }
    if (expected_) {
      if (auto answer = verify(config); !answer.empty()) return answer;
    }
    Timing timing;
    timing.median_ms = time_of(config);
    timing.repetitions = 10;
    timing.batch = timing.median_ms < 0.02 ? batch_size(timing.median_ms, MeasureOptions{}) : 1;
    times_[frame.header.at("id").get<std::int64_t>()] = timing.median_ms;
    nlohmann::json answer = timing;
    answer.update({{"ok", true}, {"status", "ok"}, {"verify_error", 0.0}});
    return answer;
  }

  nlohmann::json retime(const nlohmann::json& ids, int rounds) override {
    nlohmann::json timings = nlohmann::json::array();
    for (const auto& id : ids) {
      Timing t;
      t.median_ms = times_.at(id.get<std::int64_t>());
      t.repetitions = rounds;
      timings.push_back(t);
    }
    return {{"ok", true}, {"timings", timings}};
  }

 private:
  // The wrong_result answer when the outputs this configuration stands for fail verification,
  // else an empty object.
  nlohmann::json verify(const Config& config) const {
    const auto& kernel = *problem_.kernel;
    const auto& problem_dtype = templates::dtype_info(problem_.dtype);
    const double tolerance = kernel.tolerance(problem_dtype, problem_.shape);
    const auto tail = config.find("tail");
    std::size_t output = 0;
    double worst = 0;
    for (const auto& arg : kernel.tensors(problem_.shape)) {
      if (!arg.output) continue;
      const std::vector<double>& expected = expected_->at(output++);
      const auto& dtype = templates::tensor_dtype(arg, problem_dtype);
      const auto n = static_cast<std::int64_t>(expected.size());
      std::vector<unsigned char> out(expected.size() * dtype.bytes);
      for (std::int64_t i = 0; i < n; ++i) {
        const bool zeroed = tail != config.end() && i >= n - tail->second;
        store_element(dtype, out.data(), i, zeroed ? 0.0 : expected[i]);
      }
      const auto bound = templates::element_bound(kernel, dtype, problem_.shape);
      const OutputCheck check = check_output(dtype, out.data(), expected.data(), n, bound);
      worst = std::max(worst, check.l2_error);
      if (const auto why = output_failure(arg.name, n, check, bound, tolerance); !why.empty()) {
        return {{"ok", true}, {"status", "wrong_result"}, {"verify_error", check.l2_error}, {"detail", why}};
      }
    }
    return {};
  }

  double time_of(const Config& config) const {
    const std::string text = format_assignments(config) + "|" + format_assignments(problem_.shape);
    const std::uint64_t h = XXH3_64bits(text.data(), text.size());
    double work = 1;
    for (const auto& [key, value] : problem_.shape) work *= static_cast<double>(value);
    return 1e-6 * std::cbrt(work) * (1.0 + static_cast<double>(h % 1000) / 250.0);
  }

  DeviceInfo device_;
  ProblemRequest problem_;
  std::optional<std::vector<std::vector<double>>> expected_;
  std::map<std::int64_t, double> times_;
};

void answer(const nlohmann::json& header) { write_frame(STDOUT_FILENO, Frame{header, {}}); }

nlohmann::json error_answer(const std::exception& e) {
  const auto* error = dynamic_cast<const Error*>(&e);
  return {{"ok", false}, {"kind", error ? to_string(error->kind()) : "internal"}, {"error", e.what()}};
}

// A compile process: no device is opened, so it needs no GPU and holds none.
int serve_compiles() {
  try {
    answer({{"ok", true}, {"compile", true}});
    for (;;) {
      Frame request;
      if (read_frame(STDIN_FILENO, request, -1) != ReadResult::frame) return 0;  // parent closed the pipe
      const std::string op = request.header.value("op", std::string());
      write_frame(STDOUT_FILENO, op == "compile" ? answer_compile_request(request)
                                                 : Frame{error_answer(Error(ErrorKind::usage, 0,
                                                                            "a compile process answers only compile "
                                                                            "requests, not '" + op + "'")),
                                                         {}});
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gmjit-worker: %s\n", e.what());
    return 1;
  }
}

}  // namespace

int worker_main(int argc, char** argv) {
  // This process dies with its parent: a kill -9 of the tuner while a candidate hangs here would
  // otherwise leave it spinning under init, holding the GPU. Armed first, before anything can hang.
  const bool death_signal_armed = ::prctl(PR_SET_PDEATHSIG, SIGKILL) == 0;
  // The parent may die first; a write to its closed pipe must fail, not kill us silently mid-answer.
  std::signal(SIGPIPE, SIG_IGN);
  int ordinal = 0;
  bool simulated = false;
  bool compile_only = false;
  long parent = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--device" && i + 1 < argc) {
      ordinal = std::atoi(argv[++i]);
    } else if (arg == "--simulated") {
      simulated = true;
    } else if (arg == kCompileWorkerFlag) {
      compile_only = true;
    } else if (arg == "--parent" && i + 1 < argc) {
      parent = std::atol(argv[++i]);
    } else {
      std::fprintf(stderr, "gmjit-worker: unknown argument '%s' (this program is started by libgmjit)\n", arg.c_str());
      return 2;
    }
  }
  if (!death_signal_armed) {
    std::fprintf(stderr, "gmjit-worker: cannot ask to die with the parent: %s\n", std::strerror(errno));
    return kWorkerParentGone;
  }
  // A parent that died between starting this process and the prctl above sent no signal; this
  // process was then adopted by another, and nobody is left to talk to.
  if (parent > 0 && static_cast<long>(::getppid()) != parent) {
    std::fprintf(stderr, "gmjit-worker: parent %ld is gone; exiting\n", parent);
    return kWorkerParentGone;
  }
  if (compile_only) return serve_compiles();
  std::unique_ptr<Backend> backend;
  try {
    if (simulated) {
      backend = std::make_unique<SimulatedBackend>(ordinal);
    } else {
      backend = std::make_unique<CudaBackend>(ordinal);
    }
    answer({{"ok", true}, {"device", device_to_json(backend->device())}});
  } catch (const std::exception& e) {
    answer(error_answer(e));
    return 1;
  }
  for (;;) {
    Frame request;
    try {
      if (read_frame(STDIN_FILENO, request, -1) != ReadResult::frame) return 0;  // parent closed the pipe
    } catch (const std::exception& e) {
      std::fprintf(stderr, "gmjit-worker: %s\n", e.what());
      return 1;
    }
    bool context_lost = false;
    nlohmann::json reply;
    try {
      const std::string op = request.header.at("op").get<std::string>();
      if (op == "problem") {
        backend->set_problem(request);
        reply = {{"ok", true}};
      } else if (op == "trial") {
        reply = backend->trial(request, context_lost);
      } else if (op == "retime") {
        reply = backend->retime(request.header.at("ids"), request.header.at("rounds").get<int>());
      } else {
        throw Error(ErrorKind::usage, 0, "unknown request '" + op + "'");
      }
    } catch (const std::exception& e) {
      reply = error_answer(e);
    }
    try {
      answer(reply);
    } catch (const std::exception&) {
      return 1;
    }
    if (context_lost) return kWorkerContextLost;
  }
}

}  // namespace gmjit::tuner
