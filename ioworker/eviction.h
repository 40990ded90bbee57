// ioworker/eviction.h: which slot the worker refills. An empty slot first;
// otherwise LFRU (sample 16, evict the lowest hit count, oldest access on
// ties, a full scan when every sample is busy) or plain LRU for comparison.
// A speculative read takes only a slot that has gone cold. It only ever
// returns an unpinned READY/FAILED slot; the caller holds the lock.
#pragma once

#include <cstdint>
#include <optional>
#include <random>

#include "ioworker/worker.h"
#include "shm/segment.h"

namespace sluice::ioworker {

class Evictor {
 public:
  Evictor(EvictionPolicy policy, uint64_t seed) : policy_(policy), rng_(seed), cold_rng_(~seed) {}
  // A slot that may take a new key now, or nothing when every slot is
  // pinned or loading.
  std::optional<uint32_t> choose(const shm::Segment& segment);
  // For a prefetch: an empty slot, else the best sampled slot not accessed
  // since header clock `cold_before` and not reused since its fill; nothing
  // when no sample is that cold (no full scan), so a guess never displaces a
  // record the next token is likely to reuse. Without this, lookahead read
  // +190% bytes on a cache of one working set (bench decode).
  std::optional<uint32_t> choose_cold(const shm::Segment& segment, uint64_t cold_before);

 private:
  std::optional<uint32_t> next_empty(const shm::Segment& segment);

  EvictionPolicy policy_;
  std::mt19937_64 rng_;
  // Guesses sample from their own stream, so a dropped guess cannot change
  // which slots demand reads evict (runs with lookahead on and off compare).
  std::mt19937_64 cold_rng_;
  uint32_t empty_cursor_ = 0;  // slots below it have been filled once
};

// Whether a slot may be refilled: nobody pins it and no read is landing in it.
bool evictable(const shm::SlotEntry& slot);

}  // namespace sluice::ioworker
