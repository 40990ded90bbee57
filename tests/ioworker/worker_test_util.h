// tests/ioworker/worker_test_util.h: a fixture container with a worker over
// it, the budget for an exact slot count, and the check every test client
// applies to a slot it was handed: the header must name what it asked for.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

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
inline uint64_t budget_for_slots(const Container& container, uint32_t slots, uint32_t max_clients = 16) {
  uint32_t stride = 0, widest = 0;
  for (const MoeLayerInfo& info : container.moe_layers()) {
    stride = std::max(stride, info.record_stride);
    widest = std::max(widest, info.experts);
  }
  return shm::compute_layout(shm::geometry_for_slots(slots, stride, max_clients, widest)).total;
}

// Empty when the record header in `data` is exactly the one of (layer, expert).
inline std::optional<std::string> header_problem(const Container& container, uint32_t layer, uint32_t expert,
                                                 const uint8_t* data) {
  const MoeLayerInfo& info = container.moe_layer(layer);
  return check_header(RecordHeader::decode(data), expected_header(info.layout, layer, expert, info.codebook_base));
}

}  // namespace sluice::testing
