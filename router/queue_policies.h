// router/queue_policies.h: the frequency-admission policies the replay
// simulator compares with the shipped ones, S3-FIFO and W-TinyLFU, kept on
// slot indices. Bookkeeping only: the simulator owns the slots, decides hits
// and pins, and tells a policy what happened; a policy never picks a pinned slot.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

namespace sluice::router {

class QueuePolicy {
 public:
  using IsPinned = std::function<bool(uint32_t slot)>;
  virtual ~QueuePolicy() = default;
  // `slot` now holds `key` (a miss just filled it).
  virtual void filled(uint32_t slot, uint64_t key) = 0;
  // The key in `slot` was used again.
  virtual void hit(uint32_t slot) = 0;
  // A full cache's victim: an unpinned slot, whose key the caller replaces
  // (then calls filled). Nothing when every slot is pinned.
  virtual std::optional<uint32_t> victim(const IsPinned& pinned) = 0;
};

// S3-FIFO (Yang et al., SOSP '23): new keys enter a small FIFO (10% of the
// slots); a key reused there moves to the main FIFO, others leave and are
// remembered in a ghost FIFO, whose keys go straight to main when they come
// back. Main reinserts a key with uses left (at most 3, one spent per pass).
std::unique_ptr<QueuePolicy> make_s3_fifo(uint32_t slots);

// W-TinyLFU (Einziger et al., 2017): a 1% LRU window before a segmented LRU
// (20% probation, 80% protected); a key leaving the window displaces
// probation's LRU only if it was used more often recently. Frequencies are
// exact counts halved every 10 × slots accesses (the sketch's aging without
// its collisions, so the policy is measured, not the sketch).
std::unique_ptr<QueuePolicy> make_tiny_lfu(uint32_t slots);

}  // namespace sluice::router
