#pragma once
// Compiles candidates on a pool of threads in the order they are submitted, so compiles overlap
// the measuring of earlier candidates; the session submits only a few ahead of what it measures,
// so no core burns on candidates a budget will never reach. Binaries already in the cache skip
// NVRTC. Each thread hands its compiles to a compile process of its own (tuner/remote_compile.hpp
// says why), or compiles itself where no such process starts or GMJIT_COMPILE_IN_PROCESS=1 asks.

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cache/store.hpp"
#include "codegen/compiler.hpp"
#include "tuner/worker_process.hpp"

namespace gmjit::tuner {

using CompiledPtr = std::shared_ptr<const codegen::CompiledModule>;

// The module of `source` as the binary cache holds it (cubin, PTX, lowered name; no resource
// report), or null when it holds none or an unreadable one. Loads nothing: the worker does.
CompiledPtr cached_module(cache::Store& store, const codegen::GeneratedSource& source, const std::string& arch);

enum class CompileIn { processes, threads };

// threads when GMJIT_COMPILE_IN_PROCESS is 1, else processes.
CompileIn default_compile_in();

class CompilePool {
 public:
  // `threads` 0: every core; never more than `most` (the candidates there are), nor fewer than 1.
  CompilePool(std::string arch, unsigned threads, std::size_t most, CompileIn where = default_compile_in());
  ~CompilePool();
  CompilePool(const CompilePool&) = delete;
  CompilePool& operator=(const CompilePool&) = delete;

  // How many submitted compiles keep every thread busy while one result is being measured.
  std::size_t lookahead() const { return lookahead_; }
  std::size_t threads() const { return workers_.size(); }
  // processes, or threads once a compile process could not be started (the pool then says why
  // in a warning, once).
  CompileIn compiling_in() const { return in_processes_ ? CompileIn::processes : CompileIn::threads; }
  // Queues a compile, or hands out `cached` as it is; get() rethrows the compile's Error.
  std::shared_future<CompiledPtr> submit(codegen::GeneratedSource source, CompiledPtr cached = nullptr);

 private:
  struct Job {
    codegen::GeneratedSource source;
    std::promise<CompiledPtr> promise;
  };
  void work();
  CompiledPtr compile(const codegen::GeneratedSource& source, WorkerProcess& process);
  void start_compile_process(WorkerProcess& process);
  void fall_back_to_threads(const std::string& why);

  std::string arch_;
  std::atomic<bool> in_processes_ = false;
  std::string worker_path_;
  std::size_t lookahead_ = 2;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Job> jobs_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace gmjit::tuner
