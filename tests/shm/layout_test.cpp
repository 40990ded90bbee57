// tests/shm/layout_test.cpp: segment offsets from the geometry, and budgets.
#include <doctest/doctest.h>

#include "proto/error.h"
#include "shm/layout.h"

using namespace sluice;
using namespace sluice::shm;

TEST_CASE("tables are aligned, ordered and do not overlap") {
  const Geometry g = geometry_for_slots(37, 3 * 4096, 5, 64);
  const Layout l = compute_layout(g);
  CHECK(l.stats >= sizeof(SegmentHeader));
  CHECK(l.clients >= l.stats + sizeof(StatsBlock));
  CHECK(l.client_stride >= sizeof(ClientEntry) + 64 * sizeof(uint32_t));
  CHECK(l.slots >= l.clients + 5 * l.client_stride);
  CHECK(l.index >= l.slots + 37 * sizeof(SlotEntry));
  CHECK(l.demand_ring >= l.index + uint64_t{g.index_capacity} * sizeof(IndexEntry));
  CHECK(l.prefetch_ring >= l.demand_ring + sizeof(RingHeader) + uint64_t{g.demand_ring_capacity} * sizeof(RingEntry));
  CHECK(l.data >= l.prefetch_ring + sizeof(RingHeader) + uint64_t{g.prefetch_ring_capacity} * sizeof(RingEntry));
  CHECK(l.data % 4096 == 0);
  CHECK(l.total == l.data + 37ull * 3 * 4096);
  for (uint64_t offset : {l.stats, l.clients, l.client_stride, l.slots, l.index, l.demand_ring, l.prefetch_ring}) {
    CHECK(offset % 64 == 0);
  }
  CHECK(g.index_capacity >= 74);
  CHECK((g.index_capacity & (g.index_capacity - 1)) == 0);
}

TEST_CASE("bad geometry is refused") {
  Geometry g = geometry_for_slots(4, 4096, 2, 8);
  Geometry bad = g;
  bad.slot_bytes = 4000;
  CHECK_THROWS_AS(compute_layout(bad), Error);
  bad = g;
  bad.max_clients = kMaxClients + 1;
  CHECK_THROWS_AS(compute_layout(bad), Error);
  bad = g;
  bad.index_capacity = 6;
  CHECK_THROWS_AS(compute_layout(bad), Error);
  bad = g;
  bad.slot_count = 0;
  CHECK_THROWS_AS(compute_layout(bad), Error);
  bad = g;
  bad.demand_ring_capacity = 0;
  CHECK_THROWS_AS(compute_layout(bad), Error);
}

TEST_CASE("a budget buys the largest segment that fits in it, and no smaller than the minimum") {
  for (uint64_t budget : {uint64_t{1} << 20, uint64_t{5} << 20, uint64_t{64} << 20}) {
    const Geometry g = plan_geometry(budget, 8192, 4, 16, 32);
    CHECK(compute_layout(g).total <= budget);
    const Geometry one_more = geometry_for_slots(g.slot_count + 1, 8192, 16, 32);
    CHECK(compute_layout(one_more).total > budget);
  }
  CHECK_THROWS_WITH_AS(plan_geometry(40000, 8192, 4, 16, 32), doctest::Contains("minimum is 4 slots"), Error);
}

TEST_CASE("keys round-trip and never collide with the empty key") {
  for (uint32_t layer : {0u, 1u, 255u}) {
    for (uint32_t expert : {0u, 7u, 4095u}) {
      const uint64_t key = make_key(layer, expert);
      CHECK(key != 0);
      CHECK(key_layer(key) == layer);
      CHECK(key_expert(key) == expert);
    }
  }
}
