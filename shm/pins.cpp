// shm/pins.cpp: pin lists and slot pin counts, changed together under the lock.
#include "shm/pins.h"

#include "proto/error.h"

namespace sluice::shm {

void pin_slot(Segment& segment, uint32_t client, uint32_t position, uint32_t slot) {
  std::span<uint32_t> pins = segment.client_pins(client);
  if (position >= pins.size()) fail("cache client {}: pin position {} out of range ({})", client, position, pins.size());
  SlotEntry& entry = segment.slot(slot);
  if (pins[position] != kNoSlot) fail("cache client {}: position {} is already pinned", client, position);
  pins[position] = slot + 1;  // listed before counted: see rebuild_pin_counts
  ++entry.pins;
  ++entry.hits;
  entry.used = 1;
  entry.last_access = segment.header().clock.fetch_add(1, std::memory_order_relaxed) + 1;
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
