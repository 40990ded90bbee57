// tests/shm/ring_test.cpp: FIFO order, fullness, wrap-around and a scribbled header.
#include <doctest/doctest.h>

#include <vector>

#include "shm/ring.h"

using namespace sluice::shm;

namespace {
struct RingStorage {
  explicit RingStorage(uint32_t capacity) : bytes(sizeof(RingHeader) + capacity * sizeof(RingEntry)) {
    header()->capacity = capacity;
  }
  RingHeader* header() { return reinterpret_cast<RingHeader*>(bytes.data()); }
  std::vector<uint64_t> bytes;  // 8-byte aligned
};
}  // namespace

TEST_CASE("ring keeps FIFO order across wrap-around and refuses when full") {
  RingStorage storage(4);
  RingView ring(*storage.header(), 4);
  uint32_t pushed = 0, popped = 0;
  for (int round = 0; round < 10; ++round) {
    while (ring.push(RingEntry{0, 0, 0, 0, 0, pushed, 0, 0})) ++pushed;
    CHECK(ring.size() == 4);
    for (int i = 0; i < 3; ++i) {
      const auto entry = ring.pop();
      REQUIRE(entry.has_value());
      CHECK(entry->expert == popped++);
    }
  }
  while (auto entry = ring.pop()) CHECK(entry->expert == popped++);
  CHECK(popped == pushed);
  CHECK_FALSE(ring.pop().has_value());
}

TEST_CASE("a scribbled ring header empties the ring instead of overrunning it") {
  RingStorage storage(4);
  RingView ring(*storage.header(), 4);
  storage.header()->head = 5;
  storage.header()->tail = 1000;
  CHECK(ring.size() == 0);
  CHECK_FALSE(ring.pop().has_value());
  CHECK(ring.push(RingEntry{}));
  CHECK(ring.size() == 1);
}
