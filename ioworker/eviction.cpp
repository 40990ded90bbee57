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

std::optional<uint32_t> Evictor::next_empty(const shm::Segment& segment) {
  const uint32_t count = segment.geometry().slot_count;
  while (empty_cursor_ < count) {
    const uint32_t s = empty_cursor_++;
    const shm::SlotEntry& slot = segment.slot(s);
    if (slot.state.load(std::memory_order_relaxed) == static_cast<uint32_t>(shm::SlotState::kEmpty) && slot.pins == 0) {
      return s;
    }
  }
  return std::nullopt;
}

std::optional<uint32_t> Evictor::choose_cold(const shm::Segment& segment, uint64_t cold_before) {
  if (auto empty = next_empty(segment)) return empty;
  const uint32_t count = segment.geometry().slot_count;
  std::uniform_int_distribution<uint32_t> pick(0, count - 1);
  std::optional<uint32_t> best;
  for (int i = 0; i < kSamples; ++i) {
    const uint32_t s = pick(cold_rng_);
    const shm::SlotEntry& slot = segment.slot(s);
    // Cold: untouched lately, and never reused since its fill (one pin, or
    // an unused guess): a record that has been reused is worth more than a guess.
    if (!evictable(slot) || slot.last_access >= cold_before || slot.hits > 1) continue;
    if (!best || better_victim(slot, segment.slot(*best), policy_)) best = s;
  }
  return best;
}

std::optional<uint32_t> Evictor::choose(const shm::Segment& segment) {
  if (auto empty = next_empty(segment)) return empty;
  const uint32_t count = segment.geometry().slot_count;
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
