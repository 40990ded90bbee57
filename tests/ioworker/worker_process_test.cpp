// tests/ioworker/worker_process_test.cpp: the worker with clients in other
// processes over a named segment: four forked clients under eviction
// pressure, a client SIGKILLed mid-layer, a daemon SIGKILLed under a waiting
// client, and a client refused by a daemon serving another model.
#include <doctest/doctest.h>

#include <chrono>
#include <csignal>
#include <random>
#include <thread>
#include <vector>

#include "ioworker/worker.h"
#include "proto/error.h"
#include "shm/client.h"
#include "shm/segment.h"
#include "tests/ioworker/worker_test_util.h"
#include "tests/shm/shm_test_util.h"

using namespace sluice;
using namespace sluice::ioworker;
using sluice::testing::FixtureContainer;
using sluice::testing::header_problem;
using sluice::testing::options_for;
using sluice::testing::ShmGuard;
using sluice::testing::wait_until;

namespace {

// A client process's whole life: attach, run `tokens` random tokens through
// both layers, recheck every header. Exit code 0, or 1 on a wrong record.
int client_process(const std::string& name, const Container& container, int seed, int tokens) {
  auto segment = shm::Segment::attach(name, container.identity());
  shm::Client client(*segment);
  std::mt19937 rng(seed);
  for (int token = 0; token < tokens; ++token) {
    for (uint32_t layer = 0; layer < 2; ++layer) {
      const uint32_t a = rng() % 12;
      const uint32_t b = (a + 1 + rng() % 11) % 12;
      const uint32_t asked[2] = {a, b};
      client.request(layer, asked);
      for (int i = 0; i < 2; ++i) {
        const shm::LandedSlot landed = client.next();
        if (header_problem(container, layer, asked[landed.index], landed.data)) return 1;
        client.release(landed);
      }
    }
  }
  return 0;
}

struct Pipe {
  Pipe() { REQUIRE(::pipe(fds) == 0); }
  ~Pipe() {
    ::close(fds[0]);
    ::close(fds[1]);
  }
  void signal() const {
    const char byte = 1;
    (void)!::write(fds[1], &byte, 1);
  }
  bool wait() const {
    char byte = 0;
    return ::read(fds[0], &byte, 1) == 1;
  }
  int fds[2];
};

}  // namespace

TEST_CASE("four client processes on a cache of two working sets never see a wrong expert") {
  FixtureContainer fc;
  ShmGuard guard(sluice::testing::unique_instance("four"));
  Worker worker(fc.container, options_for(fc.container, 8, IoBackend::kAuto, guard.instance()));
  std::vector<pid_t> children;
  for (int c = 0; c < 4; ++c) {
    children.push_back(sluice::testing::fork_child(
        [&, c] { return client_process(worker.segment_name(), fc.container, 10 + c, 100); }));
  }
  for (pid_t child : children) CHECK(sluice::testing::wait_child(child) == 0);
  const shm::StatsSnapshot stats = worker.stats();
  CHECK(stats.hits + stats.misses == 4 * 100 * 2 * 2);
  CHECK(stats.evictions > 0);
  CHECK(stats.slots_pinned == 0);
  CHECK(stats.clients.empty());
}

TEST_CASE("a client SIGKILLed mid-layer has its pins released and its requests dropped") {
  FixtureContainer fc;
  ShmGuard guard(sluice::testing::unique_instance("kill"));
  Worker worker(fc.container, options_for(fc.container, 4, IoBackend::kAuto, guard.instance()));
  Pipe ready;
  const pid_t victim = sluice::testing::fork_child([&] {
    auto segment = shm::Segment::attach(worker.segment_name(), fc.container.identity());
    shm::Client client(*segment);
    client.request(0, std::vector<uint32_t>{1, 2, 3});
    client.next();  // holds it; the others stay pinned or queued
    client.next();
    ready.signal();
    ::pause();
    return 0;
  });
  REQUIRE(ready.wait());
  CHECK(worker.stats().clients.size() == 1);
  CHECK(worker.stats().slots_pinned >= 2);
  ::kill(victim, SIGKILL);
  CHECK(sluice::testing::wait_child(victim) == 128 + SIGKILL);
  wait_until([&] { return worker.stats().clients_reaped == 1; });
  const shm::StatsSnapshot stats = worker.stats();
  CHECK(stats.clients.empty());
  CHECK(stats.slots_pinned == 0);
  // Other clients carry on, needing every slot of the cache.
  shm::Client survivor(worker.segment());
  for (uint32_t e = 0; e < 12; e += 4) {
    const std::vector<uint32_t> batch = {e, e + 1, e + 2, e + 3};
    survivor.request(1, batch);
    for (int i = 0; i < 4; ++i) {
      const shm::LandedSlot landed = survivor.next();
      CHECK_FALSE(header_problem(fc.container, 1, batch[landed.index], landed.data));
      survivor.release(landed);
    }
  }
}

TEST_CASE("a client waiting on a daemon that was SIGKILLed fails with a clear error") {
  FixtureContainer fc;
  ShmGuard guard(sluice::testing::unique_instance("daemon"));
  Pipe ready;
  const pid_t daemon = sluice::testing::fork_child([&] {
    Worker worker(fc.container, options_for(fc.container, 4, IoBackend::kAuto, guard.instance()));
    ready.signal();
    ::pause();
    return 0;
  });
  REQUIRE(ready.wait());
  auto segment = shm::Segment::attach(guard.name(), fc.container.identity());
  shm::Client client(*segment);
  {
    client.request(0, std::vector<uint32_t>{4});
    const shm::LandedSlot landed = client.next();
    CHECK_FALSE(header_problem(fc.container, 0, 4, landed.data));
    client.release(landed);
  }
  ::kill(daemon, SIGKILL);
  CHECK(sluice::testing::wait_child(daemon) == 128 + SIGKILL);
  client.request(0, std::vector<uint32_t>{4, 5});  // 4 is a hit, 5 can never land
  const shm::LandedSlot hit = client.next();
  CHECK_FALSE(header_problem(fc.container, 0, 4, hit.data));
  client.release(hit);
  const std::string expected = "its sluice-io (pid " + std::to_string(daemon) + ") is gone";
  CHECK_THROWS_WITH_AS(client.next(), doctest::Contains(expected.c_str()), Error);
}

TEST_CASE("a client is refused by a daemon serving another model") {
  FixtureContainer fc;
  sluice::testing::TempDir other_dir;
  sluice::testing::FixtureSpec spec = sluice::testing::cache_fixture_spec();
  spec.vocab = 80;  // another model: a different manifest
  sluice::testing::write_fixture(other_dir.path(), spec);
  const Container other = Container::open(other_dir.path());
  REQUIRE(other.identity() != fc.container.identity());
  ShmGuard guard(sluice::testing::unique_instance("ident"));
  Worker worker(fc.container, options_for(fc.container, 4, IoBackend::kAuto, guard.instance()));
  CHECK_THROWS_WITH_AS(shm::Segment::attach(worker.segment_name(), other.identity()),
                       doctest::Contains("serves another model"), Error);
  CHECK_NOTHROW(shm::Segment::attach(worker.segment_name(), fc.container.identity()));
}
