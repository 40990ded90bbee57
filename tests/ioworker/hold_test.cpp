// tests/ioworker/hold_test.cpp: a client holding the next layer's batch
// (shm::Client::hold, the worker's assign_hold): held records survive any
// pressure until the next request takes them as hits, a hold never takes the
// last top-k unpinned slots, and a request drops what it did not ask for.
#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

#include "ioworker/worker.h"
#include "shm/client.h"
#include "tests/ioworker/worker_test_util.h"

using namespace sluice;
using namespace sluice::ioworker;
using sluice::testing::FixtureContainer;
using sluice::testing::churn_around_5_and_9;
using sluice::testing::consume;
using sluice::testing::header_problem;
using sluice::testing::options_for;
using sluice::testing::wait_until;

TEST_CASE(
    "held records are never evicted, whatever the policy, and the next request takes them as "
    "hits") {
  FixtureContainer fc;  // 2 layers of 12 experts, top-2
  for (EvictionPolicy policy : {EvictionPolicy::kDensity, EvictionPolicy::kNextUse,
                                EvictionPolicy::kLfru, EvictionPolicy::kLru}) {
    CAPTURE(static_cast<int>(policy));
    WorkerOptions options = options_for(fc.container, 6);
    options.policy = policy;
    Worker worker(fc.container, options);
    shm::Client holder(worker.segment());
    holder.hold(1, std::vector<uint32_t>{5, 9});
    wait_until([&] { return worker.stats().held == 2 && worker.stats().inflight == 0; });
    CHECK(worker.stats().held_reads == 2);
    CHECK(worker.stats().demand_reads + worker.stats().prefetch_reads == 0);

    // Four slots are left for everyone else: every other expert churns through them.
    shm::Client other(worker.segment());
    churn_around_5_and_9(other, fc.container, 1);
    CHECK(worker.stats().evictions > 0);
    const shm::StatsSnapshot churned = worker.stats();
    const uint64_t hits_before = holder.counters().hits;
    consume(holder, fc.container, 1, {9, 5});
    const shm::StatsSnapshot after = worker.stats();
    CHECK(holder.counters().hits - hits_before == 2);
    CHECK(holder.counters().misses == 0);
    CHECK(after.demand_reads == churned.demand_reads);
    CHECK(after.held_reads == 2);
    CHECK(after.held_used == 2);
    CHECK(after.slots_pinned == 0);
  }
}

TEST_CASE(
    "a hold leaves top-k slots unpinned and starts as the current batch releases its records") {
  FixtureContainer fc;
  Worker worker(fc.container, options_for(fc.container, 4));  // the minimum: 2 × top-k
  shm::Client client(worker.segment());
  client.request(0, std::vector<uint32_t>{0, 1});
  const shm::LandedSlot first = client.next();
  const shm::LandedSlot second = client.next();
  client.hold(1, std::vector<uint32_t>{2, 3, 4});

  // The two unpinned slots are the reserve: another client's batch gets them.
  shm::Client other(worker.segment());
  consume(other, fc.container, 1, {10, 11});
  CHECK(worker.stats().held == 0);

  client.release(first);
  wait_until([&] { return worker.stats().held == 1; });
  client.release(second);
  wait_until([&] { return worker.stats().held == 2; });
  // The third guess would take the reserve: it waits, and the request below drops it.
  consume(client, fc.container, 1, {4, 3, 2});
  const shm::StatsSnapshot stats = worker.stats();
  CHECK(stats.held == 2);
  CHECK(stats.held_used == 2);
  CHECK(client.counters().hits == 2);
  CHECK(client.counters().misses == 2 + 1);
  CHECK(stats.slots_pinned == 0);
}

TEST_CASE(
    "a request drops the held records it does not ask for, and a new hold drops the last one") {
  FixtureContainer fc;
  Worker worker(fc.container, options_for(fc.container, 8));
  shm::Client client(worker.segment());
  client.hold(1, std::vector<uint32_t>{2, 3});
  wait_until([&] { return worker.stats().held == 2 && worker.stats().inflight == 0; });
  CHECK(worker.stats().slots_pinned == 2);
  client.hold(1, std::vector<uint32_t>{3, 6});  // 3 is cached: pinned at once
  wait_until([&] { return worker.stats().held == 4 && worker.stats().inflight == 0; });
  CHECK(worker.stats().slots_pinned == 2);
  consume(client, fc.container, 0, {2, 3});  // another layer: nothing held is taken
  const shm::StatsSnapshot stats = worker.stats();
  CHECK(stats.held_used == 0);
  CHECK(stats.slots_pinned == 0);
  CHECK(client.counters().misses == 2);
}

TEST_CASE("a hold names at most a layer's worth of experts") {
  FixtureContainer fc;
  Worker worker(fc.container, options_for(fc.container, 4));
  shm::Client client(worker.segment());
  std::vector<uint32_t> too_many(13);
  for (uint32_t i = 0; i < too_many.size(); ++i) too_many[i] = i % 12;
  CHECK_THROWS_WITH_AS(client.hold(0, too_many),
                       doctest::Contains("a hold of 13 experts exceeds the 12"), Error);
}

TEST_CASE("a batch that finds every slot pinned takes a held one: a hold never starves a demand") {
  // The interleaving that stalled engines at the floor: a client posts its
  // batch's misses, and before the worker has given them slots, holds the
  // next layer's cached records, pinning every slot its own batch could
  // have had. Here a second client's batch keeps every slot pinned until
  // the hold is in place. It lets go of the lowest-ranked guesses first, and
  // the client releases nothing before both records land, so whenever the
  // worker looks, the slots it can take back are 8's, then 7's.
  FixtureContainer fc;
  Worker worker(fc.container, options_for(fc.container, 4));  // the minimum: 2 × top-k
  shm::Client filler(worker.segment());
  consume(filler, fc.container, 1, {5, 9});
  consume(filler, fc.container, 1, {7, 8});  // every slot holds a layer-1 record

  shm::Client blocker(worker.segment());
  const std::vector<uint32_t> cached = {5, 9, 7, 8};
  blocker.request(1, cached);
  std::vector<shm::LandedSlot> landed;
  for (size_t i = 0; i < cached.size(); ++i) landed.push_back(blocker.next());

  shm::Client client(worker.segment(), std::chrono::seconds(20));
  client.request(0, std::vector<uint32_t>{2, 3});  // two misses, no unpinned slot for them
  client.hold(1, cached);                           // all four cached: pinned at once
  CHECK(worker.stats().held == 4);
  std::sort(landed.begin(), landed.end(),
            [](const shm::LandedSlot& a, const shm::LandedSlot& b) { return a.index > b.index; });
  for (const shm::LandedSlot& l : landed) blocker.release(l);  // 8, 7, 9, 5

  // The batch takes the slots of the two lowest-ranked guesses (8, then 7).
  std::vector<shm::LandedSlot> batch;
  for (int i = 0; i < 2; ++i) {
    batch.push_back(client.next());
    const auto problem = header_problem(fc.container, 0, batch.back().index == 0 ? 2 : 3, batch.back().data);
    REQUIRE_MESSAGE(!problem, *problem);
  }
  for (const shm::LandedSlot& l : batch) client.release(l);
  CHECK(worker.stats().held_revoked == 2);
  const uint64_t hits_before = client.counters().hits;
  consume(client, fc.container, 1, {9, 5});  // the guesses still held
  CHECK(client.counters().hits - hits_before == 2);
  CHECK(worker.stats().held_used == 2);
  CHECK(worker.stats().slots_pinned == 0);
}

TEST_CASE("a record whose held read failed is read again for the batch that asks for it") {
  FixtureContainer fc;
  sluice::testing::flip_byte(fc.fixture.bank_path(1), fc.fixture.record_offset(3));  // magic of expert 3
  const Container container = Container::open(fc.dir.path());
  Worker worker(container, options_for(container, 6));
  shm::Client holder(worker.segment());
  holder.hold(1, std::vector<uint32_t>{3});
  wait_until([&] { return worker.stats().read_errors == 1 && worker.stats().inflight == 0; });

  // Another client's batch: the failed slot is pinned only by the hold, so it gets its own try.
  shm::Client other(worker.segment());
  other.request(1, std::vector<uint32_t>{3});
  CHECK_THROWS_WITH_AS(other.next(), doctest::Contains("layer 1 expert 3: header magic mismatch"), Error);
  CHECK(worker.stats().read_errors == 2);
  CHECK(worker.stats().held_revoked == 1);
  consume(other, container, 1, {2, 4});  // the cache carries on
  CHECK(worker.stats().slots_pinned == 0);
}
