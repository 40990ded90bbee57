// tests/ioworker/worker_test.cpp: the worker with clients in this process:
// cold and warm reads, pinned slots surviving pressure, four client threads
// on two working sets (every header rechecked), prefetch, damaged records,
// budgets and both reader backends.
#include "ioworker/worker.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "proto/aligned_buffer.h"
#include "proto/error.h"
#include "shm/client.h"
#include "tests/ioworker/worker_test_util.h"

using namespace sluice;
using namespace sluice::ioworker;
using sluice::testing::budget_for_slots;
using sluice::testing::FixtureContainer;
using sluice::testing::churn_around_5_and_9;
using sluice::testing::consume;
using sluice::testing::header_problem;
using sluice::testing::options_for;
using sluice::testing::wait_until;

TEST_CASE("cold reads land bit-exact, the same request again is all hits") {
  FixtureContainer fc;
  for (IoBackend backend : {IoBackend::kThreads, IoBackend::kUring}) {
    CAPTURE(static_cast<int>(backend));
    Worker worker(fc.container, options_for(fc.container, 8, backend));
    shm::Client client(worker.segment());
    const std::vector<uint32_t> experts = {3, 0, 7};
    client.request(1, experts);
    AlignedBuffer expected(fc.fixture.record_stride, 4096);
    for (size_t i = 0; i < experts.size(); ++i) {
      const shm::LandedSlot landed = client.next();
      fc.container.read_record(1, experts[landed.index], expected.data(), true);
      CHECK(std::memcmp(landed.data, expected.data(), fc.fixture.record_stride) == 0);
      client.release(landed);
    }
    shm::StatsSnapshot stats = worker.stats();
    CHECK(stats.misses == 3);
    CHECK(stats.demand_reads == 3);
    CHECK(stats.bytes_read == 3ull * fc.fixture.record_stride);
    CHECK(consume(client, fc.container, 1, experts) == 3);
    stats = worker.stats();
    CHECK(stats.hits == 3);
    CHECK(stats.demand_reads == 3);
    REQUIRE(stats.layers.size() == 1);
    CHECK(stats.layers[0].layer == 1);
    CHECK(stats.layers[0].hits == 3);
    CHECK(stats.layers[0].misses == 3);
    REQUIRE(stats.clients.size() == 1);
    CHECK(stats.clients[0].pid == ::getpid());
    CHECK(client.counters().hits == 3);
    CHECK(client.counters().misses == 3);
    CHECK(std::string(worker.backend_name()) == (backend == IoBackend::kUring ? "io_uring" : "threads"));
  }
}

TEST_CASE("pinned slots are never evicted or overwritten under pressure, whatever the policy") {
  FixtureContainer fc;
  for (EvictionPolicy policy :
       {EvictionPolicy::kDensity, EvictionPolicy::kNextUse, EvictionPolicy::kLfru, EvictionPolicy::kLru}) {
    CAPTURE(static_cast<int>(policy));
    WorkerOptions options = options_for(fc.container, 4);
    options.policy = policy;
    Worker worker(fc.container, options);
    shm::Client holder(worker.segment());
    holder.request(0, std::vector<uint32_t>{5, 9});
    const shm::LandedSlot a = holder.next();
    const shm::LandedSlot b = holder.next();
    std::vector<uint8_t> a_bytes(a.data, a.data + fc.fixture.record_stride);
    std::vector<uint8_t> b_bytes(b.data, b.data + fc.fixture.record_stride);

    // Only two slots are left for everyone else: every other expert churns through them.
    shm::Client other(worker.segment());
    churn_around_5_and_9(other, fc.container, 0);
    CHECK(worker.stats().evictions > 0);
    CHECK(std::memcmp(a.data, a_bytes.data(), a_bytes.size()) == 0);
    CHECK(std::memcmp(b.data, b_bytes.data(), b_bytes.size()) == 0);
    CHECK_FALSE(header_problem(fc.container, 0, a.index == 0 ? 5 : 9, a.data));
    holder.release(a);
    holder.release(b);
    // Released, they are fair game again.
    consume(other, fc.container, 1, {0, 1});
    consume(other, fc.container, 1, {2, 3});
  }
}

TEST_CASE("four client threads on a cache of two working sets never see a wrong expert") {
  FixtureContainer fc;
  for (EvictionPolicy policy :
       {EvictionPolicy::kDensity, EvictionPolicy::kNextUse, EvictionPolicy::kLfru, EvictionPolicy::kLru}) {
    CAPTURE(static_cast<int>(policy));
    WorkerOptions options = options_for(fc.container, 2 * 2 * 2);  // top-k × layers × 2
    options.policy = policy;
    options.readers = 3;
    Worker worker(fc.container, options);
    std::vector<std::thread> threads;
    std::vector<std::string> errors(4);
    std::vector<size_t> served(4, 0);
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        try {
          shm::Client client(worker.segment());
          std::mt19937 rng(100 + t);
          for (int token = 0; token < 150; ++token) {
            for (uint32_t layer = 0; layer < 2; ++layer) {
              // Skewed choice so some experts are hot, as routers make them.
              const uint32_t a = std::min<uint32_t>(rng() % 12, rng() % 12);
              uint32_t b = rng() % 12;
              if (b == a) b = (a + 1) % 12;
              client.request(layer, std::vector<uint32_t>{a, b});
              const uint32_t asked[2] = {a, b};
              for (int i = 0; i < 2; ++i) {
                const shm::LandedSlot landed = client.next();
                if (auto problem = header_problem(fc.container, layer, asked[landed.index], landed.data)) {
                  errors[t] = *problem;
                  return;
                }
                ++served[t];
                client.release(landed);
              }
            }
          }
        } catch (const std::exception& e) {
          errors[t] = e.what();
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
    for (int t = 0; t < 4; ++t) {
      CHECK_MESSAGE(errors[t].empty(), errors[t]);
      CHECK(served[t] == 150 * 2 * 2);
    }
    const shm::StatsSnapshot stats = worker.stats();
    CHECK(stats.hits + stats.misses == 4 * 150 * 2 * 2);
    CHECK(stats.evictions > 0);
    CHECK(stats.slots_pinned == 0);
    CHECK(stats.read_errors == 0);
  }
}

TEST_CASE("a batch larger than the cache is served as slots free up") {
  FixtureContainer fc;
  Worker worker(fc.container, options_for(fc.container, 4));
  shm::Client client(worker.segment());
  std::vector<uint32_t> all(12);
  for (uint32_t e = 0; e < 12; ++e) all[e] = e;
  CHECK(consume(client, fc.container, 0, all) == 12);
  CHECK(worker.stats().demand_reads == 12);
}

TEST_CASE("prefetched experts become hits; prefetches evicted unused are counted as wasted") {
  FixtureContainer fc;
  // LRU makes the unused guesses the first to go; next-use would keep them,
  // since their layer is the next one due.
  WorkerOptions options = options_for(fc.container, 4);
  options.policy = EvictionPolicy::kLru;
  Worker worker(fc.container, options);
  worker.prefetch(1, std::vector<uint32_t>{2, 4}, PrefetchOrigin::kRouter);
  wait_until([&] { return worker.stats().prefetch_reads == 2; });
  shm::Client client(worker.segment());
  consume(client, fc.container, 1, {2, 4});
  shm::StatsSnapshot stats = worker.stats();
  CHECK(stats.hits == 2);
  CHECK(stats.demand_reads == 0);
  CHECK(stats.prefetch_requests == 2);

  worker.prefetch(0, std::vector<uint32_t>{10, 11}, PrefetchOrigin::kRpc);
  wait_until([&] { return worker.stats().prefetch_reads == 4; });
  // Cached already: dropped, not read again.
  worker.prefetch(0, std::vector<uint32_t>{10}, PrefetchOrigin::kRpc);
  wait_until([&] { return worker.stats().prefetch_dropped == 1; });
  for (uint32_t e = 0; e < 8; e += 2) consume(client, fc.container, 1, {e + 1, e + 3});
  stats = worker.stats();
  CHECK(stats.wasted_prefetches >= 1);
  CHECK(stats.prefetch_reads == 4);
  CHECK_THROWS_AS(worker.prefetch(1, std::vector<uint32_t>{12}, PrefetchOrigin::kRpc), Error);
  CHECK_THROWS_AS(worker.prefetch(7, std::vector<uint32_t>{0}, PrefetchOrigin::kRpc), Error);
}

TEST_CASE("a damaged record fails its request naming it, and the cache carries on") {
  FixtureContainer fc;
  sluice::testing::flip_byte(fc.fixture.bank_path(1),
                             fc.fixture.record_offset(3));  // magic of expert 3
  const Container container = Container::open(fc.dir.path());
  for (IoBackend backend : {IoBackend::kThreads, IoBackend::kUring}) {
    CAPTURE(static_cast<int>(backend));
    Worker worker(container, options_for(container, 4, backend));
    shm::Client client(worker.segment());
    client.request(1, std::vector<uint32_t>{3});
    CHECK_THROWS_WITH_AS(client.next(), doctest::Contains("layer 1 expert 3: header magic mismatch"), Error);
    CHECK(worker.stats().read_errors == 1);
    consume(client, container, 1, {2, 4});
    consume(client, container, 0, {3});
  }
}

TEST_CASE("payload corruption is caught only when verifying") {
  FixtureContainer fc;
  sluice::testing::flip_byte(fc.fixture.bank_path(0), fc.fixture.record_offset(6) + 200);
  const Container container = Container::open(fc.dir.path());
  WorkerOptions options = options_for(container, 4);
  options.verify_crc = true;
  Worker verifying(container, options);
  shm::Client client(verifying.segment());
  client.request(0, std::vector<uint32_t>{6});
  CHECK_THROWS_WITH_AS(client.next(), doctest::Contains("checksum mismatch"), Error);
}

TEST_CASE("the segment stays within the budget; a budget under the minimum is refused") {
  FixtureContainer fc;
  const uint64_t minimum = min_cache_bytes(fc.container, 16);
  CHECK(minimum == budget_for_slots(fc.container, 4));
  WorkerOptions options = options_for(fc.container, 4);
  options.cache_bytes = minimum + 3 * fc.fixture.record_stride + 100;
  Worker worker(fc.container, options);
  CHECK(worker.segment().mapped_bytes() <= options.cache_bytes);
  CHECK(worker.geometry().slot_count >= 6);
  options.cache_bytes = minimum - 1;
  CHECK_THROWS_WITH_AS(Worker(fc.container, options), doctest::Contains("the minimum is 4 slots"), Error);
}

TEST_CASE("stats say whether reads bypass the page cache") {
  FixtureContainer fc;
  WorkerOptions options = options_for(fc.container, 4, IoBackend::kUring);
  options.direct = false;
  Worker buffered(fc.container, options);
  CHECK_FALSE(buffered.direct_io());
  CHECK_FALSE(buffered.stats().direct_io);
  Worker threads(fc.container, options_for(fc.container, 4, IoBackend::kThreads));
  CHECK(threads.stats().direct_io == fc.container.bank_direct(0));
}
