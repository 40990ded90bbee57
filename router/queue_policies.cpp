// router/queue_policies.cpp: S3-FIFO's three FIFOs and W-TinyLFU's window,
// segmented LRU and frequency duel. LRU order is a queue of (slot, stamp)
// entries, stale once the slot is touched again or moves, skipped lazily.
#include "router/queue_policies.h"

#include <algorithm>
#include <array>

namespace sluice::router {
namespace {

constexpr double kSmallShare = 0.1;      // S3-FIFO's small queue
constexpr uint8_t kMaxFreq = 3;          // S3-FIFO's uses a key may bank
constexpr uint8_t kPromoteAfter = 1;     // reuses in the small queue that earn main
constexpr double kWindowShare = 0.01;    // W-TinyLFU's window
constexpr double kProtectedShare = 0.8;  // of its main segmented LRU
constexpr uint32_t kAgingPeriod = 10;    // accesses per slot between halvings

class S3Fifo final : public QueuePolicy {
 public:
  explicit S3Fifo(uint32_t slots)
      : slots_(slots),
        small_target_(std::max<size_t>(1, static_cast<size_t>(kSmallShare * slots))),
        ghost_capacity_(slots - std::min<size_t>(slots, small_target_)) {}

  void filled(uint32_t slot, uint64_t key) override {
    Entry& e = slots_.at(slot);
    e = Entry{key, 0};
    if (auto it = ghost_.find(key); it != ghost_.end()) {
      ghost_.erase(it);
      main_.push_back(slot);
    } else {
      small_.push_back(slot);
    }
  }

  void hit(uint32_t slot) override {
    Entry& e = slots_.at(slot);
    e.freq = std::min<uint8_t>(e.freq + 1, kMaxFreq);
  }

  std::optional<uint32_t> victim(const IsPinned& pinned) override {
    // Every pass either evicts, moves a key on, or spends one of its banked
    // uses, so the bound is only reached when the unpinned keys run out.
    for (size_t pass = 0; pass < (kMaxFreq + 2) * slots_.size() + 2; ++pass) {
      const bool from_small = !small_.empty() && (small_.size() >= small_target_ || main_.empty());
      std::deque<uint32_t>& queue = from_small ? small_ : main_;
      if (queue.empty()) return std::nullopt;
      const uint32_t s = queue.front();
      queue.pop_front();
      Entry& e = slots_[s];
      if (pinned(s)) {
        queue.push_back(s);
        continue;
      }
      if (from_small && e.freq >= kPromoteAfter) {
        e.freq = 0;
        main_.push_back(s);
        continue;
      }
      if (!from_small && e.freq > 0) {
        --e.freq;
        main_.push_back(s);
        continue;
      }
      if (from_small) remember(e.key);
      return s;
    }
    return std::nullopt;
  }

 private:
  struct Entry {
    uint64_t key = 0;
    uint8_t freq = 0;
  };

  void remember(uint64_t key) {
    ghost_[key] = ++ghost_stamp_;
    ghost_order_.emplace_back(key, ghost_stamp_);
    while (ghost_.size() > ghost_capacity_ && !ghost_order_.empty()) {
      const auto [old, stamp] = ghost_order_.front();
      ghost_order_.pop_front();
      if (auto it = ghost_.find(old); it != ghost_.end() && it->second == stamp) ghost_.erase(it);
    }
  }

  std::vector<Entry> slots_;
  std::deque<uint32_t> small_, main_;  // oldest first; each cached slot in exactly one
  size_t small_target_;
  size_t ghost_capacity_;
  std::unordered_map<uint64_t, uint64_t> ghost_;  // key → stamp of its latest remembering
  std::deque<std::pair<uint64_t, uint64_t>> ghost_order_;
  uint64_t ghost_stamp_ = 0;
};

class TinyLfu final : public QueuePolicy {
 public:
  explicit TinyLfu(uint32_t slots)
      : slots_(slots),
        window_capacity_(std::max<size_t>(1, static_cast<size_t>(kWindowShare * slots))),
        main_capacity_(slots - std::min<size_t>(slots, window_capacity_)),
        protected_capacity_(static_cast<size_t>(kProtectedShare * double(main_capacity_))) {
    size(Segment::kNone) = slots;
  }

  void filled(uint32_t slot, uint64_t key) override {
    slots_.at(slot).key = key;
    count(key);
    move(slot, Segment::kWindow);
  }

  void hit(uint32_t slot) override {
    Entry& e = slots_.at(slot);
    count(e.key);
    if (e.segment != Segment::kProbation) {
      move(slot, e.segment);  // refreshes its place in the LRU order
      return;
    }
    move(slot, Segment::kProtected);
    if (size(Segment::kProtected) > protected_capacity_) {
      if (auto oldest = least_recent(Segment::kProtected, [&](uint32_t s) { return s == slot; })) {
        move(*oldest, Segment::kProbation);
      }
    }
  }

  std::optional<uint32_t> victim(const IsPinned& pinned) override {
    // Once the cache first fills, the window's oldest move on until main is full.
    while (size(Segment::kWindow) > window_capacity_ &&
           size(Segment::kProbation) + size(Segment::kProtected) < main_capacity_) {
      const std::optional<uint32_t> oldest = least_recent(Segment::kWindow, pinned);
      if (!oldest) break;
      move(*oldest, Segment::kProbation);
    }
    // The window gives up its oldest to make room; it displaces main's
    // oldest only if it was used more often.
    const std::optional<uint32_t> candidate = least_recent(Segment::kWindow, pinned);
    std::optional<uint32_t> rival = least_recent(Segment::kProbation, pinned);
    if (!rival) rival = least_recent(Segment::kProtected, pinned);
    if (candidate && rival && frequency(slots_[*candidate].key) > frequency(slots_[*rival].key)) {
      move(*candidate, Segment::kProbation);
      return take(*rival);
    }
    if (candidate) return take(*candidate);
    if (rival) return take(*rival);
    return std::nullopt;
  }

 private:
  enum class Segment : uint8_t { kNone, kWindow, kProbation, kProtected };
  struct Entry {
    uint64_t key = 0;
    Segment segment = Segment::kNone;
    uint64_t stamp = 0;
  };
  using Order = std::deque<std::pair<uint32_t, uint64_t>>;  // (slot, stamp), least recent first

  size_t& size(Segment segment) { return sizes_[static_cast<size_t>(segment)]; }
  Order& order(Segment segment) { return orders_[static_cast<size_t>(segment)]; }

  void move(uint32_t slot, Segment to) {
    Entry& e = slots_[slot];
    --size(e.segment);
    ++size(to);
    e.segment = to;
    e.stamp = ++stamp_;
    order(to).emplace_back(slot, e.stamp);
  }

  uint32_t take(uint32_t slot) {
    Entry& e = slots_[slot];
    --size(e.segment);
    ++size(Segment::kNone);
    e.segment = Segment::kNone;
    return slot;
  }

  template <typename Skip>
  std::optional<uint32_t> least_recent(Segment segment, const Skip& skip) {
    Order& queue = order(segment);
    const auto live = [&](const std::pair<uint32_t, uint64_t>& entry) {
      const Entry& e = slots_[entry.first];
      return e.segment == segment && e.stamp == entry.second;
    };
    while (!queue.empty() && !live(queue.front())) queue.pop_front();
    for (const auto& entry : queue) {
      if (live(entry) && !skip(entry.first)) return entry.first;
    }
    return std::nullopt;
  }

  void count(uint64_t key) {
    ++counts_[key];
    if (++accesses_ < kAgingPeriod * slots_.size()) return;
    accesses_ = 0;
    for (auto it = counts_.begin(); it != counts_.end();) {
      it->second /= 2;
      it = it->second == 0 ? counts_.erase(it) : std::next(it);
    }
  }

  uint32_t frequency(uint64_t key) const {
    const auto it = counts_.find(key);
    return it == counts_.end() ? 0 : it->second;
  }

  std::vector<Entry> slots_;
  size_t window_capacity_, main_capacity_, protected_capacity_;
  std::array<size_t, 4> sizes_{};  // by Segment; kNone counts slots not yet filled
  std::array<Order, 4> orders_;
  uint64_t stamp_ = 0;
  std::unordered_map<uint64_t, uint32_t> counts_;
  uint64_t accesses_ = 0;
};

}  // namespace

std::unique_ptr<QueuePolicy> make_s3_fifo(uint32_t slots) {
  return std::make_unique<S3Fifo>(slots);
}
std::unique_ptr<QueuePolicy> make_tiny_lfu(uint32_t slots) {
  return std::make_unique<TinyLfu>(slots);
}

}  // namespace sluice::router
