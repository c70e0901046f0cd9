#include "tuner/compile_pool.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <cstdlib>

#include "core/log.hpp"
#include "gmjit/error.hpp"
#include "templates/registry.hpp"
#include "tuner/remote_compile.hpp"
#include "tuner/session.hpp"

namespace gmjit::tuner {

namespace {

// Far above any compile (the largest Hopper gemm takes about a second), so only a hung or
// runaway compiler meets it.
constexpr double kCompileProcessSeconds = 300;

// A Ctrl-C, a scheduler's SIGTERM or SIGKILL, a closed terminal; a crash signal (SIGSEGV,
// SIGABRT) in NVRTC is the candidate's compile failing.
bool stopped_from_outside(int signal) {
  return signal == SIGINT || signal == SIGTERM || signal == SIGKILL || signal == SIGHUP;
}

}  // namespace

CompiledPtr cached_module(cache::Store& store, const codegen::GeneratedSource& source, const std::string& arch) {
  const auto binary = store.get_binary(codegen::compile_key(source, arch));
  if (!binary) return nullptr;
  try {
    auto module = std::make_shared<codegen::CompiledModule>();
    const auto description = nlohmann::json::parse(binary->resources_json);
    module->source = source;
    module->arch = binary->arch;
    module->compile_key = binary->compile_key;
    module->lowered_name = description.at("lowered_name").get<std::string>();
    module->cubin = binary->cubin;
    module->ptx = binary->ptx;
    return module;
  } catch (const std::exception& e) {
    detail::logger().warn("cached binary {} is unreadable ({}); recompiling", binary->compile_key, e.what());
    return nullptr;
  }
}

CompileIn default_compile_in() {
  const char* value = std::getenv("GMJIT_COMPILE_IN_PROCESS");
  return value != nullptr && std::string(value) == "1" ? CompileIn::threads : CompileIn::processes;
}

CompilePool::CompilePool(std::string arch, unsigned threads, std::size_t most, CompileIn where)
    : arch_(std::move(arch)) {
  if (where == CompileIn::processes) {
    try {
      worker_path_ = find_worker();
      in_processes_ = true;
    } catch (const Error& e) {
      fall_back_to_threads(e.message());
    }
  }
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  threads = std::max(1u, static_cast<unsigned>(std::min<std::size_t>(threads, most)));
  lookahead_ = 2 * threads;
  for (unsigned t = 0; t < threads; ++t) workers_.emplace_back([this] { work(); });
}

CompilePool::~CompilePool() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& worker : workers_) worker.join();
}

std::shared_future<CompiledPtr> CompilePool::submit(codegen::GeneratedSource source, CompiledPtr cached) {
  if (cached) {
    std::promise<CompiledPtr> ready;
    ready.set_value(std::move(cached));
    return ready.get_future().share();
  }
  std::shared_future<CompiledPtr> result;
  {
    std::lock_guard lock(mutex_);
    jobs_.push_back({std::move(source), {}});
    result = jobs_.back().promise.get_future().share();
  }
  wake_.notify_one();
  return result;
}

void CompilePool::work() {
  WorkerProcess process;  // started at this thread's first compile, stopped as the thread ends
  for (;;) {
    Job job;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
      if (stop_) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    try {
      job.promise.set_value(compile(job.source, process));
    } catch (...) {
      job.promise.set_exception(std::current_exception());
    }
  }
}

CompiledPtr CompilePool::compile(const codegen::GeneratedSource& source, WorkerProcess& process) {
  if (in_processes_ && !process.running()) {
    try {
      start_compile_process(process);
    } catch (const Error& e) {
      fall_back_to_threads(e.message());
    }
  }
  // With an embedded header replaced here, only this process compiles what this process holds.
  if (!in_processes_ || templates::embedded_headers_replaced()) return codegen::shared_compiler().compile(source, arch_).module;
  codegen::check_arch(arch_);
  const std::string key = codegen::compile_key(source, arch_);
  if (auto kept = codegen::shared_compiler().remembered(key)) return kept;
  const Frame request = compile_request(source, arch_);
  Frame answer;
  std::string why;
  const auto outcome = process.call(&request, answer, kCompileProcessSeconds, why);
  if (outcome == WorkerProcess::Outcome::died && stopped_from_outside(process.ended_by_signal())) {
    // Not the candidate's fault, so not a compile failure to record: the session stops instead.
    throw Interrupted(fmt::format("a compile process was ended by signal {} ({})", process.ended_by_signal(),
                                  ::strsignal(process.ended_by_signal())));
  }
  if (outcome != WorkerProcess::Outcome::answered) {
    throw Error(ErrorKind::compile, 0, fmt::format("the compile process ended before it compiled {}: {}", source.file_name, why));
  }
  auto module = module_from_answer(std::move(answer), source);
  if (module->compile_key != key) {
    // Another build's gmjit-worker (GMJIT_WORKER) compiles other headers or options than this
    // library's key names; its binary is dropped, not cached under this key.
    fall_back_to_threads(fmt::format("{} compiled {} under key {}, where this library's key is {}", worker_path_,
                                     source.file_name, module->compile_key, key));
    return codegen::shared_compiler().compile(source, arch_).module;
  }
  codegen::shared_compiler().remember(module);
  return module;
}

void CompilePool::start_compile_process(WorkerProcess& process) {
  process.start(worker_path_, {kCompileWorkerFlag});
  Frame hello;
  std::string why;
  if (process.call(nullptr, hello, kCompileProcessSeconds, why) != WorkerProcess::Outcome::answered) {
    throw Error(ErrorKind::driver, 0, fmt::format("{} {} did not start: {}", worker_path_, kCompileWorkerFlag, why));
  }
  if (!hello.header.value("compile", false)) {
    process.stop();
    throw Error(ErrorKind::driver, 0, fmt::format("{} did not answer as a compile process", worker_path_));
  }
}

void CompilePool::fall_back_to_threads(const std::string& why) {
  if (in_processes_.exchange(false) || worker_path_.empty()) {
    detail::logger().warn("compiling in this process's threads, not in compile processes: {}", why);
  }
}

}  // namespace gmjit::tuner
