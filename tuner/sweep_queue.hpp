#pragma once
// The work of a sweep over several devices: one queue of problems per group of interchangeable
// devices (one fingerprint; one device each with --per-device). Problems are handed out one at a
// time, so a device that finishes early takes the next problem instead of idling behind a fixed
// split while a slow problem holds another device.

#include <cstddef>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace gmjit::tuner {

class SweepQueue {
 public:
  // The problems (indices into the sweep's list) that the devices of `group` share, in order.
  void add_group(const std::string& group, const std::vector<std::size_t>& problems) {
    std::lock_guard lock(mutex_);
    auto& queue = queues_[group];
    queue.insert(queue.end(), problems.begin(), problems.end());
  }

  // The next problem of the group; nullopt once it is empty or the queue was stopped.
  std::optional<std::size_t> take(const std::string& group) {
    std::lock_guard lock(mutex_);
    auto it = queues_.find(group);
    if (stopped_ || it == queues_.end() || it->second.empty()) return std::nullopt;
    const std::size_t problem = it->second.front();
    it->second.pop_front();
    return problem;
  }

  // Hands out nothing more; what is being tuned finishes or is interrupted by the caller.
  void stop() {
    std::lock_guard lock(mutex_);
    stopped_ = true;
  }

  std::size_t remaining() const {
    std::lock_guard lock(mutex_);
    std::size_t count = 0;
    for (const auto& [group, queue] : queues_) count += queue.size();
    return count;
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::string, std::deque<std::size_t>> queues_;
  bool stopped_ = false;
};

}  // namespace gmjit::tuner
