#include "tuner/compile_pool.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>

#include "core/log.hpp"

namespace gmjit::tuner {

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

CompilePool::CompilePool(std::string arch, unsigned threads, std::size_t most) : arch_(std::move(arch)) {
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
      job.promise.set_value(codegen::shared_compiler().compile(job.source, arch_).module);
    } catch (...) {
      job.promise.set_exception(std::current_exception());
    }
  }
}

}  // namespace gmjit::tuner
