// shm/index.cpp: linear probing with backward-shift deletion (no tombstones,
// so lookups stay short however many evictions have happened).
#include "shm/index.h"

#include "proto/error.h"

namespace sluice::shm {

IndexView::IndexView(IndexEntry* table, uint32_t capacity, uint32_t slot_count)
    : table_(table), capacity_(capacity), slot_count_(slot_count) {}

uint32_t IndexView::home(uint64_t key) const {
  uint64_t x = key + 0x9E3779B97F4A7C15ull;  // splitmix64 finaliser
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  return static_cast<uint32_t>(x & (capacity_ - 1));
}

std::optional<uint32_t> IndexView::find(uint64_t key) const {
  if (key == 0) return std::nullopt;
  uint32_t at = home(key);
  for (uint32_t probes = 0; probes < capacity_; ++probes, at = (at + 1) & (capacity_ - 1)) {
    const IndexEntry& e = table_[at];
    if (e.key == 0) return std::nullopt;
    if (e.key == key) {
      if (e.slot >= slot_count_) return std::nullopt;
      return e.slot;
    }
  }
  return std::nullopt;
}

void IndexView::insert(uint64_t key, uint32_t slot) {
  if (key == 0) fail("cache index: key 0 is reserved");
  uint32_t at = home(key);
  for (uint32_t probes = 0; probes < capacity_; ++probes, at = (at + 1) & (capacity_ - 1)) {
    IndexEntry& e = table_[at];
    if (e.key == 0 || e.key == key) {
      e.key = key;
      e.slot = slot;
      return;
    }
  }
  fail("cache index: full ({} entries)", capacity_);
}

bool IndexView::erase(uint64_t key) {
  if (key == 0) return false;
  const uint32_t mask = capacity_ - 1;
  uint32_t hole = home(key);
  uint32_t probes = 0;
  for (; probes < capacity_; ++probes, hole = (hole + 1) & mask) {
    if (table_[hole].key == 0) return false;
    if (table_[hole].key == key) break;
  }
  if (probes == capacity_) return false;
  // Shift later members of the cluster back over the hole when their home
  // does not lie cyclically in (hole, at].
  uint32_t at = hole;
  for (uint32_t step = 0; step < capacity_; ++step) {
    at = (at + 1) & mask;
    if (table_[at].key == 0) break;
    const uint32_t h = home(table_[at].key);
    const bool stays = hole <= at ? (hole < h && h <= at) : (hole < h || h <= at);
    if (stays) continue;
    table_[hole] = table_[at];
    hole = at;
  }
  table_[hole] = IndexEntry{};
  return true;
}

void IndexView::clear() {
  for (uint32_t i = 0; i < capacity_; ++i) table_[i] = IndexEntry{};
}

uint32_t IndexView::size() const {
  uint32_t n = 0;
  for (uint32_t i = 0; i < capacity_; ++i) n += table_[i].key != 0;
  return n;
}

}  // namespace sluice::shm
