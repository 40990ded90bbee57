// shm/ring.h: a bounded FIFO of requests in the segment (the demand ring:
// clients → worker; the prefetch queue). Callers hold the segment lock, which
// makes it multi-producer without atomics. Head and tail are re-checked on
// every use so a scribbled header empties the ring instead of overrunning it.
#pragma once

#include <cstdint>
#include <optional>

#include "shm/layout.h"

namespace sluice::shm {

class RingView {
 public:
  RingView(RingHeader& header, uint32_t capacity);
  // False when the ring is full.
  bool push(const RingEntry& entry);
  std::optional<RingEntry> pop();
  uint32_t size() const;

 private:
  RingEntry* entries() const;
  void repair() const;

  RingHeader& header_;
  uint32_t capacity_;
};

}  // namespace sluice::shm
