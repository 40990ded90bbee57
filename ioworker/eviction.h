// ioworker/eviction.h: which slot the worker refills. An empty slot first;
// otherwise the default next-use policy (eviction_score.h: the unpinned key
// whose layer comes round last and that is least likely to be used then,
// every slot scanned), or for comparison LFRU (sample 16, fewest hits, oldest
// on ties) or plain LRU. A speculative read takes only a slot that has gone
// cold. It only ever returns an unpinned READY/FAILED/EMPTY slot; the caller
// holds the lock.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "ioworker/eviction_score.h"
#include "ioworker/worker.h"
#include "shm/segment.h"

namespace sluice {
class Container;
}

namespace sluice::ioworker {

class Evictor {
 public:
  // `container` gives the MoE layers (the cycle) and their expert counts.
  Evictor(EvictionPolicy policy, uint64_t seed, const Container& container, uint32_t slot_count);
  // A slot that may take a new key of model layer `layer` now, or nothing
  // when every slot is pinned or loading.
  std::optional<uint32_t> choose(const shm::Segment& segment, uint32_t layer);
  // For a prefetch: an empty slot, else the best sampled slot not accessed
  // since header clock `cold_before` and not reused since its fill; nothing
  // when no sample is that cold (no full scan), so a guess never displaces a
  // record the next token is likely to reuse. Without this, lookahead read
  // +190% bytes on a cache of one working set (bench decode).
  std::optional<uint32_t> choose_cold(const shm::Segment& segment, uint64_t cold_before);
  // The worker tells the policy what it does to a slot: `key` filled at
  // header clock `clock`, or a key dropped after `hits` uses.
  void filled(uint64_t key, uint64_t clock);
  void evicted(uint64_t key, uint64_t hits);

 private:
  struct KeyHistory {
    uint64_t uses = 0;        // over earlier stays in the cache
    uint64_t first_seen = 0;  // header clock of the first fill; 0: never filled
  };

  std::optional<uint32_t> next_empty(const shm::Segment& segment);
  KeyHistory* history(uint64_t key);
  std::optional<uint32_t> ordinal(uint32_t layer) const;

  EvictionPolicy policy_;
  std::mt19937_64 rng_;
  // Guesses sample from their own stream, so a dropped guess cannot change
  // which slots demand reads evict (runs with lookahead on and off compare).
  std::mt19937_64 cold_rng_;
  uint32_t empty_cursor_ = 0;               // slots below it have been filled once
  std::vector<uint32_t> ordinal_of_layer_;  // model layer → MoE ordinal, UINT32_MAX when dense
  std::vector<uint64_t> first_key_;         // MoE ordinal → index of its expert 0 in history_
  std::vector<KeyHistory> history_;         // every (MoE layer, expert)
  LayerCycle cycle_;
  bool by_frequency_;
};

// Whether a slot may be refilled: nobody pins it and no read is landing in it.
bool evictable(const shm::SlotEntry& slot);

}  // namespace sluice::ioworker
