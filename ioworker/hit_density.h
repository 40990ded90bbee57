// ioworker/hit_density.h: the reuse model behind the default eviction policy,
// shared by sluice-io's evictor and the replay simulator so the policy
// measured is the policy shipped. Pure arithmetic on counts: no segment, no
// lock, no I/O.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "shm/layout.h"

namespace sluice::ioworker {

// Decode visits the MoE layers in order, once per token. A key's age is the
// number of visits of its layer since its last use; its class, how often it
// has been used. From the uses observed, the model learns the chance that a
// key of class c and age a is used at its layer's next visit, and ranks a
// cached key by its hit density: the hits it is expected to bring per slot
// per layer step if kept until its next use (or given up after a few
// visits), where the first visit is `distance` layer steps away and every
// later one a whole token further. Evicting the lowest density approximates
// Belady: the layer just computed has its next use a token away, the next
// layer's keys one step away, and a key nobody reused for many tokens has
// little chance left.
class HitDensity {
 public:
  // Classes by uses per visit (shm/pins.h reuse_class) and ages in visits
  // (the last bucket holds every older age), as the segment counts them.
  static constexpr uint32_t kClasses = shm::kReuseClasses;
  static constexpr uint32_t kAges = shm::kReuseAges;
  static constexpr uint32_t kHorizon = 6;  // visits a key may be kept waiting for a use
  // What the lookahead's guess for a layer says about its next visit: it
  // names about 0.6 of the experts used (recall; 6 guesses at 0.8 precision
  // for top-8, reference-engine.md §6) and few of the others.
  static constexpr double kGuessRecall = 0.6;
  static constexpr double kGuessFalse = 0.02;
  enum class Guess { kUnknown, kNamed, kPassedOver };

  explicit HitDensity(uint32_t layers);

  // `uses` over the `known` visits of the key's layer so far.
  static uint32_t use_class(uint64_t uses, uint64_t known);
  uint32_t layers() const { return layers_; }

  // A key of class `cls` used at the `age`-th visit of its layer after its
  // previous use (age ≥ 1; older ages count into the last bucket).
  void observe(uint32_t cls, uint64_t age);
  // The counts kept elsewhere (sluice-io keeps them in the segment, since
  // clients see the hits): used[c][a] uses at age a+1, tail_visits[c] the
  // visits the uses beyond the last bucket spent there.
  using Counts = std::array<std::array<uint64_t, kAges>, kClasses>;
  void load(const Counts& used, const std::array<uint64_t, kClasses>& tail_visits);
  // The keys not used since their last use, which no reuse has counted yet:
  // without them the chance at old ages is the chance among keys that did
  // come back (a key never reused is no evidence otherwise). Cleared, then
  // one call per waiting key of class `cls` and `age` visits since its use.
  void clear_waiting();
  void add_waiting(uint32_t cls, uint64_t age);
  // Recomputes the ranking table from the counts (cheap: call once a token).
  void refresh();

  // Higher: keep. `age` visits have passed since the last use; the next
  // visit is `distance` layer steps away (1..layers). `guess`: whether the
  // lookahead has guessed that visit, and whether it named the key.
  double density(uint32_t cls, uint64_t age, uint32_t distance,
                 Guess guess = Guess::kUnknown) const;
  // Expected layer steps until the key's next use (higher: evict first), as
  // Belady ranks keys (the replay's cycle policy; it lost to density there): the `distance` steps to its layer's next visit, plus a
  // whole token for every visit the hazards expect it to miss. A guess
  // updates the first visit's chance as in density().
  double steps_to_use(uint32_t cls, uint64_t age, uint32_t distance, Guess guess = Guess::kUnknown) const;
  // The chance of a use at the next visit (for tests and reports).
  double hazard(uint32_t cls, uint64_t age) const;

 private:
  uint32_t layers_;
  Counts used_{};
  std::array<uint64_t, kClasses> tail_visits_{};
  Counts waiting_{};  // waiting keys by class and age (capped)
  std::array<uint64_t, kClasses> waiting_tail_visits_{};
  std::array<std::array<double, kAges + 1>, kClasses>
      hazard_{};  // by age of the next visit, 1..kAges
  // visits_to_use_[c][a]: expected visits, the next one included, until a
  // key of class c and age a is used (the tail bucket's hazard beyond kAges).
  std::array<std::array<double, kAges + 1>, kClasses> visits_to_use_{};
  // density_[c][a][d]: rank of a key of class c, age a, next visit d steps away.
  std::vector<double> density_;
  size_t at(uint32_t cls, uint64_t age, uint32_t distance) const;
  double best_density(uint32_t cls, uint64_t age, uint32_t distance, Guess guess) const;
};

}  // namespace sluice::ioworker
