// tests/ioworker/worker_test_util.h: a fixture container with a worker over
// it, the budget for an exact slot count, the worker options the tests share,
// a bounded wait, and the check every test client applies to a slot it was
// handed: the header must name what it asked for.
#pragma once

#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "ioworker/worker.h"
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

}  // namespace sluice::testing
