// router/replay.h: cache policies measured on recorded or synthetic routing,
// without compute: the real cache's policies, LRU, a segmented LRU and the
// optimal offline policy (Belady) simulated over the same accesses, slot
// count and batch-and-pin rule the real cache is driven with. Simulation
// only: nothing here touches a segment or a disk.
#pragma once

#include <cstdint>
#include <string>
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

// Every simulated request is served as the real cache serves it: the
// layer's cached experts are looked up and pinned first, then each miss
// evicts an unpinned slot. Pins last until the request is done.
enum class SimPolicy {
  kLru,      // least recently used
  kLfru,     // sluice-io's former default: sample 16, fewest hits since the fill, oldest on ties
  kSlru,     // segmented LRU: a hit moves a key to the protected 80%, misses evict the probationary
             // LRU
  kNextUse,  // sluice-io's former default (eviction_score.h): farthest estimated next use, from the
             // layer cycle
  kDensity,  // sluice-io's default (hit_density.h): lowest learned hit density per slot and step
  kLookahead,  // density, with the keys a simulated lookahead names for the next layer protected
  kS3Fifo,     // S3-FIFO (router/queue_policies.h)
  kTinyLfu,    // W-TinyLFU (router/queue_policies.h)
  kCycle,      // the farthest expected next use (hit_density.h steps_to_use), lookahead guesses weighed
};
inline constexpr SimPolicy kAllPolicies[] = {SimPolicy::kLru,     SimPolicy::kLfru,      SimPolicy::kSlru,
                                             SimPolicy::kS3Fifo,  SimPolicy::kTinyLfu,   SimPolicy::kNextUse,
                                             SimPolicy::kDensity, SimPolicy::kLookahead, SimPolicy::kCycle};
const char* policy_name(SimPolicy policy);
// Parses a policy_name; throws Error naming `flag`.
SimPolicy parse_policy(const std::string& name, const std::string& flag);

// A cache of `slots` slots (at least the widest request; Error otherwise),
// for a model of `layers` MoE layers (the next-use policy's cycle). The
// lookahead and cycle policies are told guesses for the next `guess_layers`
// requests (sluice-router guesses one: the next layer's).
PolicyResult simulate(const std::vector<ReplayRequest>& requests, uint32_t slots, uint32_t layers, SimPolicy policy,
                      uint64_t seed = 0x5eed, uint32_t guess_layers = 1);
PolicyResult simulate_lru(const std::vector<ReplayRequest>& requests, uint32_t slots);
// Belady evicts the unpinned key used farthest in the future (never again
// first, the higher key on ties).
PolicyResult simulate_belady(const std::vector<ReplayRequest>& requests, uint32_t slots);

}  // namespace sluice::router
