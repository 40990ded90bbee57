// ioworker/thread_backend.cpp: the pread reader pool, for where io_uring is
// unavailable. Each thread reads whole records through the container, which
// checks them; it only writes into the slot of the job it took.
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "ioworker/read_backend.h"
#include "proto/container.h"
#include "proto/error.h"

namespace sluice::ioworker {
namespace {

class ThreadBackend final : public ReadBackend {
 public:
  ThreadBackend(const Container& container, uint32_t threads, bool verify_crc, Completion completion)
      : container_(container), verify_crc_(verify_crc), completion_(std::move(completion)) {
    for (uint32_t i = 0; i < std::max<uint32_t>(threads, 1); ++i) threads_.emplace_back([this] { run(); });
  }
  ~ThreadBackend() override {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    ready_.notify_all();
    for (std::thread& t : threads_) t.join();
  }
  void submit(std::span<const ReadJob> jobs) override {
    {
      std::lock_guard lock(mutex_);
      jobs_.insert(jobs_.end(), jobs.begin(), jobs.end());
    }
    if (jobs.size() == 1) {
      ready_.notify_one();
    } else {
      ready_.notify_all();
    }
  }
  const char* name() const override { return "threads"; }

 private:
  void run() {
    for (;;) {
      ReadJob job;
      {
        std::unique_lock lock(mutex_);
        ready_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
        // Stopping still drains the queue: every job gets its completion.
        if (jobs_.empty()) return;
        job = jobs_.front();
        jobs_.pop_front();
      }
      std::optional<std::string> problem;
      try {
        problem = container_.try_read_record(job.layer, job.expert, job.data, verify_crc_);
      } catch (const Error& e) {
        problem = e.what();
      }
      completion_(job, std::move(problem));
    }
  }

  const Container& container_;
  bool verify_crc_;
  Completion completion_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<ReadJob> jobs_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace

std::unique_ptr<ReadBackend> make_thread_backend(const Container& container, uint32_t threads, bool verify_crc,
                                                 Completion completion) {
  return std::make_unique<ThreadBackend>(container, threads, verify_crc, std::move(completion));
}

}  // namespace sluice::ioworker
