// ioworker/eviction_score.h: the next-use estimate behind the former default
// eviction policy (--policy next-use), shared by sluice-io's evictor and the replay simulator so
// the policy measured is the policy shipped. Pure arithmetic on a slot's
// counters: no segment, no lock, no I/O.
#pragma once

#include <algorithm>
#include <cstdint>

namespace sluice::ioworker {

// Decode visits the MoE layers in order, once per token: the expert of the
// layer being served now has its next chance a whole token away, the next
// layer's experts one layer away. Tracks where in that cycle the cache is
// and how many clock ticks a token takes, from the layers of the misses.
class LayerCycle {
 public:
  LayerCycle(uint32_t layers, uint32_t top_k)
      : layers_(std::max<uint32_t>(layers, 1)),
        first_guess_(2.0 * layers_ * std::max<uint32_t>(top_k, 1)) {}
  // A miss of MoE layer `ordinal` at header clock `clock`.
  void observe(uint32_t ordinal, uint64_t clock) {
    if (ordinal < current_ && clock > wrapped_at_) {
      // A new token: the ticks it took, smoothed.
      const double ticks = double(clock - wrapped_at_);
      ticks_per_token_ = ticks_per_token_ > 0 ? 0.75 * ticks_per_token_ + 0.25 * ticks : ticks;
      wrapped_at_ = clock;
    }
    current_ = ordinal;
  }
  uint32_t layers() const { return layers_; }
  uint32_t current() const { return current_; }
  // Before the first whole token: a fill and a pin per routed expert.
  double ticks_per_token() const { return ticks_per_token_ > 0 ? ticks_per_token_ : first_guess_; }

 private:
  uint32_t layers_;
  double first_guess_;
  uint32_t current_ = 0;
  uint64_t wrapped_at_ = 0;
  double ticks_per_token_ = 0;
};

struct SlotFacts {
  uint32_t ordinal = 0;      // MoE layer ordinal of the key
  uint64_t hits = 0;         // uses since the fill (the fill's own pin counts)
  uint64_t last_access = 0;  // header clock at the last use
  uint64_t past_uses = 0;    // uses in earlier stays in the cache
  uint64_t first_seen = 0;   // header clock when the key was first filled
};

// Expected layer steps until the slot's key is used again (larger: evict
// first): the steps to its layer's next visit, plus a token for every visit
// it is expected to miss, from how often it was used while resident and how
// long ago it was last used.
//
// With `by_frequency` false only the distance decides: a cache under about
// 1.5 working sets holds little more than a token's experts, and weighing
// frequency there evicted keys the next token repeats (0.59 of Belady at one
// working set instead of 0.63, bench replay on synthetic Kimi-Linear routing).
// Callers scan every evictable slot: sampling 64 lost 0.06 of Belady at one
// working set, where the farthest layer must be found exactly.
inline double next_use_estimate(const SlotFacts& slot, const LayerCycle& cycle, uint64_t clock,
                                double ticks_per_token, bool by_frequency) {
  const uint32_t layers = cycle.layers();
  const uint32_t ahead = (slot.ordinal + layers - cycle.current()) % layers;
  const double distance = ahead == 0 ? layers : ahead;
  const double tpt = std::max(ticks_per_token, 1.0);
  const double age = double(clock - std::min(clock, slot.last_access)) / tpt;
  const double known = double(clock - std::min(clock, slot.first_seen)) / tpt + 1.0;
  const double frequency = (double(slot.hits + slot.past_uses) + 0.5) / (known + 1.0);
  // A key used at its layer's last visit comes back more often than its
  // long-run frequency (next-token repeat ~0.3-0.45 on real routing).
  const double recency = 0.45 / (1.0 + age);
  const double p = std::clamp(std::max(frequency, recency), 0.01, 1.0);
  return by_frequency ? distance / p : distance;
}

// Whether a cache of `slots` slots weighs frequency, for a working set of
// `working_set` slots (top-k × MoE layers).
inline bool weigh_frequency(uint64_t slots, uint64_t working_set) {
  return 2 * slots >= 3 * working_set;
}

}  // namespace sluice::ioworker
