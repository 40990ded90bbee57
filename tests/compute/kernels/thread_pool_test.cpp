// The pool covers every index exactly once, whatever its size, and passes
// exceptions back to the caller.
#include <doctest/doctest.h>

#include <atomic>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "compute/kernels/thread_pool.h"
#include "proto/error.h"

using namespace sluice::kernels;

TEST_CASE("parallel_for covers [0, count) exactly once in grain-sized chunks") {
  for (size_t threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    CHECK(pool.size() == threads);
    for (size_t count : {0, 1, 7, 64, 1000}) {
      for (size_t grain : {1, 3, 64}) {
        std::vector<std::atomic<int>> hits(count);
        std::atomic<bool> bad_chunk{false};
        pool.parallel_for(count, grain, [&](size_t begin, size_t end) {
          if (begin % grain != 0 || (end - begin != grain && end != count)) bad_chunk = true;
          for (size_t i = begin; i < end; ++i) hits[i]++;
        });
        CHECK_FALSE(bad_chunk.load());
        for (size_t i = 0; i < count; ++i) CHECK(hits[i].load() == 1);
      }
    }
  }
}

TEST_CASE("parallel_for_workers names a worker below size(), never running two chunks at once") {
  for (size_t threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    std::vector<std::atomic<int>> busy(threads), chunks_run(threads);
    std::vector<std::atomic<int>> hits(500);
    std::atomic<bool> bad{false};
    pool.parallel_for_workers(hits.size(), 1, [&](size_t worker, size_t begin, size_t end) {
      if (worker >= threads || busy[worker]++ != 0) {
        bad = true;
        return;
      }
      for (size_t i = begin; i < end; ++i) hits[i]++;
      volatile double spin = 0;  // gives other workers a chance to overlap
      for (int i = 0; i < 2000; ++i) spin = spin + i;
      chunks_run[worker]++;
      busy[worker]--;
    });
    CHECK_FALSE(bad.load());
    int total = 0;
    for (auto& c : chunks_run) total += c.load();
    CHECK(total == 500);
    for (auto& h : hits) CHECK(h.load() == 1);
  }
}

TEST_CASE("an exception in a chunk reaches the caller and the pool stays usable") {
  ThreadPool pool(3);
  CHECK_THROWS_AS(pool.parallel_for(100, 1,
                                    [](size_t begin, size_t) {
                                      if (begin == 57) throw std::runtime_error("chunk 57");
                                    }),
                  std::runtime_error);
  std::atomic<size_t> sum{0};
  pool.parallel_for(100, 7, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) sum += i;
  });
  CHECK(sum.load() == 4950);
}

TEST_CASE("thread count: the flag wins, then SLUICE_THREADS, then the cores") {
  CHECK(available_cores() >= 1);
  unsetenv("SLUICE_THREADS");
  CHECK(resolve_thread_count(std::nullopt) == available_cores());
  CHECK(resolve_thread_count(3) == 3);
  CHECK_THROWS_AS(resolve_thread_count(0), sluice::Error);
  setenv("SLUICE_THREADS", "5", 1);
  CHECK(resolve_thread_count(std::nullopt) == 5);
  CHECK(resolve_thread_count(2) == 2);
  for (const char* bad : {"0", "two", "3x", "-1"}) {
    setenv("SLUICE_THREADS", bad, 1);
    try {
      resolve_thread_count(std::nullopt);
      FAIL("expected an error for ", bad);
    } catch (const sluice::Error& e) {
      CHECK(std::string(e.what()).find("SLUICE_THREADS") != std::string::npos);
    }
  }
  unsetenv("SLUICE_THREADS");
}
