// tests/ioworker/worker_test_util.h: a fixture container with a worker over
// it, the budget for an exact slot count, the worker options the tests share,
// a bounded wait, the check every test client applies to a slot it was
// handed (the header must name what it asked for), consuming a batch, and
// churning the cache around two records another client keeps.
#pragma once

#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "ioworker/worker.h"
#include "shm/client.h"
#include "proto/container.h"
#include "proto/record_format.h"
#include "tests/proto/container_fixture.h"

namespace sluice::testing {

inline FixtureSpec cache_fixture_spec() {
  FixtureSpec spec;
  spec.layers = 2;
  spec.experts = 12;
  spec.top_k = 2;
  spec.hidden = 32;
  spec.expert_width = 24;
  return spec;
}

struct FixtureContainer {
  TempDir dir;
  Fixture fixture = write_fixture(dir.path(), cache_fixture_spec());
  Container container = Container::open(dir.path());
};

// The budget whose plan holds exactly `slots` slots.
// Worked out here from the manifest, not with the worker's helpers, so the
// tests check them.
inline uint64_t budget_for_slots(const Container& container, uint32_t slots, uint32_t max_clients = 16) {
  uint32_t stride = 0, widest = 0;
  for (const MoeLayerInfo& info : container.moe_layers()) {
    stride = std::max(stride, info.record_stride);
    widest = std::max(widest, info.experts);
  }
  const shm::MailboxShape mailbox{container.hidden_size(), 1, container.top_k()};
  return shm::compute_layout(shm::geometry_for_slots(slots, stride, max_clients, widest, mailbox)).total;
}

// Options of a worker of exactly `slots` slots and two readers; `instance`
// empty: an anonymous segment.
inline ioworker::WorkerOptions options_for(const Container& container, uint32_t slots,
                                           ioworker::IoBackend backend = ioworker::IoBackend::kAuto,
                                           const std::string& instance = "") {
  ioworker::WorkerOptions options;
  options.instance = instance;
  options.cache_bytes = budget_for_slots(container, slots);
  options.backend = backend;
  options.readers = 2;
  options.quiet = true;
  return options;
}

// Polls `done`; the bound makes a broken build fail instead of hang (it is
// not a timing assertion).
template <typename Predicate>
void wait_until(Predicate done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!done()) {
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// Empty when the record header in `data` is exactly the one of (layer, expert).
inline std::optional<std::string> header_problem(const Container& container, uint32_t layer, uint32_t expert,
                                                 const uint8_t* data) {
  const MoeLayerInfo& info = container.moe_layer(layer);
  return check_header(RecordHeader::decode(data), expected_header(info.layout, layer, expert, info.codebook_base));
}

// Requests `experts` of `layer`, checks and consumes every one; returns how
// many were handed out. Fails the test on a wrong record.
inline size_t consume(shm::Client& client, const Container& container, uint32_t layer,
                      const std::vector<uint32_t>& experts) {
  client.request(layer, experts);
  for (size_t i = 0; i < experts.size(); ++i) {
    const shm::LandedSlot landed = client.next();
    REQUIRE(landed.index < experts.size());
    const auto problem = header_problem(container, layer, experts[landed.index], landed.data);
    REQUIRE_MESSAGE(!problem, *problem);
    client.release(landed);
  }
  return experts.size();
}

// Three rounds through every pair of experts of the fixture's 2 layers of
// 12, except `kept_layer`'s pairs holding experts 5 and 9, so another
// client's pins or holds on those two are what the cache must keep.
inline void churn_around_5_and_9(shm::Client& client, const Container& container, uint32_t kept_layer) {
  for (int round = 0; round < 3; ++round) {
    for (uint32_t layer = 0; layer < 2; ++layer) {
      for (uint32_t e = 0; e + 1 < 12; e += 2) {
        if (layer == kept_layer && (e == 4 || e == 8)) continue;
        consume(client, container, layer, {e, e + 1});
      }
    }
  }
}

}  // namespace sluice::testing
