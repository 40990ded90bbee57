// router/replay.cpp: the cache simulators. The online policies run on a slot
// array kept as sluice-io keeps its segment (a fill ticks the clock, its pin
// ticks it again); Belady needs each access's next use, computed in one
// backward pass over the flattened trace.
#include "router/replay.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <random>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "ioworker/eviction_score.h"
#include "ioworker/hit_density.h"
#include "proto/error.h"
#include "router/queue_policies.h"

namespace sluice::router {
namespace {

constexpr int kLfruSamples = 16;  // as ioworker/eviction.cpp
constexpr double kSlruProtectedShare = 0.8;
// The simulated lookahead: guesses per layer, and the share of them that
// name an expert the layer then uses (reference-engine.md §6: 6, about 0.8).
constexpr uint32_t kGuesses = 6;
constexpr double kGuessPrecision = 0.8;

uint64_t key_of(uint32_t layer, uint32_t expert) { return uint64_t{layer} << 32 | expert; }

void check_slots(const std::vector<ReplayRequest>& requests, uint32_t slots) {
  size_t widest = 0;
  for (const ReplayRequest& r : requests) widest = std::max(widest, r.experts.size());
  if (slots < widest || slots == 0) fail("replay: {} slots cannot hold a request of {} experts", slots, widest);
}

struct SimSlot {
  std::optional<uint64_t> key;
  uint32_t layer = 0;
  uint64_t hits = 0, last_access = 0;
  bool pinned = false;
  bool protected_segment = false;  // SLRU
  uint64_t past_uses = 0, first_seen = 0;
  uint64_t last_visit = 0;  // visits of its layer at its last use
};

struct History {
  uint64_t uses = 0;        // over earlier stays
  uint64_t first_seen = 0;  // clock of the first fill
  uint64_t last_visit = 0;  // visits of its layer at its last use
};

class SlotCache {
 public:
  SlotCache(uint32_t slots, uint32_t layers, uint32_t top_k, SimPolicy policy, uint64_t seed, uint32_t guess_layers)
      : slots_(slots),
        policy_(policy),
        cycle_(layers, top_k),
        rng_(seed),
        guess_rng_(~seed),
        density_(layers),
        visits_(layers, 0),
        guess_layers_(guess_layers),
        guessed_layers_(layers, 0),
        by_frequency_(ioworker::weigh_frequency(slots, uint64_t{layers} * top_k)) {
    if (policy == SimPolicy::kS3Fifo) queue_ = make_s3_fifo(slots);
    if (policy == SimPolicy::kTinyLfu) queue_ = make_tiny_lfu(slots);
  }

  PolicyResult serve(const std::vector<ReplayRequest>& requests) {
    PolicyResult result;
    for (const ReplayRequest& r : requests) {
      for (uint32_t e : r.experts) experts_seen_ = std::max(experts_seen_, e + 1);
    }
    std::vector<uint32_t> misses, pinned;
    for (size_t i = 0; i < requests.size(); ++i) {
      const ReplayRequest& r = requests[i];
      misses.clear();
      pinned.clear();
      if (r.layer >= visits_.size()) fail("replay: request of MoE layer {} in a model of {}", r.layer, visits_.size());
      if (r.layer == 0) refresh();
      ++visits_[r.layer];
      current_ = r.layer;
      guess(requests, i);
      for (uint32_t e : r.experts) {
        ++result.accesses;
        const auto it = where_.find(key_of(r.layer, e));
        if (it == where_.end()) {
          misses.push_back(e);
          continue;
        }
        ++result.hits;
        pin(it->second);
        pinned.push_back(it->second);
        if (queue_) queue_->hit(it->second);
        if (policy_ == SimPolicy::kSlru) promote(it->second);
      }
      for (uint32_t e : misses) {
        ++result.misses;
        cycle_.observe(r.layer, clock_);
        const uint32_t s = victim();
        SimSlot& slot = slots_[s];
        if (slot.key) {
          where_.erase(*slot.key);
          History& gone = history_[*slot.key];
          gone.uses += slot.hits;
          gone.last_visit = slot.last_visit;
        }
        if (slot.protected_segment) --protected_count_;
        slot = SimSlot{key_of(r.layer, e), r.layer, 0, ++clock_, false, false};
        const auto seen = history_.try_emplace(*slot.key, History{0, clock_, 0}).first;
        slot.past_uses = seen->second.uses;
        slot.last_visit = seen->second.last_visit;
        slot.first_seen = seen->second.first_seen;
        where_[*slot.key] = s;
        if (queue_) queue_->filled(s, *slot.key);
        pin(s);
        pinned.push_back(s);
      }
      for (uint32_t s : pinned) slots_[s].pinned = false;
    }
    return result;
  }

 private:
  void pin(uint32_t s) {
    SimSlot& slot = slots_[s];
    slot.pinned = true;
    // As shm/pins.cpp counts a pin: the key's age at this use.
    const uint64_t visits = visits_[slot.layer];
    if (slot.last_visit != 0 && visits > slot.last_visit) {
      density_.observe(use_class(slot), visits - slot.last_visit);
    }
    slot.last_visit = visits;
    ++slot.hits;
    slot.last_access = ++clock_;
  }

  uint32_t use_class(const SimSlot& c) const {
    return ioworker::HitDensity::use_class(c.hits + c.past_uses, visits_[c.layer]);
  }

  // The density model from the uses so far and every key still waiting.
  void refresh() {
    if (!learns()) return;
    density_.clear_waiting();
    for (const auto& [key, h] : history_) {
      if (where_.count(key) || h.last_visit == 0) continue;
      const uint32_t layer = static_cast<uint32_t>(key >> 32);
      density_.add_waiting(ioworker::HitDensity::use_class(h.uses, visits_[layer]),
                           visits_[layer] - h.last_visit);
    }
    for (const SimSlot& c : slots_) {
      if (c.key && c.last_visit != 0) {
        density_.add_waiting(use_class(c), visits_[c.layer] - c.last_visit);
      }
    }
    density_.refresh();
  }

  // What the lookahead would name for the next `guess_layers_` requests
  // while request `i` is served: kGuesses experts of each, each one it uses
  // with probability kGuessPrecision, another expert of the layer otherwise.
  // A request's guesses are drawn once, the first time they are needed.
  void guess(const std::vector<ReplayRequest>& requests, size_t i) {
    if (policy_ != SimPolicy::kLookahead && policy_ != SimPolicy::kCycle) return;
    guessed_.clear();
    std::fill(guessed_layers_.begin(), guessed_layers_.end(), 0);
    drawn_.erase(drawn_.begin(), drawn_.lower_bound(i + 1));
    for (size_t j = i + 1; j < requests.size() && j <= i + guess_layers_; ++j) {
      const ReplayRequest& next = requests[j];
      if (guessed_layers_[next.layer]) break;  // a layer's next visit only
      guessed_layers_[next.layer] = 1;
      auto [at, fresh] = drawn_.try_emplace(j);
      if (fresh) {
        std::vector<uint32_t> real = next.experts;
        std::shuffle(real.begin(), real.end(), guess_rng_);
        std::uniform_real_distribution<double> coin(0, 1);
        std::uniform_int_distribution<uint32_t> any(0, experts_seen_ > 0 ? experts_seen_ - 1 : 0);
        for (uint32_t g = 0; g < kGuesses && g < real.size(); ++g) {
          at->second.push_back(key_of(next.layer, coin(guess_rng_) < kGuessPrecision ? real[g] : any(guess_rng_)));
        }
      }
      guessed_.insert(at->second.begin(), at->second.end());
    }
  }

  void promote(uint32_t s) {
    if (slots_[s].protected_segment) return;
    slots_[s].protected_segment = true;
    ++protected_count_;
    if (protected_count_ <= kSlruProtectedShare * double(slots_.size())) return;
    std::optional<uint32_t> oldest;
    for (uint32_t i = 0; i < slots_.size(); ++i) {
      const SimSlot& c = slots_[i];
      if (c.protected_segment && !c.pinned && (!oldest || c.last_access < slots_[*oldest].last_access)) oldest = i;
    }
    if (oldest) {
      slots_[*oldest].protected_segment = false;
      --protected_count_;
    }
  }

  bool lfru_better(const SimSlot& a, const SimSlot& b) const {
    return a.hits != b.hits ? a.hits < b.hits : a.last_access < b.last_access;
  }

  uint32_t victim() {
    while (next_empty_ < slots_.size()) {
      if (!slots_[next_empty_].key) return next_empty_++;
      ++next_empty_;
    }
    std::optional<uint32_t> best;
    if (queue_) {
      best = queue_->victim([&](uint32_t s) { return slots_[s].pinned; });
      if (!best) fail("replay: every slot is pinned");
      return *best;
    }
    if (policy_ == SimPolicy::kLfru) {
      std::uniform_int_distribution<uint32_t> pick(0, static_cast<uint32_t>(slots_.size() - 1));
      for (int i = 0; i < kLfruSamples; ++i) {
        const uint32_t s = pick(rng_);
        if (!slots_[s].pinned && (!best || lfru_better(slots_[s], slots_[*best]))) best = s;
      }
      if (best) return *best;
    }
    const double tpt = cycle_.ticks_per_token();
    double best_score = 0;
    for (uint32_t s = 0; s < slots_.size(); ++s) {
      const SimSlot& c = slots_[s];
      if (c.pinned) continue;
      if (!best) {
        best = s;
        best_score = score(c, tpt);
        continue;
      }
      const SimSlot& b = slots_[*best];
      bool better = false;
      switch (policy_) {
        case SimPolicy::kDensity:
        case SimPolicy::kLookahead: {
          const double sc = score(c, tpt);
          better = sc < best_score || (sc == best_score && c.last_access < b.last_access);
          if (better) best_score = sc;
          break;
        }
        case SimPolicy::kLru:
          better = c.last_access < b.last_access;
          break;
        case SimPolicy::kLfru:
          better = lfru_better(c, b);
          break;
        case SimPolicy::kSlru:
          better = c.protected_segment != b.protected_segment ? !c.protected_segment : c.last_access < b.last_access;
          break;
        case SimPolicy::kS3Fifo:
        case SimPolicy::kTinyLfu:
          break;
        case SimPolicy::kCycle:
        case SimPolicy::kNextUse: {
          const double sc = score(c, tpt);
          better = sc > best_score || (sc == best_score && c.last_access < b.last_access);
          if (better) best_score = sc;
          break;
        }
      }
      if (better) best = s;
    }
    if (!best) fail("replay: every slot is pinned");
    return *best;
  }

  bool learns() const {
    return policy_ == SimPolicy::kDensity || policy_ == SimPolicy::kLookahead || policy_ == SimPolicy::kCycle;
  }

  double score(const SimSlot& c, double tpt) const {
    if (learns()) {
      const uint32_t layers = density_.layers();
      const uint32_t ahead = (c.layer + layers - current_) % layers;
      using Guess = ioworker::HitDensity::Guess;
      Guess guessed = Guess::kUnknown;
      if (c.layer < guessed_layers_.size() && guessed_layers_[c.layer]) {
        guessed = guessed_.count(*c.key) ? Guess::kNamed : Guess::kPassedOver;
      }
      const uint64_t age = visits_[c.layer] - c.last_visit;
      const uint32_t distance = ahead == 0 ? layers : ahead;
      if (policy_ == SimPolicy::kCycle) return density_.steps_to_use(use_class(c), age, distance, guessed);
      return density_.density(use_class(c), age, distance, guessed);
    }
    if (policy_ != SimPolicy::kNextUse) return 0;
    return ioworker::next_use_estimate({c.layer, c.hits, c.last_access, c.past_uses, c.first_seen}, cycle_, clock_, tpt,
                                       by_frequency_);
  }

  std::vector<SimSlot> slots_;
  SimPolicy policy_;
  ioworker::LayerCycle cycle_;
  std::mt19937_64 rng_;
  std::mt19937_64 guess_rng_;
  ioworker::HitDensity density_;
  std::vector<uint64_t> visits_;  // per MoE layer: requests served
  uint32_t current_ = 0;          // the layer being served
  uint32_t guess_layers_;                    // requests ahead the simulated lookahead guesses
  std::unordered_set<uint64_t> guessed_;     // keys it names for them now
  std::vector<uint8_t> guessed_layers_;      // per MoE layer: its next visit is guessed
  std::map<size_t, std::vector<uint64_t>> drawn_;  // request → its guesses, once drawn
  uint32_t experts_seen_ = 0;      // the widest expert id + 1 in the trace
  std::unordered_map<uint64_t, uint32_t> where_;
  std::unordered_map<uint64_t, History> history_;  // every key ever filled
  uint64_t clock_ = 0;
  uint32_t next_empty_ = 0;
  uint32_t protected_count_ = 0;
  bool by_frequency_;
  std::unique_ptr<QueuePolicy> queue_;  // S3-FIFO and W-TinyLFU keep their own order
};

}  // namespace

const char* policy_name(SimPolicy policy) {
  switch (policy) {
    case SimPolicy::kLru:
      return "lru";
    case SimPolicy::kLfru:
      return "lfru";
    case SimPolicy::kSlru:
      return "slru";
    case SimPolicy::kNextUse:
      return "next-use";
    case SimPolicy::kDensity:
      return "density";
    case SimPolicy::kLookahead:
      return "lookahead";
    case SimPolicy::kS3Fifo:
      return "s3-fifo";
    case SimPolicy::kTinyLfu:
      return "w-tinylfu";
    case SimPolicy::kCycle:
      return "cycle";
  }
  return "?";
}

SimPolicy parse_policy(const std::string& name, const std::string& flag) {
  for (SimPolicy p : kAllPolicies) {
    if (name == policy_name(p)) return p;
  }
  fail("{}: '{}' is not lru, lfru, slru, s3-fifo, w-tinylfu, next-use, density, lookahead or cycle", flag, name);
}

std::vector<ReplayRequest> replay_requests(const std::vector<TraceToken>& trace) {
  std::vector<ReplayRequest> requests;
  for (const TraceToken& token : trace) {
    for (size_t l = 0; l < token.layers.size(); ++l) {
      ReplayRequest& r = requests.emplace_back();
      r.layer = static_cast<uint32_t>(l);
      for (uint32_t e : token.layers[l]) {
        if (std::find(r.experts.begin(), r.experts.end(), e) == r.experts.end()) r.experts.push_back(e);
      }
    }
  }
  return requests;
}

PolicyResult simulate(const std::vector<ReplayRequest>& requests, uint32_t slots, uint32_t layers, SimPolicy policy,
                      uint64_t seed, uint32_t guess_layers) {
  check_slots(requests, slots);
  uint32_t top_k = 1;
  for (const ReplayRequest& r : requests) top_k = std::max<uint32_t>(top_k, static_cast<uint32_t>(r.experts.size()));
  SlotCache cache(slots, layers, top_k, policy, seed, guess_layers);
  return cache.serve(requests);
}

PolicyResult simulate_lru(const std::vector<ReplayRequest>& requests, uint32_t slots) {
  uint32_t layers = 1;
  for (const ReplayRequest& r : requests) layers = std::max(layers, r.layer + 1);
  return simulate(requests, slots, layers, SimPolicy::kLru);
}

PolicyResult simulate_belady(const std::vector<ReplayRequest>& requests, uint32_t slots) {
  check_slots(requests, slots);
  constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();
  // Access i's key and the index of that key's next access.
  std::vector<uint64_t> keys;
  for (const ReplayRequest& r : requests) {
    for (uint32_t e : r.experts) keys.push_back(key_of(r.layer, e));
  }
  std::vector<uint64_t> next_use(keys.size(), kNever);
  std::unordered_map<uint64_t, uint64_t> later;
  for (size_t i = keys.size(); i-- > 0;) {
    if (auto it = later.find(keys[i]); it != later.end()) next_use[i] = it->second;
    later[keys[i]] = i;
  }

  PolicyResult result;
  // Cached keys by next use: the farthest (largest) is the victim; never-used
  // keys share kNever and the set orders them by key. Pinned keys (hits of
  // the request being served, then its fills) are out of the set meanwhile.
  std::set<std::pair<uint64_t, uint64_t>> by_next;
  std::unordered_map<uint64_t, uint64_t> cached;  // key → its next use
  std::vector<size_t> misses;
  std::vector<size_t> held;
  size_t first = 0;
  for (const ReplayRequest& r : requests) {
    misses.clear();
    held.clear();
    for (size_t i = first; i < first + r.experts.size(); ++i) {
      ++result.accesses;
      if (auto it = cached.find(keys[i]); it != cached.end()) {
        ++result.hits;
        by_next.erase({it->second, keys[i]});
        it->second = next_use[i];
        held.push_back(i);
      } else {
        misses.push_back(i);
      }
    }
    for (size_t i : misses) {
      ++result.misses;
      if (cached.size() == slots) {
        const auto victim = std::prev(by_next.end());
        cached.erase(victim->second);
        by_next.erase(victim);
      }
      cached[keys[i]] = next_use[i];
      held.push_back(i);
    }
    for (size_t i : held) by_next.insert({next_use[i], keys[i]});
    first += r.experts.size();
  }
  return result;
}

}  // namespace sluice::router
