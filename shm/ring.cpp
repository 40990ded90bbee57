// shm/ring.cpp: the bounded request FIFO. Head and tail run free (mod 2^32);
// the entry index is taken mod the capacity fixed by the geometry.
#include "shm/ring.h"

namespace sluice::shm {

RingView::RingView(RingHeader& header, uint32_t capacity) : header_(header), capacity_(capacity) {}

RingEntry* RingView::entries() const { return reinterpret_cast<RingEntry*>(&header_ + 1); }

void RingView::repair() const {
  // A count beyond the capacity can only come from a scribbled header: drop
  // the contents rather than read past the ring.
  if (header_.tail - header_.head > capacity_) header_.head = header_.tail;
}

bool RingView::push(const RingEntry& entry) {
  repair();
  if (header_.tail - header_.head >= capacity_) return false;
  entries()[header_.tail % capacity_] = entry;
  ++header_.tail;
  return true;
}

std::optional<RingEntry> RingView::pop() {
  repair();
  if (header_.tail == header_.head) return std::nullopt;
  const RingEntry entry = entries()[header_.head % capacity_];
  ++header_.head;
  return entry;
}

uint32_t RingView::size() const {
  repair();
  return header_.tail - header_.head;
}

}  // namespace sluice::shm
