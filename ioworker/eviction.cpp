// ioworker/eviction.cpp: victim selection (hit_density.h for the default;
// eviction_score.h for next-use; reference-engine.md §4 for LFRU), and the
// per-key history kept across a key's stays in the cache.
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
      density_(static_cast<uint32_t>(container.moe_layers().size())),
      by_frequency_(weigh_frequency(slot_count, uint64_t{container.top_k()} * container.moe_layers().size())) {
  uint64_t keys = 0;
  for (size_t o = 0; o < container.moe_layers().size(); ++o) {
    const MoeLayerInfo& info = container.moe_layers()[o];
    if (info.layer >= ordinal_of_layer_.size()) ordinal_of_layer_.resize(info.layer + 1, kDense);
    ordinal_of_layer_[info.layer] = static_cast<uint32_t>(o);
    first_key_.push_back(keys);
    ordinal_layer_.push_back(info.layer);
    keys += info.experts;
  }
  history_.resize(keys);
  guessed_at_.assign(container.moe_layers().size(), 0);
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

void Evictor::filled(shm::SlotEntry& slot, uint64_t clock) {
  KeyHistory* h = history(slot.key);
  if (h != nullptr && h->first_seen == 0) h->first_seen = clock;
  if (h != nullptr) h->resident = true;
  slot.past_uses = h ? h->uses : 0;
  slot.last_visit = h ? h->last_visit : 0;
  slot.guessed_visit = 0;
}

void Evictor::guessed(uint32_t layer, uint64_t visits) {
  if (const std::optional<uint32_t> o = ordinal(layer)) guessed_at_[*o] = visits;
}

void Evictor::evicted(const shm::SlotEntry& slot) {
  if (KeyHistory* h = history(slot.key)) {
    h->uses += slot.hits;
    h->last_visit = std::max(h->last_visit, slot.last_visit);
    h->resident = false;
  }
}

void Evictor::learn(const shm::Segment& segment) {
  const shm::StatsBlock& stats = segment.stats();
  const shm::ReuseCounters& reuse = stats.reuse;
  HitDensity::Counts used{};
  std::array<uint64_t, HitDensity::kClasses> tail{};
  for (uint32_t c = 0; c < HitDensity::kClasses; ++c) {
    for (uint32_t a = 0; a < HitDensity::kAges; ++a) used[c][a] = reuse.used[c][a].load(std::memory_order_relaxed);
    tail[c] = reuse.tail_visits[c].load(std::memory_order_relaxed);
  }
  density_.load(used, tail);
  density_.clear_waiting();
  const auto visits_of = [&](uint32_t layer) {
    return layer < shm::kStatLayers ? stats.layers[layer].visits.load(std::memory_order_relaxed) : 0;
  };
  for (uint32_t s = 0; s < segment.geometry().slot_count; ++s) {
    const shm::SlotEntry& slot = segment.slot(s);
    if (slot.key == 0 || slot.last_visit == 0) continue;
    const uint64_t visits = visits_of(shm::key_layer(slot.key));
    if (visits < slot.last_visit) continue;
    density_.add_waiting(HitDensity::use_class(slot.hits + slot.past_uses, visits), visits - slot.last_visit);
  }
  for (size_t o = 0; o < first_key_.size(); ++o) {
    const uint64_t visits = visits_of(ordinal_layer_[o]);
    const uint64_t end = o + 1 < first_key_.size() ? first_key_[o + 1] : history_.size();
    for (uint64_t k = first_key_[o]; k < end; ++k) {
      const KeyHistory& h = history_[k];
      if (h.resident || h.last_visit == 0 || visits < h.last_visit) continue;
      density_.add_waiting(HitDensity::use_class(h.uses, visits), visits - h.last_visit);
    }
  }
  density_.refresh();
}

std::optional<uint32_t> Evictor::lowest_density(const shm::Segment& segment) {
  const shm::StatsBlock& stats = segment.stats();
  const uint32_t layers = density_.layers();
  std::optional<uint32_t> best;
  double best_density = 0;
  for (uint32_t s = 0; s < segment.geometry().slot_count; ++s) {
    const shm::SlotEntry& slot = segment.slot(s);
    if (!evictable(slot)) continue;
    if (failed(slot) || slot.key == 0) return s;
    const uint32_t layer = shm::key_layer(slot.key);
    const std::optional<uint32_t> o = ordinal(layer);
    if (!o || layer >= shm::kStatLayers) return s;  // not a key of this model: nothing to keep
    const uint64_t visits = stats.layers[layer].visits.load(std::memory_order_relaxed);
    // Never used: as old as the model ages go.
    const uint64_t age = slot.last_visit == 0 ? HitDensity::kAges : visits - std::min(visits, slot.last_visit);
    const uint32_t ahead = (*o + layers - cycle_.current()) % layers;
    // A guess stands for its layer's next visit only.
    HitDensity::Guess guess = HitDensity::Guess::kUnknown;
    if (slot.guessed_visit != 0 && slot.guessed_visit == visits) {
      guess = HitDensity::Guess::kNamed;
    } else if (guessed_at_[*o] != 0 && guessed_at_[*o] == visits) {
      guess = HitDensity::Guess::kPassedOver;
    }
    const double density = density_.density(HitDensity::use_class(slot.hits + slot.past_uses, visits), age,
                                            ahead == 0 ? layers : ahead, guess);
    if (!best || density < best_density ||
        (density == best_density && slot.last_access < segment.slot(*best).last_access)) {
      best = s;
      best_density = density;
    }
  }
  return best;
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
  if (const std::optional<uint32_t> o = ordinal(layer)) {
    cycle_.observe(*o, clock);
    if (policy_ == EvictionPolicy::kDensity && *o < last_ordinal_) learn(segment);  // a new token
    last_ordinal_ = *o;
  }
  if (auto empty = next_empty(segment)) return empty;
  if (policy_ == EvictionPolicy::kDensity) return lowest_density(segment);
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
