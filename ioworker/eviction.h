// ioworker/eviction.h: which slot the worker refills. An empty slot first;
// otherwise the default hit-density policy (hit_density.h: the unpinned key
// expected to bring the fewest hits per slot and layer step, from its layer's
// distance, its age in visits and its uses, every slot scanned), or for
// comparison next-use (eviction_score.h), LFRU (sample 16, fewest hits,
// oldest on ties) or plain LRU. A speculative read takes only a slot that has gone
// cold. It only ever returns an unpinned READY/FAILED/EMPTY slot; the caller
// holds the lock.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "ioworker/eviction_score.h"
#include "ioworker/hit_density.h"
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
  // The worker tells the policy what it does to a slot: `slot` took its key
  // at header clock `clock` (the policy writes the key's history into it:
  // past uses, last visit), or `slot` is about to drop its key.
  void filled(shm::SlotEntry& slot, uint64_t clock);
  void evicted(const shm::SlotEntry& slot);
  // The lookahead guessed model layer `layer`'s visit after its `visits`-th
  // (the slots it named carry guessed_visit; the others were passed over).
  void guessed(uint32_t layer, uint64_t visits);

 private:
  struct KeyHistory {
    uint64_t uses = 0;        // over earlier stays in the cache
    uint64_t first_seen = 0;  // header clock of the first fill; 0: never filled
    uint64_t last_visit = 0;  // its layer's visits at its last use; 0: never used
    bool resident = false;    // in a slot now (whose counters are the current ones)
  };

  std::optional<uint32_t> next_empty(const shm::Segment& segment);
  std::optional<uint32_t> lowest_density(const shm::Segment& segment);
  // Reloads the density model from the reuse the clients counted and the
  // keys waiting now (every slot and every key's history).
  void learn(const shm::Segment& segment);
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
  std::vector<uint32_t> ordinal_layer_;     // MoE ordinal → model layer
  std::vector<KeyHistory> history_;         // every (MoE layer, expert)
  LayerCycle cycle_;
  HitDensity density_;
  std::vector<uint64_t> guessed_at_;  // MoE ordinal → visits when its next visit was guessed; 0: never
  uint32_t last_ordinal_ = 0;  // of the latest miss: a smaller one starts a token, and a refresh
  bool by_frequency_;
};

// Whether a slot may be refilled: nobody pins it and no read is landing in it.
bool evictable(const shm::SlotEntry& slot);

}  // namespace sluice::ioworker
