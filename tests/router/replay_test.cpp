// tests/router/replay_test.cpp: the LRU and Belady simulators against hit
// counts worked out by hand on small traces.
#include "router/replay.h"

#include <doctest/doctest.h>

#include "proto/error.h"

using sluice::router::parse_policy;
using sluice::router::policy_name;
using sluice::router::ReplayRequest;
using sluice::router::SimPolicy;
using sluice::router::simulate;
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

TEST_CASE("LRU serves a batch as the cache does: the layer's hits are pinned before its misses evict") {
  // Three slots: 1 2 3, then {4, 1}. The cache pins 1 (a hit) first, so 4
  // evicts 2, the least recent unpinned key; {2} then evicts 3; {1} hits.
  // One key at a time, 4 would have evicted 1 and lost both later hits.
  std::vector<ReplayRequest> trace = {{0, {1}}, {0, {2}}, {0, {3}}, {0, {4, 1}}, {0, {2}}, {0, {1}}};
  const auto lru = simulate_lru(trace, 3);
  CHECK(lru.accesses == 7);
  CHECK(lru.hits == 2);
  CHECK(lru.misses == 5);
}

TEST_CASE("segmented LRU keeps a key that was hit through a scan of new keys") {
  // Three slots, singles 1 2 1 3 4 5 1: the hit moves 1 to the protected
  // segment, so 4 and 5 evict 2 and 3 from probation and 1 hits at the end
  // (hits: the second 1 and the last). LRU evicts 2 then 1 and misses it.
  const auto trace = singles({1, 2, 1, 3, 4, 5, 1});
  CHECK(simulate(trace, 3, 1, SimPolicy::kSlru).hits == 2);
  CHECK(simulate_lru(trace, 3).hits == 1);
}

TEST_CASE("next-use evicts the key whose layer comes round last, where LRU evicts the oldest") {
  // Three MoE layers, top-1, four slots (under 1.5 working sets: the
  // distance alone decides). a b c fill layers 0 1 2, d fills the fourth slot
  // at layer 0, b hits at layer 1; at layer 2, e must evict: a and d (layer
  // 0) are one layer away, b two, c (layer 2, not asked for now) a whole
  // token. Next-use evicts c and a hits at layer 0; LRU evicts a, the
  // oldest, and misses it.
  const std::vector<ReplayRequest> trace = {{0, {1}}, {1, {2}}, {2, {3}}, {0, {4}}, {1, {2}}, {2, {5}}, {0, {1}}};
  const auto next_use = simulate(trace, 4, 3, SimPolicy::kNextUse);
  CHECK(next_use.hits == 2);
  CHECK(next_use.misses == 5);
  CHECK(simulate(trace, 4, 3, SimPolicy::kLru).hits == 1);
  CHECK(simulate_belady(trace, 4).hits == 2);
}

TEST_CASE("policy names parse, and an unknown one is refused naming the flag") {
  CHECK(parse_policy("next-use", "--policy") == SimPolicy::kNextUse);
  CHECK(parse_policy("slru", "--policy") == SimPolicy::kSlru);
  CHECK_THROWS_WITH(parse_policy("arc", "--policy"), doctest::Contains("--policy: 'arc'"));
}

TEST_CASE("density, like next-use, evicts the key whose layer comes round last") {
  // The trace of the next-use case: at layer 2, c (layer 2) is a whole token
  // from its next chance, a and d one layer away; density evicts c, a hits.
  const std::vector<ReplayRequest> trace = {{0, {1}}, {1, {2}}, {2, {3}}, {0, {4}}, {1, {2}}, {2, {5}}, {0, {1}}};
  for (SimPolicy p : {SimPolicy::kDensity, SimPolicy::kLookahead, SimPolicy::kCycle}) {
    CAPTURE(policy_name(p));
    const auto r = simulate(trace, 4, 3, p);
    CHECK(r.hits == 2);
    CHECK(r.misses == 5);
  }
}

TEST_CASE("density learns to keep the key that keeps coming back, where LRU evicts it") {
  // One layer, top-1, two slots: expert 1 at every third visit, a fresh
  // expert at the others (1 a b 1 c d ...). At each second fresh miss the
  // cache holds 1 (two visits old) and the first fresh key: LRU evicts 1 and
  // never hits; Belady evicts the fresh key. Density learns that keys like 1
  // come back at the third visit and keys used once never do.
  std::vector<ReplayRequest> trace;
  for (uint32_t t = 0; t < 90; ++t) trace.push_back({0, {t % 3 == 0 ? 1u : 100 + t}});
  CHECK(simulate_lru(trace, 2).hits == 0);
  CHECK(simulate_belady(trace, 2).hits == 29);
  const auto density = simulate(trace, 2, 1, SimPolicy::kDensity);
  CHECK(density.hits >= 25);
  CHECK(density.hits <= 29);
}

TEST_CASE("policy names include density and lookahead") {
  CHECK(parse_policy("density", "--policy") == SimPolicy::kDensity);
  CHECK(parse_policy("lookahead", "--policy") == SimPolicy::kLookahead);
  CHECK_THROWS_WITH(parse_policy("arc", "--policy"), doctest::Contains("lookahead or cycle"));
}

TEST_CASE("every policy name parses back to its policy") {
  for (SimPolicy p : sluice::router::kAllPolicies) CHECK(parse_policy(policy_name(p), "--policy") == p);
}

TEST_CASE("S3-FIFO moves a key reused in the small queue to main, where LRU lets a scan evict it") {
  // Three slots (small queue of one), singles 1 1 2 3 4 1. When 4 misses the
  // small queue holds 1 (reused), 2 and 3: 1 moves to main, 2 goes. So the
  // last 1 hits: hits are the second 1 and the last. LRU evicts 1 for 4.
  const auto trace = singles({1, 1, 2, 3, 4, 1});
  CHECK(simulate(trace, 3, 1, SimPolicy::kS3Fifo).hits == 2);
  CHECK(simulate_lru(trace, 3).hits == 1);
}

TEST_CASE("S3-FIFO sends a key back from its ghost queue straight to main") {
  // Three slots, singles 1 2 3 4 1 5 6 7 1. 4 evicts 1 from the small queue
  // into the ghost; 1 comes back, evicting 2, and goes to main; 5 6 7 then
  // evict 3, 4 and 5 from the small queue and the last 1 hits. LRU evicts 1
  // again for 7 (1 is then the oldest of 1, 5, 6) and never hits.
  const auto trace = singles({1, 2, 3, 4, 1, 5, 6, 7, 1});
  const auto s3 = simulate(trace, 3, 1, SimPolicy::kS3Fifo);
  CHECK(s3.hits == 1);
  CHECK(s3.misses == 8);
  CHECK(simulate_lru(trace, 3).hits == 0);
}

TEST_CASE("W-TinyLFU admits a new key into main only if it was used more often than main's oldest") {
  // Three slots: a window of one, main of two. Singles 1 1 1 2 3 4 5 1: when
  // 4 misses, 1 and 2 leave the window for main and 3 (used once) loses to
  // main's oldest, 1 (used three times): 3 goes. 5 likewise evicts 4, so 1
  // hits at the end: 3 hits. LRU evicts 1 for 4 and hits only twice.
  const auto trace = singles({1, 1, 1, 2, 3, 4, 5, 1});
  const auto tiny = simulate(trace, 3, 1, SimPolicy::kTinyLfu);
  CHECK(tiny.hits == 3);
  CHECK(tiny.misses == 5);
  CHECK(simulate_lru(trace, 3).hits == 2);
}

TEST_CASE("the new policies never take a pinned slot") {
  // Two slots: {1, 2}, {3, 4}, {1, 3}, {3, 1}. After {3, 4} the cache holds
  // exactly 3 and 4; serving {1, 3}, 3 hits and is pinned, so 1 must evict 4
  // and {3, 1} hits twice: 3 hits whatever the policy. Evicting the pinned 3
  // would leave 1 and 4, and one hit fewer.
  const std::vector<ReplayRequest> trace = {{0, {1, 2}}, {0, {3, 4}}, {0, {1, 3}}, {0, {3, 1}}};
  for (SimPolicy p : {SimPolicy::kS3Fifo, SimPolicy::kTinyLfu, SimPolicy::kCycle}) {
    CAPTURE(policy_name(p));
    const auto r = simulate(trace, 2, 1, p);
    CHECK(r.accesses == 8);
    CHECK(r.hits == 3);
  }
  CHECK(simulate_belady(trace, 2).hits == 3);
}
