// compute/convert/parallel.cpp: a minimal fork-join over std::thread.
// Threads are created per call: callers hand out coarse tasks (an expert,
// a chunk of rows), so thread start-up is noise next to the work.
#include "compute/convert/parallel.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace sluice::convert {

void parallel_for(size_t tasks, int threads, const std::function<void(size_t)>& fn) {
  const size_t workers = std::min<size_t>(tasks, static_cast<size_t>(std::max(threads, 1)));
  if (workers <= 1) {
    for (size_t task = 0; task < tasks; ++task) fn(task);
    return;
  }
  std::atomic<size_t> next{0};
  std::atomic<bool> stop{false};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto work = [&] {
    while (!stop.load(std::memory_order_relaxed)) {
      const size_t task = next.fetch_add(1);
      if (task >= tasks) return;
      try {
        fn(task);
      } catch (...) {
        std::lock_guard lock(error_mutex);
        if (!error) error = std::current_exception();
        stop = true;
      }
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(workers - 1);
  for (size_t i = 1; i < workers; ++i) pool.emplace_back(work);
  work();
  for (auto& thread : pool) thread.join();
  if (error) std::rethrow_exception(error);
}

int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace sluice::convert
