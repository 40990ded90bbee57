// router/replay.h: cache policies measured on recorded routing, without
// compute: LRU and the optimal offline policy (Belady) simulated over the
// same accesses and slot count the real cache is driven with. Simulation only:
// nothing here touches a segment or a disk.
#pragma once

#include <cstdint>
#include <vector>

#include "router/trace.h"

namespace sluice::router {

// One access batch: the distinct experts of one MoE layer for one token, all
// held (pinned) together, as the compute client requests them.
struct ReplayRequest {
  uint32_t layer = 0;  // MoE layer ordinal
  std::vector<uint32_t> experts;
};

// The trace flattened token by token, MoE layer by layer, duplicates in a
// layer dropped (the client asks once per expert).
std::vector<ReplayRequest> replay_requests(const std::vector<TraceToken>& trace);

struct PolicyResult {
  uint64_t accesses = 0;
  uint64_t hits = 0;
  uint64_t misses = 0;
  double hit_rate() const { return accesses ? double(hits) / double(accesses) : 0.0; }
};

// A cache of `slots` slots (at least the widest request; Error otherwise).
// LRU evicts the least recently used key; Belady evicts the key used farthest
// in the future (never again first, the higher key on ties). Neither evicts a key
// of the request being served: the real cache pins a whole batch.
PolicyResult simulate_lru(const std::vector<ReplayRequest>& requests, uint32_t slots);
PolicyResult simulate_belady(const std::vector<ReplayRequest>& requests, uint32_t slots);

}  // namespace sluice::router
