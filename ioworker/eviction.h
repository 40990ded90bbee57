// ioworker/eviction.h: which slot the worker refills. An empty slot first;
// otherwise LFRU (sample 16, evict the lowest hit count, oldest access on
// ties, a full scan when every sample is busy) or plain LRU for comparison.
// It only ever returns an unpinned READY/FAILED slot; the caller holds the lock.
#pragma once

#include <cstdint>
#include <optional>
#include <random>

#include "ioworker/worker.h"
#include "shm/segment.h"

namespace sluice::ioworker {

class Evictor {
 public:
  Evictor(EvictionPolicy policy, uint64_t seed) : policy_(policy), rng_(seed) {}
  // A slot that may take a new key now, or nothing when every slot is
  // pinned or loading.
  std::optional<uint32_t> choose(const shm::Segment& segment);

 private:
  EvictionPolicy policy_;
  std::mt19937_64 rng_;
  uint32_t empty_cursor_ = 0;  // slots below it have been filled once
};

// Whether a slot may be refilled: nobody pins it and no read is landing in it.
bool evictable(const shm::SlotEntry& slot);

}  // namespace sluice::ioworker
