// tests/router/replay_test.cpp: the LRU and Belady simulators against hit
// counts worked out by hand on small traces.
#include <doctest/doctest.h>

#include "proto/error.h"
#include "router/replay.h"

using sluice::router::ReplayRequest;
using sluice::router::simulate_belady;
using sluice::router::simulate_lru;

namespace {

// One expert per request, all in layer 0: the textbook page-reference string.
std::vector<ReplayRequest> singles(std::initializer_list<uint32_t> experts) {
  std::vector<ReplayRequest> out;
  for (uint32_t e : experts) out.push_back({0, {e}});
  return out;
}

}  // namespace

TEST_CASE("Belady on the classic reference string with three slots") {
  // 7 0 1 2 0 3 0 4 2 3 0 3 2 1 2 0 1 7 0 1 with 3 frames: OPT has 9 faults
  // (worked by hand: 7 0 1 cold; 2 evicts 7; 3 evicts 1; 4 evicts 0; 0 evicts 4;
  // 1 evicts 3; 7 evicts 2), so 11 hits of 20.
  const auto trace = singles({7, 0, 1, 2, 0, 3, 0, 4, 2, 3, 0, 3, 2, 1, 2, 0, 1, 7, 0, 1});
  const auto opt = simulate_belady(trace, 3);
  CHECK(opt.accesses == 20);
  CHECK(opt.misses == 9);
  CHECK(opt.hits == 11);
}

TEST_CASE("LRU on the classic reference string with three slots") {
  // LRU takes 12 faults on the same string (by hand), 8 hits.
  const auto trace = singles({7, 0, 1, 2, 0, 3, 0, 4, 2, 3, 0, 3, 2, 1, 2, 0, 1, 7, 0, 1});
  const auto lru = simulate_lru(trace, 3);
  CHECK(lru.misses == 12);
  CHECK(lru.hits == 8);
  CHECK(lru.hit_rate() == doctest::Approx(0.4));
}

TEST_CASE("a cyclic scan: LRU never hits, Belady keeps all but one slot") {
  // 1 2 3 1 2 3 1 2 3 with two slots: LRU always evicts the key needed next.
  const auto trace = singles({1, 2, 3, 1, 2, 3, 1, 2, 3});
  CHECK(simulate_lru(trace, 2).hits == 0);
  // Belady by hand: 1 2 miss; 3 evicts 2 (1 is needed sooner); 1 hits; 2 evicts
  // 1; 3 hits; 1 evicts 3; 2 hits; 3 misses: hits at positions 4, 6 and 8.
  CHECK(simulate_belady(trace, 2).hits == 3);
}

TEST_CASE("a batch is pinned: Belady does not evict a key of the request it serves") {
  // Two slots, request {A, B} of layer 0, then {C} of layer 1, then B, then A.
  // Serving {C}: both A (used last) and B are cached; it evicts A (farthest).
  // Then B hits, A misses: 3 cold + 1 miss, 1 hit.
  std::vector<ReplayRequest> trace = {{0, {1, 2}}, {1, {3}}, {0, {2}}, {0, {1}}};
  const auto opt = simulate_belady(trace, 2);
  CHECK(opt.hits == 1);
  CHECK(opt.misses == 4);
  // A request of {1, 2} after {1, 3} of the same layer with two slots: when 2
  // misses, 1 was just used by this request and must stay; 3 goes.
  std::vector<ReplayRequest> pinned = {{0, {1, 3}}, {0, {1, 2}}, {0, {3}}};
  const auto pin_opt = simulate_belady(pinned, 2);
  // 1,3 cold; 1 hit; 2 misses evicting 3 (1 is pinned even though never used again); 3 misses.
  CHECK(pin_opt.hits == 1);
  CHECK(pin_opt.misses == 4);
}

TEST_CASE("the same expert id in two layers is two keys, and duplicates in a layer count once") {
  const std::vector<sluice::router::TraceToken> tokens = {{0, {{5, 5, 6}, {5}}}, {1, {{5}, {6}}}};
  const auto requests = sluice::router::replay_requests(tokens);
  REQUIRE(requests.size() == 4);
  CHECK(requests[0].experts == std::vector<uint32_t>{5, 6});
  // Keys: (0,5) (0,6) (1,5) | (0,5) (1,6) with 8 slots: only (0,5) repeats.
  const auto lru = simulate_lru(requests, 8);
  CHECK(lru.accesses == 5);
  CHECK(lru.hits == 1);
}

TEST_CASE("a cache narrower than a request is refused") {
  std::vector<ReplayRequest> trace = {{0, {1, 2, 3}}};
  CHECK_THROWS_AS(simulate_lru(trace, 2), sluice::Error);
  CHECK_THROWS_AS(simulate_belady(trace, 2), sluice::Error);
}
