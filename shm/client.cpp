// shm/client.cpp: lookups, pins and waits of one compute client. The only
// system calls are on the miss path (waking the worker, sleeping on the
// client's futex word) and on slow paths (owner liveness, registration).
#include "shm/client.h"

#include <algorithm>
#include <cstring>
#include <unistd.h>

#include "proto/error.h"
#include "shm/futex.h"
#include "shm/index.h"
#include "shm/pins.h"
#include "shm/process.h"
#include "shm/ring.h"
#include "shm/segment_lock.h"

namespace sluice::shm {
namespace {

constexpr auto kReady = static_cast<uint32_t>(SlotState::kReady);
constexpr auto kLoading = static_cast<uint32_t>(SlotState::kLoading);
constexpr auto kFailed = static_cast<uint32_t>(SlotState::kFailed);

std::string segment_label(const Segment& segment) {
  return segment.name().empty() ? std::string("the embedded cache") : "cache segment /dev/shm/" + segment.name();
}

}  // namespace

Client::Client(Segment& segment, std::chrono::milliseconds read_timeout)
    : segment_(segment), read_timeout_(read_timeout) {
  check_owner();
  const pid_t pid = ::getpid();
  const uint64_t start_time = process_start_time(pid);
  const SegmentLock lock = lock_segment();
  for (uint32_t i = 0; i < segment_.geometry().max_clients; ++i) {
    ClientEntry& entry = segment_.client(i);
    if (entry.state.load(std::memory_order_relaxed) != static_cast<uint32_t>(ClientState::kFree)) continue;
    for (uint32_t& pin : segment_.client_pins(i)) pin = kNoSlot;
    ++entry.epoch;
    entry.pid = pid;
    entry.start_time = start_time;
    entry.batch = 0;
    entry.heartbeat_ns.store(monotonic_ns(), std::memory_order_relaxed);
    entry.requests.store(0, std::memory_order_relaxed);
    entry.hits.store(0, std::memory_order_relaxed);
    entry.misses.store(0, std::memory_order_relaxed);
    entry.wait_ns.store(0, std::memory_order_relaxed);
    entry.lookahead_messages.store(0, std::memory_order_relaxed);
    entry.lookahead_guesses.store(0, std::memory_order_relaxed);
    entry.state.store(static_cast<uint32_t>(ClientState::kActive), std::memory_order_release);
    id_ = i;
    epoch_ = entry.epoch;
    return;
  }
  fail("{}: all {} client entries are taken", segment_label(segment_), segment_.geometry().max_clients);
}

Client::~Client() {
  try {
    bool wake = false;
    {
      const SegmentLock lock = lock_segment();
      if (registered()) {
        release_client(segment_, id_);
        wake = segment_.header().demand_starved.load(std::memory_order_relaxed) != 0;
      }
    }
    if (wake) futex_bump(segment_.header().work);
  } catch (...) {
    // A destructor cannot report; the worker reaps the entry when it sees the pid gone.
  }
}

bool Client::registered() const {
  const ClientEntry& entry = segment_.client(id_);
  return entry.state.load(std::memory_order_acquire) == static_cast<uint32_t>(ClientState::kActive) &&
         entry.epoch == epoch_;
}

void Client::check_owner() const {
  if (segment_.owner_alive()) return;
  throw OwnerGone(fmt::format(
      "{}: its sluice-io (pid {}) is gone{}", segment_label(segment_), segment_.header().owner_pid,
      outstanding_ > 0
          ? fmt::format(" while layer {} had {} experts outstanding", layer_, outstanding_)
          : ""));
}

std::string Client::owner_condition() const {
  const uint64_t beat = segment_.header().owner_heartbeat_ns.load(std::memory_order_relaxed);
  const uint64_t now = monotonic_ns();
  const double silent = now > beat ? static_cast<double>(now - beat) * 1e-9 : 0.0;
  return fmt::format(
      "sluice-io (pid {}) is alive, {}", segment_.header().owner_pid,
      silent > 1.0 ? fmt::format("its scheduler last ran {:.1f} s ago: stopped or stuck, and nobody replaced it", silent)
                   : std::string("its scheduler runs but the reads did not complete (a stalled disk?)"));
}

void Client::fail_read_timeout(uint64_t waited_ns) const {
  fail("{}: layer {}: {} of {} experts did not land within {:.1f} s (--read-timeout); {}", segment_label(segment_),
       layer_, outstanding_, experts_.size(), static_cast<double>(waited_ns) * 1e-9, owner_condition());
}

SegmentLock Client::lock_segment() const {
  return SegmentLock(segment_, [this](std::chrono::nanoseconds waited) {
    check_owner();
    if (waited < read_timeout_) return;
    fail("{}: layer {}: experts did not land within {:.1f} s (--read-timeout): the segment's lock stayed taken; {}",
         segment_label(segment_), layer_, std::chrono::duration<double>(waited).count(), owner_condition());
  });
}

void Client::request(uint32_t layer, std::span<const uint32_t> experts) {
  const Geometry& g = segment_.geometry();
  if (experts.size() > g.pins_per_client) {
    fail("{}: a batch of {} experts exceeds the {} a client may pin", segment_label(segment_), experts.size(),
         g.pins_per_client);
  }
  ClientEntry& entry = segment_.client(id_);
  entry.heartbeat_ns.store(monotonic_ns(), std::memory_order_relaxed);
  ++batch_;
  layer_ = layer;
  experts_.assign(experts.begin(), experts.end());
  positions_.assign(experts.size(), Position::kPosted);
  slots_.assign(experts.size(), 0);
  unposted_.clear();
  outstanding_ = experts.size();
  uint64_t hits = 0, inflight_hits = 0, misses = 0;
  bool freed = false;  // a slot a starved worker may take
  {
    const SegmentLock lock = lock_segment();
    // Pins left by an abandoned batch go first; the worker ignores requests
    // of any batch but the current one, and of no hold from now on.
    for (uint32_t p = 0; p < g.pins_per_client; ++p) unpin_position(segment_, id_, p);
    entry.batch = batch_;
    entry.hold = 0;
    // The layer's clock moves before any pin of this batch, hits and misses alike.
    if (layer < kStatLayers) segment_.stats().layers[layer].visits.fetch_add(1, std::memory_order_relaxed);
    IndexView index(segment_.index_table(), g.index_capacity, g.slot_count);
    RingView ring(segment_.demand_ring(), g.demand_ring_capacity);
    for (uint32_t p = 0; p < experts.size(); ++p) {
      bool loading = false;
      if (adopt_held(layer, experts[p], p, loading)) {
        ++hits;
        inflight_hits += loading ? 1 : 0;
        continue;
      }
      const uint64_t key = make_key(layer, experts[p]);
      if (const auto slot = index.find(key)) {
        SlotEntry& s = segment_.slot(*slot);
        const uint32_t state = s.state.load(std::memory_order_acquire);
        if (s.key == key && (state == kReady || state == kLoading)) {
          pin_slot(segment_, id_, p, *slot);
          if (state == kLoading) {
            s.waiters |= uint64_t{1} << id_;
            ++inflight_hits;
          }
          positions_[p] = Position::kPinned;
          slots_[p] = *slot;
          ++hits;
          continue;
        }
      }
      ++misses;
      if (!ring.push(RingEntry{id_, entry.epoch, batch_, p, layer, experts[p], 0, 0})) unposted_.push_back(p);
    }
    // Held records this batch did not ask for are guesses that missed.
    for (uint32_t i = 0; i < held_.size(); ++i)
      freed = unpin_position(segment_, id_, hold_position(g, i)) || freed;
    held_.clear();
    freed = freed && segment_.header().demand_starved.load(std::memory_order_relaxed) != 0;
  }
  StatsBlock& stats = segment_.stats();
  stats.hits.fetch_add(hits, std::memory_order_relaxed);
  stats.inflight_hits.fetch_add(inflight_hits, std::memory_order_relaxed);
  stats.misses.fetch_add(misses, std::memory_order_relaxed);
  if (layer < kStatLayers) {
    stats.layers[layer].hits.fetch_add(hits, std::memory_order_relaxed);
    stats.layers[layer].misses.fetch_add(misses, std::memory_order_relaxed);
  }
  entry.requests.fetch_add(experts.size(), std::memory_order_relaxed);
  entry.hits.fetch_add(hits, std::memory_order_relaxed);
  entry.misses.fetch_add(misses, std::memory_order_relaxed);
  counters_.requests += experts.size();
  counters_.hits += hits;
  counters_.misses += misses;
  if (misses > 0 || freed) futex_bump(segment_.header().work);
}

bool Client::adopt_held(uint32_t layer, uint32_t expert, uint32_t position, bool& loading) {
  if (layer != hold_layer_) return false;
  const auto it = std::find(held_.begin(), held_.end(), expert);
  if (it == held_.end()) return false;
  const Geometry& g = segment_.geometry();
  const std::span<uint32_t> pins = segment_.client_pins(id_);
  const uint32_t from = hold_position(g, static_cast<uint32_t>(it - held_.begin()));
  if (pins[from] == kNoSlot || pins[from] - 1 >= g.slot_count) return false;
  const uint32_t slot = pins[from] - 1;
  SlotEntry& s = segment_.slot(slot);
  const uint32_t state = s.state.load(std::memory_order_acquire);
  // A held read that failed is asked for again as a miss (the unpin at the end of request() lets
  // the worker retry).
  if (s.key != make_key(layer, expert) || (state != kReady && state != kLoading)) return false;
  pins[position] = pins[from];  // the slot's pin count moves with it
  pins[from] = kNoSlot;
  count_access(segment_, slot);
  loading = state == kLoading;
  if (loading) s.waiters |= uint64_t{1} << id_;
  positions_[position] = Position::kPinned;
  slots_[position] = slot;
  segment_.stats().held_used.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void Client::hold(uint32_t layer, std::span<const uint32_t> experts) {
  const Geometry& g = segment_.geometry();
  if (experts.size() > g.pins_per_client) {
    fail("{}: a hold of {} experts exceeds the {} a client may pin", segment_label(segment_),
         experts.size(), g.pins_per_client);
  }
  ClientEntry& entry = segment_.client(id_);
  bool posted = false, freed = false;
  uint64_t pinned = 0;
  {
    const SegmentLock lock = lock_segment();
    for (uint32_t i = 0; i < held_.size(); ++i)
      freed = unpin_position(segment_, id_, hold_position(g, i)) || freed;
    hold_id_ = hold_id_ == UINT32_MAX ? 1 : hold_id_ + 1;
    entry.hold = hold_id_;
    hold_layer_ = layer;
    held_.assign(experts.begin(), experts.end());
    IndexView index(segment_.index_table(), g.index_capacity, g.slot_count);
    RingView ring(segment_.demand_ring(), g.demand_ring_capacity);
    for (uint32_t i = 0; i < experts.size(); ++i) {
      const uint64_t key = make_key(layer, experts[i]);
      if (const auto slot = index.find(key)) {
        const uint32_t state = segment_.slot(*slot).state.load(std::memory_order_acquire);
        if (segment_.slot(*slot).key == key && (state == kReady || state == kLoading)) {
          hold_slot(segment_, id_, hold_position(g, i), *slot);
          ++pinned;
          continue;
        }
      }
      // A full ring drops the rest: a hold is only ever a head start.
      if (!ring.push(
              RingEntry{id_, entry.epoch, hold_id_, hold_position(g, i), layer, experts[i], 0, 0}))
        break;
      posted = true;
    }
  }
  segment_.stats().held.fetch_add(pinned, std::memory_order_relaxed);
  if (posted || freed) futex_bump(segment_.header().work);
}

// Under the lock: takes the slots the worker pinned for posted positions and
// posts what a full ring refused earlier. True when anything changed.
bool Client::collect_assigned() {
  const Geometry& g = segment_.geometry();
  bool changed = false, posted = false;
  {
    const SegmentLock lock = lock_segment();
    const std::span<uint32_t> pins = segment_.client_pins(id_);
    for (uint32_t p = 0; p < positions_.size(); ++p) {
      if (positions_[p] != Position::kPosted || pins[p] == kNoSlot) continue;
      if (pins[p] - 1 >= g.slot_count) fail("{}: client {} pin list names slot {} of {}", segment_label(segment_), id_, pins[p] - 1, g.slot_count);
      slots_[p] = pins[p] - 1;
      positions_[p] = Position::kPinned;
      changed = true;
    }
    if (!unposted_.empty()) {
      RingView ring(segment_.demand_ring(), g.demand_ring_capacity);
      const uint32_t epoch = segment_.client(id_).epoch;
      size_t taken = 0;
      while (taken < unposted_.size()) {
        const uint32_t p = unposted_[taken];
        if (!ring.push(RingEntry{id_, epoch, batch_, p, layer_, experts_[p], 0, 0})) break;
        ++taken;
      }
      unposted_.erase(unposted_.begin(), unposted_.begin() + static_cast<std::ptrdiff_t>(taken));
      posted = taken > 0;
    }
  }
  if (posted) futex_bump(segment_.header().work);
  return changed;
}

LandedSlot Client::next() {
  const auto waiting = [](Position p) { return p == Position::kPinned || p == Position::kPosted; };
  if (std::none_of(positions_.begin(), positions_.end(), waiting)) {
    fail("{}: next() with nothing left to hand out in layer {}", segment_label(segment_), layer_);
  }
  ClientEntry& entry = segment_.client(id_);
  uint64_t wait_start = 0;
  for (;;) {
    const uint32_t seen = entry.notify.load(std::memory_order_acquire);
    bool any_posted = false;
    for (uint32_t p = 0; p < positions_.size(); ++p) {
      if (positions_[p] == Position::kPosted) any_posted = true;
      if (positions_[p] != Position::kPinned) continue;
      SlotEntry& s = segment_.slot(slots_[p]);
      const uint32_t state = s.state.load(std::memory_order_acquire);
      if (state == kLoading) continue;
      const uint64_t key = make_key(layer_, experts_[p]);
      if (s.key != key) {
        // Lesson 19 of the reference: never compute on a slot that holds
        // something else; fail loudly instead.
        fail("{}: pinned slot {} holds layer {} expert {}, not layer {} expert {}", segment_label(segment_),
             slots_[p], key_layer(s.key), key_expert(s.key), layer_, experts_[p]);
      }
      if (state == kFailed) {
        fail("layer {} expert {}: {}", layer_, experts_[p], std::string(s.error, strnlen(s.error, sizeof(s.error))));
      }
      if (state != kReady) fail("{}: pinned slot {} is empty", segment_label(segment_), slots_[p]);
      positions_[p] = Position::kHandedOut;
      if (wait_start != 0) {
        const uint64_t waited = monotonic_ns() - wait_start;
        counters_.wait_seconds += static_cast<double>(waited) * 1e-9;
        entry.wait_ns.fetch_add(waited, std::memory_order_relaxed);
      }
      return LandedSlot{p, slots_[p], segment_.slot_data(slots_[p])};
    }
    if (any_posted && collect_assigned()) continue;
    if (wait_start == 0) wait_start = monotonic_ns();
    futex_wait(entry.notify, seen, kWaitSlice);
    if (entry.notify.load(std::memory_order_acquire) == seen) {
      check_owner();
      const uint64_t waited = monotonic_ns() - wait_start;
      if (waited > static_cast<uint64_t>(std::chrono::nanoseconds(read_timeout_).count()))
        fail_read_timeout(waited);
    }
    if (!registered()) {
      fail("{}: client {} was dropped by sluice-io (reaped as dead)", segment_label(segment_), id_);
    }
  }
}

void Client::release(const LandedSlot& landed) {
  if (landed.index >= positions_.size() || positions_[landed.index] != Position::kHandedOut) {
    fail("{}: release of position {} that was not handed out", segment_label(segment_), landed.index);
  }
  positions_[landed.index] = Position::kReleased;
  --outstanding_;
  bool wake = false;
  {
    const SegmentLock lock = lock_segment();
    unpin_position(segment_, id_, landed.index);
    // Even a slot still pinned may now be pinned only by holds, which a
    // starved worker takes back (worker.cpp take_back_held).
    wake = segment_.header().demand_starved.load(std::memory_order_relaxed) != 0;
  }
  if (wake) futex_bump(segment_.header().work);
}

}  // namespace sluice::shm
