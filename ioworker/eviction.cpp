// ioworker/eviction.cpp: victim selection (reference-engine.md §4).
#include "ioworker/eviction.h"

namespace sluice::ioworker {
namespace {

constexpr int kSamples = 16;

// True when `a` should go before `b`: LFRU compares hits then age, LRU age only.
bool better_victim(const shm::SlotEntry& a, const shm::SlotEntry& b, EvictionPolicy policy) {
  if (a.state.load(std::memory_order_relaxed) == static_cast<uint32_t>(shm::SlotState::kFailed)) return true;
  if (policy == EvictionPolicy::kLfru && a.hits != b.hits) return a.hits < b.hits;
  return a.last_access < b.last_access;
}

}  // namespace

bool evictable(const shm::SlotEntry& slot) {
  const auto state = static_cast<shm::SlotState>(slot.state.load(std::memory_order_relaxed));
  return slot.pins == 0 && (state == shm::SlotState::kReady || state == shm::SlotState::kFailed ||
                            state == shm::SlotState::kEmpty);
}

std::optional<uint32_t> Evictor::choose(const shm::Segment& segment) {
  const uint32_t count = segment.geometry().slot_count;
  while (empty_cursor_ < count) {
    const uint32_t s = empty_cursor_++;
    const shm::SlotEntry& slot = segment.slot(s);
    if (slot.state.load(std::memory_order_relaxed) == static_cast<uint32_t>(shm::SlotState::kEmpty) && slot.pins == 0) {
      return s;
    }
  }
  std::optional<uint32_t> best;
  const auto consider = [&](uint32_t s) {
    const shm::SlotEntry& slot = segment.slot(s);
    if (!evictable(slot)) return;
    if (!best || better_victim(slot, segment.slot(*best), policy_)) best = s;
  };
  if (policy_ == EvictionPolicy::kLfru) {
    std::uniform_int_distribution<uint32_t> pick(0, count - 1);
    for (int i = 0; i < kSamples; ++i) consider(pick(rng_));
    if (best) return best;
  }
  for (uint32_t s = 0; s < count; ++s) consider(s);
  return best;
}

}  // namespace sluice::ioworker
