// compute/kernels/thread_pool.h: a fixed pool of worker threads and a
// parallel-for over index ranges. It only decides who runs a chunk, never what
// a chunk computes, so results cannot depend on the number of threads.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <type_traits>
#include <vector>

#include "compute/kernels/dispatch.h"

namespace sluice::kernels {

// Cores this process may run on (sched_getaffinity), at least 1.
size_t available_cores();

// The thread count to use: `flag` when given (from --threads), else
// SLUICE_THREADS when set, else available_cores(). Zero or a non-number is an
// Error naming the flag or variable.
size_t resolve_thread_count(std::optional<size_t> flag);

class ThreadPool {
 public:
  // `threads` counts the calling thread: a pool of 1 starts no workers.
  explicit ThreadPool(size_t threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  size_t size() const { return workers_.size() + 1; }

  // Calls body(begin, end) on disjoint chunks that cover [0, count) exactly
  // once; chunks are `grain` long (the last may be shorter). The caller works
  // too and returns when every chunk is done. The first exception a chunk
  // throws is rethrown here. Not reentrant: a body must not call back into
  // the same pool, and one pool serves one caller at a time.
  template <typename Body>
  void parallel_for(size_t count, size_t grain, Body&& body) {
    run(count, grain, &invoke<std::remove_reference_t<Body>>, &body);
  }

  // As parallel_for, but body(worker, begin, end) also learns which thread
  // runs the chunk: worker is in [0, size()), 0 being the caller, and no two
  // chunks run at once on one worker, so per-worker scratch needs no lock.
  template <typename Body>
  void parallel_for_workers(size_t count, size_t grain, Body&& body) {
    run(count, grain, &invoke_with_worker<std::remove_reference_t<Body>>, &body);
  }

 private:
  using Trampoline = void (*)(void* body, size_t worker, size_t begin, size_t end);
  template <typename Body>
  static void invoke(void* body, size_t, size_t begin, size_t end) {
    (*static_cast<Body*>(body))(begin, end);
  }
  template <typename Body>
  static void invoke_with_worker(void* body, size_t worker, size_t begin, size_t end) {
    (*static_cast<Body*>(body))(worker, begin, end);
  }

  void run(size_t count, size_t grain, Trampoline trampoline, void* body);
  void worker_loop(size_t worker);
  void work_on_current_job(std::unique_lock<std::mutex>& lock, size_t worker);
  bool job_posted(uint64_t seen) const;

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  // The current job, guarded by mutex_. generation_, stopping_ and
  // finished_chunks_ change only under it too, but are atomic so that a
  // waiting thread can poll them for a while before it sleeps (thread_pool.cpp).
  Trampoline trampoline_ = nullptr;
  void* body_ = nullptr;
  size_t count_ = 0, grain_ = 1, chunks_ = 0;
  size_t next_chunk_ = 0;
  std::atomic<size_t> finished_chunks_ = 0;
  std::atomic<uint64_t> generation_ = 0;
  std::atomic<bool> stopping_ = false;
  std::exception_ptr error_;
};

// body(begin, end) over [0, count): through exec's pool in `grain`-long
// chunks, or in one call on the caller's thread when exec has no pool.
template <typename Body>
void split_over_pool(const Exec& exec, size_t count, size_t grain, Body&& body) {
  if (exec.pool != nullptr)
    exec.pool->parallel_for(count, grain, body);
  else if (count > 0)
    body(size_t{0}, count);
}

}  // namespace sluice::kernels
