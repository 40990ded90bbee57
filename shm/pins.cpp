// shm/pins.cpp: pin lists and slot pin counts, changed together under the lock.
#include "shm/pins.h"

#include <algorithm>

#include "proto/error.h"

namespace sluice::shm {

void hold_slot(Segment& segment, uint32_t client, uint32_t position, uint32_t slot) {
  std::span<uint32_t> pins = segment.client_pins(client);
  if (position >= pins.size()) fail("cache client {}: pin position {} out of range ({})", client, position, pins.size());
  SlotEntry& entry = segment.slot(slot);
  if (pins[position] != kNoSlot) fail("cache client {}: position {} is already pinned", client, position);
  pins[position] = slot + 1;  // listed before counted: see rebuild_pin_counts
  ++entry.pins;
}

void pin_slot(Segment& segment, uint32_t client, uint32_t position, uint32_t slot) {
  hold_slot(segment, client, position, slot);
  count_access(segment, slot);
}

void count_access(Segment& segment, uint32_t slot) {
  SlotEntry& entry = segment.slot(slot);
  const uint32_t layer = key_layer(entry.key);
  if (layer < kStatLayers) {
    StatsBlock& stats = segment.stats();
    const uint64_t visits = stats.layers[layer].visits.load(std::memory_order_relaxed);
    if (entry.last_visit != 0 && visits > entry.last_visit) {
      count_reuse(stats.reuse, reuse_class(entry.hits + entry.past_uses, visits), visits - entry.last_visit);
    }
    entry.last_visit = visits;
  }
  ++entry.hits;
  entry.used = 1;
  entry.last_access = segment.header().clock.fetch_add(1, std::memory_order_relaxed) + 1;
}

uint32_t reuse_class(uint64_t uses, uint64_t known) {
  constexpr double kBounds[kReuseClasses - 1] = {1 / 64.0, 1 / 32.0, 1 / 16.0, 1 / 8.0, 1 / 4.0, 3 / 8.0, 1 / 2.0};
  const double rate = (double(uses) + 0.4) / (double(known) + 4.0);
  uint32_t c = 0;
  while (c < kReuseClasses - 1 && rate >= kBounds[c]) ++c;
  return c;
}

void count_reuse(ReuseCounters& reuse, uint32_t cls, uint64_t age) {
  const uint32_t c = std::min(cls, kReuseClasses - 1);
  if (age >= kReuseAges) {
    reuse.used[c][kReuseAges - 1].fetch_add(1, std::memory_order_relaxed);
    reuse.tail_visits[c].fetch_add(age - kReuseAges + 1, std::memory_order_relaxed);
  } else if (age > 0) {
    reuse.used[c][age - 1].fetch_add(1, std::memory_order_relaxed);
  }
}

bool unpin_position(Segment& segment, uint32_t client, uint32_t position) {
  std::span<uint32_t> pins = segment.client_pins(client);
  if (position >= pins.size() || pins[position] == kNoSlot) return false;
  const uint32_t slot = pins[position] - 1;
  pins[position] = kNoSlot;
  if (slot >= segment.geometry().slot_count) return false;
  SlotEntry& entry = segment.slot(slot);
  if (entry.pins > 0) --entry.pins;
  return entry.pins == 0;
}

void release_client(Segment& segment, uint32_t client) {
  ClientEntry& entry = segment.client(client);
  const std::span<uint32_t> pins = segment.client_pins(client);
  for (uint32_t p = 0; p < pins.size(); ++p) unpin_position(segment, client, p);
  const uint64_t bit = uint64_t{1} << client;
  for (uint32_t s = 0; s < segment.geometry().slot_count; ++s) segment.slot(s).waiters &= ~bit;
  ++entry.epoch;  // requests it queued no longer match: the worker drops them
  entry.pid = 0;
  entry.state.store(static_cast<uint32_t>(ClientState::kFree), std::memory_order_release);
}

}  // namespace sluice::shm
