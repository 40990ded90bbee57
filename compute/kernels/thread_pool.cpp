// compute/kernels/thread_pool.cpp: worker threads claim chunks of the current
// job under one mutex. Chunk boundaries depend only on (count, grain), never
// on how many threads exist or which one arrives first.
#include "compute/kernels/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <string_view>
#include <utility>

#include "proto/error.h"

namespace sluice::kernels {

namespace {

// A decode step posts a few dozen short jobs with a little serial work between
// them. A worker asleep on the condition variable takes a futex wake-up to
// start each one, and the caller another to learn that the last chunk is
// done; so both poll for this long first, and sleep only when the pool has
// been idle that long.
constexpr std::chrono::microseconds kPollBeforeSleeping{100};

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

// Returns once ready() is true or kPollBeforeSleeping has passed; the caller
// then checks under the lock, and sleeps if it must.
template <typename Ready>
void poll_for(Ready&& ready) {
  const auto until = std::chrono::steady_clock::now() + kPollBeforeSleeping;
  while (std::chrono::steady_clock::now() < until) {
    for (int i = 0; i < 64; ++i) {
      if (ready()) return;
      cpu_relax();
    }
  }
}

}  // namespace

size_t available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  const int n = CPU_COUNT(&set);
  return n > 0 ? static_cast<size_t>(n) : 1;
}

size_t resolve_thread_count(std::optional<size_t> flag) {
  if (flag) {
    if (*flag == 0 || *flag > 1024) fail("--threads {}: expected 1 to 1024", *flag);
    return *flag;
  }
  const char* value = std::getenv("SLUICE_THREADS");
  if (value == nullptr || *value == '\0') return available_cores();
  const std::string_view text(value);
  size_t n = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || end != text.data() + text.size() || n == 0 || n > 1024)
    fail("SLUICE_THREADS={}: expected a thread count from 1 to 1024", text);
  return n;
}

ThreadPool::ThreadPool(size_t threads) {
  if (threads == 0) fail("thread pool: 0 threads");
  workers_.reserve(threads - 1);
  for (size_t i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::work_on_current_job(std::unique_lock<std::mutex>& lock, size_t worker) {
  // Runs with `lock` held and releases it only while a chunk runs.
  while (next_chunk_ < chunks_) {
    const size_t chunk = next_chunk_++;
    const size_t begin = chunk * grain_;
    const size_t end = std::min(count_, begin + grain_);
    const Trampoline trampoline = trampoline_;
    void* body = body_;
    lock.unlock();
    std::exception_ptr error;
    try {
      trampoline(body, worker, begin, end);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    if (error && !error_) error_ = error;
    if (++finished_chunks_ == chunks_) done_.notify_all();
  }
}

bool ThreadPool::job_posted(uint64_t seen) const {
  return stopping_.load(std::memory_order_acquire) || generation_.load(std::memory_order_acquire) != seen;
}

void ThreadPool::worker_loop(size_t worker) {
  uint64_t seen = 0;
  for (;;) {
    poll_for([&] { return job_posted(seen); });
    std::unique_lock lock(mutex_);
    wake_.wait(lock, [&] { return job_posted(seen); });
    if (stopping_) return;
    seen = generation_;
    work_on_current_job(lock, worker);
  }
}

void ThreadPool::run(size_t count, size_t grain, Trampoline trampoline, void* body) {
  if (count == 0) return;
  if (grain == 0) grain = 1;
  const size_t chunks = (count + grain - 1) / grain;
  if (workers_.empty() || chunks == 1) {
    for (size_t begin = 0; begin < count; begin += grain) trampoline(body, 0, begin, std::min(count, begin + grain));
    return;
  }
  std::unique_lock lock(mutex_);
  trampoline_ = trampoline;
  body_ = body;
  count_ = count;
  grain_ = grain;
  chunks_ = chunks;
  next_chunk_ = 0;
  finished_chunks_ = 0;
  error_ = nullptr;
  ++generation_;
  wake_.notify_all();
  work_on_current_job(lock, 0);
  if (finished_chunks_ != chunks_) {
    lock.unlock();
    poll_for([&] { return finished_chunks_.load(std::memory_order_acquire) == chunks; });
    lock.lock();
    done_.wait(lock, [&] { return finished_chunks_ == chunks_; });
  }
  chunks_ = 0;  // late-waking workers find nothing left to claim
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

}  // namespace sluice::kernels
