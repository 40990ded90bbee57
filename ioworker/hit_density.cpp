// ioworker/hit_density.cpp: hazard estimates from the observed reuse ages,
// and the density table the evictor looks keys up in.
#include "ioworker/hit_density.h"

#include <algorithm>

#include "shm/pins.h"

namespace sluice::ioworker {
namespace {

// Before any use is seen: a prior that falls with age, worth a few uses, so
// the first token is ranked by distance and recency rather than by noise.
constexpr double kPriorWeight = 4.0;
constexpr double kMinHazard = 1e-3;  // a key never seen back still might be
double prior_hazard(uint64_t age) {
  return 0.4 / double(std::max<uint64_t>(age, 1));
}

}  // namespace

HitDensity::HitDensity(uint32_t layers) : layers_(std::max<uint32_t>(layers, 1)) {
  density_.assign(size_t{kClasses} * (kAges + 1) * layers_, 0.0);
  refresh();
}

uint32_t HitDensity::use_class(uint64_t uses, uint64_t known) {
  return shm::reuse_class(uses, known);
}

void HitDensity::observe(uint32_t cls, uint64_t age) {
  if (age == 0) return;
  cls = std::min(cls, kClasses - 1);
  if (age >= kAges) {
    ++used_[cls][kAges - 1];
    tail_visits_[cls] += age - kAges + 1;
  } else {
    ++used_[cls][age - 1];
  }
}

void HitDensity::load(const Counts& used, const std::array<uint64_t, kClasses>& tail_visits) {
  used_ = used;
  tail_visits_ = tail_visits;
}

void HitDensity::clear_waiting() {
  waiting_ = {};
  waiting_tail_visits_ = {};
}

void HitDensity::add_waiting(uint32_t cls, uint64_t age) {
  if (age == 0) return;
  cls = std::min(cls, kClasses - 1);
  if (age >= kAges) {
    ++waiting_[cls][kAges - 1];
    waiting_tail_visits_[cls] += age - kAges + 1;
  } else {
    ++waiting_[cls][age - 1];
  }
}

double HitDensity::hazard(uint32_t cls, uint64_t age) const {
  return hazard_[std::min(cls, kClasses - 1)][std::clamp<uint64_t>(age, 1, kAges)];
}

void HitDensity::refresh() {
  for (uint32_t c = 0; c < kClasses; ++c) {
    // Keys that reached the visit at age a: those used at age a or later,
    // and those waiting that long already.
    uint64_t reached = 0;
    for (uint32_t a = kAges; a >= 1; --a) {
      const uint64_t uses = used_[c][a - 1];
      if (a < kAges) reached += waiting_[c][a - 1];
      if (a == kAges) {
        const double visits = double(std::max(tail_visits_[c], uses) + waiting_tail_visits_[c]);
        hazard_[c][a] = (double(uses) + kPriorWeight * prior_hazard(a)) / (visits + kPriorWeight);
      } else {
        hazard_[c][a] = (double(uses) + kPriorWeight * prior_hazard(a)) /
                        (double(reached + uses) + kPriorWeight);
      }
      reached += a == kAges ? uses + waiting_[c][a - 1] : uses;
    }
    hazard_[c][0] = hazard_[c][1];
    // Past the last bucket the hazard stays put: a geometric wait. Younger
    // ages try the next visit, and on a miss wait as a key one visit older.
    visits_to_use_[c][kAges] = 1.0 / std::max(hazard_[c][kAges], kMinHazard);
    for (uint32_t a = kAges; a-- > 0;) {
      visits_to_use_[c][a] = 1.0 + (1.0 - hazard_[c][a + 1]) * visits_to_use_[c][a + 1];
    }
  }
  for (uint32_t c = 0; c < kClasses; ++c) {
    for (uint32_t a = 0; a <= kAges; ++a) {
      for (uint32_t d = 1; d <= layers_; ++d)
        density_[at(c, a, d)] = best_density(c, a, d, Guess::kUnknown);
    }
  }
}

// Over horizons of 1..kHorizon visits, the best ratio of expected hits to
// expected slot time: the first visit is `distance` steps away, each later
// one a token further, and the key is kept only while unused. A guess of the
// first visit updates its chance by Bayes' rule.
double HitDensity::best_density(uint32_t cls, uint64_t age, uint32_t distance, Guess guess) const {
  double best = 0, hits = 0, time = 0, alive = 1;
  for (uint32_t j = 1; j <= kHorizon; ++j) {
    double h = hazard(cls, age + j);
    if (j == 1 && guess == Guess::kNamed) {
      h = h * kGuessRecall / (h * kGuessRecall + (1 - h) * kGuessFalse);
    } else if (j == 1 && guess == Guess::kPassedOver) {
      h = h * (1 - kGuessRecall) / (h * (1 - kGuessRecall) + (1 - h) * (1 - kGuessFalse));
    }
    time += alive * (j == 1 ? distance : layers_);
    hits += alive * h;
    alive *= 1 - h;
    best = std::max(best, hits / time);
  }
  return best;
}

size_t HitDensity::at(uint32_t cls, uint64_t age, uint32_t distance) const {
  const uint32_t c = std::min(cls, kClasses - 1);
  const uint64_t a = std::min<uint64_t>(age, kAges);
  const uint32_t d = std::clamp<uint32_t>(distance, 1, layers_);
  return (size_t{c} * (kAges + 1) + a) * layers_ + (d - 1);
}

double HitDensity::density(uint32_t cls, uint64_t age, uint32_t distance, Guess guess) const {
  if (guess == Guess::kUnknown) return density_[at(cls, age, distance)];
  return best_density(cls, age, std::clamp<uint32_t>(distance, 1, layers_), guess);
}

double HitDensity::steps_to_use(uint32_t cls, uint64_t age, uint32_t distance, Guess guess) const {
  const uint32_t c = std::min(cls, kClasses - 1);
  const uint64_t a = std::min<uint64_t>(age, kAges);
  const double d = std::clamp<uint32_t>(distance, 1, layers_);
  if (guess == Guess::kUnknown) return d + layers_ * (visits_to_use_[c][a] - 1.0);
  double h = hazard(c, a + 1);
  h = guess == Guess::kNamed ? h * kGuessRecall / (h * kGuessRecall + (1 - h) * kGuessFalse)
                             : h * (1 - kGuessRecall) / (h * (1 - kGuessRecall) + (1 - h) * (1 - kGuessFalse));
  return d + layers_ * (1.0 - h) * visits_to_use_[c][std::min<uint64_t>(a + 1, kAges)];
}

}  // namespace sluice::ioworker
