// ioworker/eviction.cpp: victim selection (reference-engine.md §4 for LFRU;
// eviction_score.h for the default), and the per-key history the default
// policy keeps across a key's stays in the cache.
#include "ioworker/eviction.h"

#include <limits>

#include "proto/container.h"
#include "shm/layout.h"

namespace sluice::ioworker {
namespace {

constexpr int kSamples = 16;
constexpr uint32_t kDense = std::numeric_limits<uint32_t>::max();

bool failed(const shm::SlotEntry& slot) {
  return slot.state.load(std::memory_order_relaxed) == static_cast<uint32_t>(shm::SlotState::kFailed);
}

// True when `a` should go before `b`: LFRU compares hits then age, LRU age only.
bool better_victim(const shm::SlotEntry& a, const shm::SlotEntry& b, EvictionPolicy policy) {
  if (failed(a)) return true;
  if (policy == EvictionPolicy::kLfru && a.hits != b.hits) return a.hits < b.hits;
  return a.last_access < b.last_access;
}

}  // namespace

bool evictable(const shm::SlotEntry& slot) {
  const auto state = static_cast<shm::SlotState>(slot.state.load(std::memory_order_relaxed));
  return slot.pins == 0 && (state == shm::SlotState::kReady || state == shm::SlotState::kFailed ||
                            state == shm::SlotState::kEmpty);
}

Evictor::Evictor(EvictionPolicy policy, uint64_t seed, const Container& container, uint32_t slot_count)
    : policy_(policy),
      rng_(seed),
      cold_rng_(~seed),
      cycle_(static_cast<uint32_t>(container.moe_layers().size()), container.top_k()),
      by_frequency_(weigh_frequency(slot_count, uint64_t{container.top_k()} * container.moe_layers().size())) {
  uint64_t keys = 0;
  for (size_t o = 0; o < container.moe_layers().size(); ++o) {
    const MoeLayerInfo& info = container.moe_layers()[o];
    if (info.layer >= ordinal_of_layer_.size()) ordinal_of_layer_.resize(info.layer + 1, kDense);
    ordinal_of_layer_[info.layer] = static_cast<uint32_t>(o);
    first_key_.push_back(keys);
    keys += info.experts;
  }
  history_.resize(keys);
}

std::optional<uint32_t> Evictor::ordinal(uint32_t layer) const {
  if (layer >= ordinal_of_layer_.size() || ordinal_of_layer_[layer] == kDense) return std::nullopt;
  return ordinal_of_layer_[layer];
}

Evictor::KeyHistory* Evictor::history(uint64_t key) {
  const std::optional<uint32_t> o = ordinal(shm::key_layer(key));
  if (!o) return nullptr;
  const uint64_t index = first_key_[*o] + shm::key_expert(key);
  const uint64_t end = *o + 1 < first_key_.size() ? first_key_[*o + 1] : history_.size();
  return index < end ? &history_[index] : nullptr;
}

void Evictor::filled(uint64_t key, uint64_t clock) {
  if (KeyHistory* h = history(key); h != nullptr && h->first_seen == 0) h->first_seen = clock;
}

void Evictor::evicted(uint64_t key, uint64_t hits) {
  if (KeyHistory* h = history(key)) h->uses += hits;
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

std::optional<uint32_t> Evictor::choose(const shm::Segment& segment, uint32_t layer) {
  const uint64_t clock = segment.header().clock.load(std::memory_order_relaxed);
  if (const std::optional<uint32_t> o = ordinal(layer)) cycle_.observe(*o, clock);
  if (auto empty = next_empty(segment)) return empty;
  const uint32_t count = segment.geometry().slot_count;
  std::optional<uint32_t> best;
  if (policy_ == EvictionPolicy::kNextUse) {
    const double ticks_per_token = cycle_.ticks_per_token();
    double best_score = 0;
    for (uint32_t s = 0; s < count; ++s) {
      const shm::SlotEntry& slot = segment.slot(s);
      if (!evictable(slot)) continue;
      if (failed(slot) || slot.key == 0) return s;
      const KeyHistory* h = history(slot.key);
      const std::optional<uint32_t> o = ordinal(shm::key_layer(slot.key));
      const SlotFacts facts{o.value_or(0), slot.hits, slot.last_access, h ? h->uses : 0, h ? h->first_seen : 0};
      const double score = next_use_estimate(facts, cycle_, clock, ticks_per_token, by_frequency_);
      if (!best || score > best_score || (score == best_score && slot.last_access < segment.slot(*best).last_access)) {
        best = s;
        best_score = score;
      }
    }
    return best;
  }
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
