// shm/index.h: the key→slot index: open addressing with linear probing and
// backward-shift deletion over a fixed table in the segment. Callers hold the
// segment lock; every probe is bounded by the capacity and every slot number
// read back is checked, so a scribbled table cannot loop or index out of range.
#pragma once

#include <cstdint>
#include <optional>

#include "shm/layout.h"

namespace sluice::shm {

class IndexView {
 public:
  // `capacity` is a power of two; slots found must be < `slot_count`.
  IndexView(IndexEntry* table, uint32_t capacity, uint32_t slot_count);

  // The slot holding `key`, or nothing (also when the entry's slot is out of range).
  std::optional<uint32_t> find(uint64_t key) const;
  // Adds or replaces `key`. Throws Error when the table is full.
  void insert(uint64_t key, uint32_t slot);
  // Removes `key`; false when it was not there.
  bool erase(uint64_t key);
  void clear();
  uint32_t size() const;

 private:
  uint32_t home(uint64_t key) const;

  IndexEntry* table_;
  uint32_t capacity_;
  uint32_t slot_count_;
};

}  // namespace sluice::shm
