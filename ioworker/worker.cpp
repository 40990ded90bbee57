// ioworker/worker.cpp: the scheduler (requests → slots → reads), completions
// (slot READY or FAILED, waiters woken) and the reaper of dead clients. The
// segment lock is held only to move bookkeeping, never across a read.
#include "ioworker/worker.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <unistd.h>

#include "ioworker/depth_tuner.h"
#include "ioworker/eviction.h"
#include "ioworker/read_backend.h"
#include "proto/container.h"
#include "proto/error.h"
#include "shm/futex.h"
#include "shm/index.h"
#include "shm/pins.h"
#include "shm/process.h"
#include "shm/ring.h"
#include "shm/segment_lock.h"

namespace sluice::ioworker {
namespace {

using shm::SlotState;
constexpr auto kTick = std::chrono::milliseconds(100);  // reaping and heartbeat period
constexpr uint64_t kReapIntervalNs = 100'000'000;
// io_uring's reads in flight grow from --readers up to this while the disk
// rewards them (depth_tuner.h); reader threads stay at --readers.
constexpr uint32_t kMaxUringDepth = 32;
constexpr uint32_t kResidentThreads = 2;

void check_container(const Container& container) {
  if (container.moe_layers().empty()) fail("{}: the container has no expert layers, nothing to cache", container.dir());
}

shm::MailboxShape mailbox_of(const CacheShape& shape, uint32_t rows) {
  return shm::MailboxShape{shape.hidden, std::max<uint32_t>(rows, 1), shape.top_k};
}

}  // namespace

CacheShape cache_shape(const Container& container) {
  check_container(container);
  return {container.largest_record_stride(), container.widest_moe_layer(), container.hidden_size(), container.top_k()};
}

uint64_t cache_bytes_for_slots(const CacheShape& shape, uint32_t slots, uint32_t max_clients, uint32_t mailbox_rows) {
  const shm::Geometry g =
      shm::geometry_for_slots(slots, shape.record_stride, max_clients, shape.experts, mailbox_of(shape, mailbox_rows));
  return shm::compute_layout(g).total;
}

uint64_t cache_bytes_for_slots(const Container& container, uint32_t slots, uint32_t max_clients,
                               uint32_t mailbox_rows) {
  return cache_bytes_for_slots(cache_shape(container), slots, max_clients, mailbox_rows);
}

uint64_t min_cache_bytes(const Container& container, uint32_t max_clients, uint32_t mailbox_rows) {
  return cache_bytes_for_slots(container, 2 * container.top_k(), max_clients, mailbox_rows);
}

shm::Geometry plan_cache_geometry(const CacheShape& shape, uint64_t cache_bytes,
                                  uint32_t max_clients, uint32_t mailbox_rows) {
  return shm::plan_geometry(cache_bytes, shape.record_stride, 2 * shape.top_k, max_clients,
                            shape.experts, mailbox_of(shape, mailbox_rows));
}

shm::Geometry plan_cache_geometry(const Container& container, uint64_t cache_bytes, uint32_t max_clients,
                                  uint32_t mailbox_rows) {
  return plan_cache_geometry(cache_shape(container), cache_bytes, max_clients, mailbox_rows);
}

class Worker::Impl {
 public:
  Impl(const Container& container, const WorkerOptions& options);
  ~Impl();

  void prefetch(uint32_t layer, std::span<const uint32_t> experts, PrefetchOrigin origin);

  const Container& container_;
  WorkerOptions options_;
  std::unique_ptr<shm::Segment> segment_;
  std::unique_ptr<BankFiles> banks_;
  std::unique_ptr<ReadBackend> backend_;
  bool direct_io_ = false;
  Startup startup_;

 private:
  enum class Outcome { kDone, kDropped, kStarved };
  struct Pass {
    std::vector<ReadJob> jobs;
    uint64_t notify = 0;  // clients to wake
  };

  // Every slot's pages allocated (and huge where shmem allows) before any
  // read, so neither io_uring's registration nor a read nor a client faults.
  void make_slots_resident(bool show);
  void run();
  void schedule();
  void drain_rings();
  Outcome assign_demand(const shm::RingEntry& entry, Pass& pass);
  Outcome assign_hold(const shm::RingEntry& entry, uint32_t& unpinned, Pass& pass);
  void assign_prefetch(const shm::RingEntry& entry, Pass& pass);
  uint32_t unpinned_slots() const;
  std::optional<uint32_t> take_back_held(uint32_t demanding_client);
  // Unpins every hold of `slot` when only holds pin it; true when it did.
  bool release_holds_of(uint32_t slot);
  void fill(uint32_t slot, uint64_t key, shm::ReadOrigin origin, Pass& pass);
  void evict(uint32_t slot);
  // `reads` more (or fewer) in flight from `at_ns`.
  void count_busy(int32_t reads, uint64_t at_ns);
  void complete(const ReadJob& job, std::optional<std::string> problem);
  void reap();
  bool valid_key(uint32_t layer, uint32_t expert) const;
  shm::IndexView index() const;

  std::unique_ptr<Evictor> evictor_;  // made once the segment's slot count is known
  // A prefetch never evicts a slot accessed within this many clock ticks.
  // A cache of at least one token's working set keeps what the next token
  // reuses: protect about one token (a pin per routed expert plus its demand
  // fills; prefetch fills do not tick). A smaller cache keeps nothing for a
  // token, so only the layer in flight is protected. bench decode measured
  // both sides of that line (FORMAT.md has no say: this is policy).
  uint64_t cold_window_ = 0;
  uint32_t readers_;
  std::unique_ptr<DepthTuner> depth_;  // made with the backend: its ceiling depends on it
  std::deque<shm::RingEntry> demand_;    // scheduler thread only
  std::deque<shm::RingEntry> holds_;     // scheduler thread only: clients' next batches
  // A hold never leaves fewer unpinned slots than one decode batch (top-k),
  // so a batch seldom has to take held slots back (take_back_held, which is
  // what guarantees it never waits on a hold), and at the floor (2 × top-k
  // slots) holds start as the current batch releases its records.
  uint32_t hold_reserve_ = 0;
  std::deque<shm::RingEntry> prefetch_;  // scheduler thread only
  std::atomic<uint32_t> inflight_{0};
  // Time with a read in flight, added up at every submission and completion
  // (not when the disk goes idle), so a phase's share is in its own counters.
  std::mutex busy_mutex_;
  uint32_t busy_reads_ = 0;    // under busy_mutex_
  uint64_t busy_mark_ns_ = 0;  // under busy_mutex_: the last change of busy_reads_
  std::atomic<bool> stopping_{false};
  uint64_t last_reap_ns_ = 0;
  std::thread scheduler_;
};

Worker::Impl::Impl(const Container& container, const WorkerOptions& options)
    : container_(container),
      options_(options),
      readers_(std::max<uint32_t>(options.readers, 1)) {
  const shm::Geometry geometry =
      plan_cache_geometry(container, options.cache_bytes, options.max_clients, options.mailbox_rows);
  const auto started = std::chrono::steady_clock::now();
  const auto seconds_since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  segment_ = options.instance.empty() ? shm::Segment::create_anonymous(geometry, container.identity())
                                      : shm::Segment::create(options.instance, geometry, container.identity());
  make_slots_resident(options.progress && ::isatty(STDERR_FILENO) == 1);
  evictor_ = std::make_unique<Evictor>(options.policy, options.seed, container, geometry.slot_count);
  hold_reserve_ = container.top_k();
  const uint64_t working_set = uint64_t{container.top_k()} * container.moe_layers().size();
  cold_window_ = geometry.slot_count >= working_set ? 2 * working_set : 2ull * container.top_k();
  const Completion on_complete = [this](const ReadJob& job, std::optional<std::string> problem) {
    complete(job, std::move(problem));
  };
  if (options.backend != IoBackend::kThreads) {
    try {
      banks_ = std::make_unique<BankFiles>(container, options.direct, options.quiet);
      const SlotMemory slots{segment_->slot_data(0), geometry.slot_count, geometry.slot_bytes};
      const uint32_t ceiling = std::max(readers_, kMaxUringDepth);
      const auto registering = std::chrono::steady_clock::now();
      backend_ = make_uring_backend(container, *banks_, ceiling, slots, options.verify_crc, on_complete);
      if (backend_->registered_buffers()) startup_.register_seconds = seconds_since(registering);
      depth_ = std::make_unique<DepthTuner>(readers_, ceiling);
      direct_io_ = banks_->all_direct();
    } catch (const Error& e) {
      if (options.backend == IoBackend::kUring) throw;
      if (!options.quiet) std::fprintf(stderr, "sluice-io: %s; using %u reader threads\n", e.what(), readers_);
      banks_.reset();
    }
  }
  if (!backend_) {
    backend_ = make_thread_backend(container, readers_, options.verify_crc, on_complete);
    depth_ = std::make_unique<DepthTuner>(readers_, readers_);
    direct_io_ = true;
    for (const MoeLayerInfo& info : container.moe_layers()) direct_io_ = direct_io_ && container.bank_direct(info.layer);
  }
  segment_->header().direct_io = direct_io_ ? 1 : 0;
  segment_->set_owner_state(shm::OwnerState::kServing);
  startup_.seconds = seconds_since(started);
  startup_.page_faults = shm::process_page_faults();
  scheduler_ = std::thread([this] { run(); });
}

void Worker::Impl::make_slots_resident(bool show) {
  const shm::Geometry& g = segment_->geometry();
  const uint64_t bytes = uint64_t{g.slot_count} * g.slot_bytes;
  const auto progress = [](uint64_t done, uint64_t total) {
    std::fprintf(stderr, "\rmaking the expert cache resident: %.1f of %.1f GiB", double(done) / double(1 << 30),
                 double(total) / double(1 << 30));
    if (done == total) std::fputc('\n', stderr);
  };
  // The kernel zeroing fresh pages is what this costs; kResidentThreads share it.
  startup_.residency = shm::make_resident(segment_->slot_data(0), bytes, kResidentThreads,
                                          show ? std::function<void(uint64_t, uint64_t)>(progress) : nullptr);
}

Worker::Impl::~Impl() {
  stopping_ = true;
  shm::futex_bump(segment_->header().work);
  scheduler_.join();
  backend_.reset();  // waits for reads in flight; their completions still land
  segment_.reset();  // marks it stopped, wakes every waiter, removes the name
}

void Worker::Impl::run() {
  shm::SegmentHeader& header = segment_->header();
  while (!stopping_.load()) {
    const uint32_t seen = header.work.load(std::memory_order_acquire);
    const uint64_t now = shm::monotonic_ns();
    header.owner_heartbeat_ns.store(now, std::memory_order_relaxed);
    try {
      if (now - last_reap_ns_ >= kReapIntervalNs) {
        reap();
        last_reap_ns_ = now;
      }
      schedule();
    } catch (const Error& e) {
      // A failure here is a broken segment; clients must not wait forever on it.
      std::fprintf(stderr, "sluice-io: scheduler stopped: %s\n", e.what());
      segment_->set_owner_state(shm::OwnerState::kFailed);
      for (uint32_t c = 0; c < segment_->geometry().max_clients; ++c) shm::futex_bump(segment_->client(c).notify);
      return;
    }
    shm::futex_wait(header.work, seen, kTick);
  }
}

shm::IndexView Worker::Impl::index() const {
  const shm::Geometry& g = segment_->geometry();
  return shm::IndexView(segment_->index_table(), g.index_capacity, g.slot_count);
}

bool Worker::Impl::valid_key(uint32_t layer, uint32_t expert) const {
  const MoeLayerInfo* info = container_.find_moe_layer(layer);
  return info != nullptr && expert < info->experts && info->record_stride <= segment_->geometry().slot_bytes;
}

void Worker::Impl::drain_rings() {
  const shm::Geometry& g = segment_->geometry();
  shm::RingView demand(segment_->demand_ring(), g.demand_ring_capacity);
  while (auto entry = demand.pop())
    (entry->position >= g.pins_per_client ? holds_ : demand_).push_back(*entry);
  shm::RingView prefetch(segment_->prefetch_ring(), g.prefetch_ring_capacity);
  while (auto entry = prefetch.pop()) prefetch_.push_back(*entry);
}

void Worker::Impl::schedule() {
  Pass pass;
  bool starved = false, holds_starved = false;
  {
    shm::SegmentLock lock(*segment_);
    drain_rings();
    // Demand first: a prefetch never takes a reader while a demand waits.
    const uint32_t depth = depth_->depth();
    segment_->stats().read_depth.store(depth, std::memory_order_relaxed);
    while (!demand_.empty() && inflight_.load() + pass.jobs.size() < depth) {
      const Outcome outcome = assign_demand(demand_.front(), pass);
      if (outcome == Outcome::kStarved) {
        starved = true;
        break;
      }
      demand_.pop_front();
    }
    // Then holds, in order, while the slots allow them.
    uint32_t unpinned = demand_.empty() && !holds_.empty() ? unpinned_slots() : 0;
    while (demand_.empty() && !holds_.empty() && inflight_.load() + pass.jobs.size() < depth) {
      if (assign_hold(holds_.front(), unpinned, pass) == Outcome::kStarved) {
        starved = holds_starved = true;
        break;
      }
      holds_.pop_front();
    }
    // Starved: a client's unpin wakes the scheduler.
    segment_->header().demand_starved.store(starved ? 1 : 0, std::memory_order_relaxed);
    while (demand_.empty() && holds_.empty() && !prefetch_.empty() &&
           inflight_.load() + pass.jobs.size() < depth) {
      assign_prefetch(prefetch_.front(), pass);
      prefetch_.pop_front();
    }
  }
  shm::StatsBlock& stats = segment_->stats();
  // Holds waiting for slots wait on a client, not on a free read: the depth tuner ignores them.
  stats.queue_depth.store(demand_.size() + (holds_starved ? 0 : holds_.size()) + prefetch_.size(),
                          std::memory_order_relaxed);
  if (!pass.jobs.empty()) {
    inflight_.fetch_add(static_cast<uint32_t>(pass.jobs.size()));
    count_busy(static_cast<int32_t>(pass.jobs.size()), shm::monotonic_ns());
    stats.inflight.fetch_add(pass.jobs.size(), std::memory_order_relaxed);
    backend_->submit(pass.jobs);
  }
  for (uint32_t c = 0; c < segment_->geometry().max_clients; ++c) {
    if (pass.notify & (uint64_t{1} << c)) shm::futex_bump(segment_->client(c).notify);
  }
}

Worker::Impl::Outcome Worker::Impl::assign_demand(const shm::RingEntry& entry, Pass& pass) {
  const shm::Geometry& g = segment_->geometry();
  shm::StatsBlock& stats = segment_->stats();
  if (entry.client >= g.max_clients || entry.position >= g.pins_per_client || !valid_key(entry.layer, entry.expert)) {
    stats.bad_requests.fetch_add(1, std::memory_order_relaxed);
    return Outcome::kDropped;
  }
  const shm::ClientEntry& client = segment_->client(entry.client);
  const bool current = client.state.load(std::memory_order_acquire) == static_cast<uint32_t>(shm::ClientState::kActive) &&
                       client.epoch == entry.epoch && client.batch == entry.batch;
  // A dead client's requests, or those of a batch it abandoned, are dropped here.
  if (!current || segment_->client_pins(entry.client)[entry.position] != shm::kNoSlot) return Outcome::kDropped;
  const uint64_t key = shm::make_key(entry.layer, entry.expert);
  std::optional<uint32_t> slot = index().find(key);
  if (slot && segment_->slot(*slot).key != key) {
    index().erase(key);  // an entry pointing at a slot that moved on: scribbled, drop it
    slot.reset();
  }
  if (slot) {
    shm::SlotEntry& s = segment_->slot(*slot);
    // A failed read gets one more try per request, a failed hold's read too.
    if (s.state.load(std::memory_order_relaxed) == static_cast<uint32_t>(SlotState::kFailed) &&
        (s.pins == 0 || release_holds_of(*slot))) {
      fill(*slot, key, shm::ReadOrigin::kDemand, pass);
    }
  } else {
    slot = evictor_->choose(*segment_, entry.layer);
    if (!slot) slot = take_back_held(entry.client);
    if (!slot) return Outcome::kStarved;
    evict(*slot);
    fill(*slot, key, shm::ReadOrigin::kDemand, pass);
  }
  shm::SlotEntry& s = segment_->slot(*slot);
  shm::pin_slot(*segment_, entry.client, entry.position, *slot);
  // A client is woken only when a record it waits for can be used: now if it
  // is there, else by the completion (it collects the pin then).
  if (s.state.load(std::memory_order_relaxed) == static_cast<uint32_t>(SlotState::kLoading)) {
    s.waiters |= uint64_t{1} << entry.client;
  } else {
    pass.notify |= uint64_t{1} << entry.client;
  }
  return Outcome::kDone;
}

// A hold is a guess, a batch is a need: a client waiting for its batch may
// also hold the next layer's records (it holds right after it requests), so
// pins that are only holds must give way, or that client waits on itself.
// Takes the client's own lowest-ranked guesses first, then other clients'.
// A held record still loading is left alone: its completion wakes the
// scheduler, which comes back here.
std::optional<uint32_t> Worker::Impl::take_back_held(uint32_t demanding_client) {
  const shm::Geometry& g = segment_->geometry();
  for (uint32_t n = 0; n < g.max_clients; ++n) {
    const uint32_t c = (demanding_client + n) % g.max_clients;
    const std::span<uint32_t> pins = segment_->client_pins(c);
    for (uint32_t i = g.pins_per_client; i-- > 0;) {
      const uint32_t pinned = pins[shm::hold_position(g, i)];
      if (pinned == shm::kNoSlot || pinned - 1 >= g.slot_count) continue;
      const uint32_t slot = pinned - 1;
      const shm::SlotEntry& s = segment_->slot(slot);
      if (s.state.load(std::memory_order_relaxed) == static_cast<uint32_t>(SlotState::kLoading)) continue;
      if (release_holds_of(slot) && evictable(s)) return slot;
    }
  }
  return std::nullopt;
}

bool Worker::Impl::release_holds_of(uint32_t slot) {
  const shm::Geometry& g = segment_->geometry();
  const shm::SlotEntry& s = segment_->slot(slot);
  uint32_t holds = 0;
  for (uint32_t c = 0; c < g.max_clients; ++c) {
    const std::span<uint32_t> pins = segment_->client_pins(c);
    for (uint32_t i = 0; i < g.pins_per_client; ++i) holds += pins[shm::hold_position(g, i)] == slot + 1 ? 1 : 0;
  }
  if (holds == 0 || holds != s.pins) return false;  // a batch pins it too
  for (uint32_t c = 0; c < g.max_clients; ++c) {
    const std::span<uint32_t> pins = segment_->client_pins(c);
    for (uint32_t i = 0; i < g.pins_per_client; ++i) {
      if (pins[shm::hold_position(g, i)] == slot + 1) shm::unpin_position(*segment_, c, shm::hold_position(g, i));
    }
  }
  segment_->stats().held_revoked.fetch_add(holds, std::memory_order_relaxed);
  return true;
}

uint32_t Worker::Impl::unpinned_slots() const {
  uint32_t count = 0;
  for (uint32_t s = 0; s < segment_->geometry().slot_count; ++s)
    count += segment_->slot(s).pins == 0 ? 1 : 0;
  return count;
}

// A held record of a client's next batch: pinned, never counted as an access
// (the client counts one if its next batch takes it), read as a speculative
// fill. `unpinned` is kept up to date across the pass.
Worker::Impl::Outcome Worker::Impl::assign_hold(const shm::RingEntry& entry, uint32_t& unpinned,
                                                Pass& pass) {
  const shm::Geometry& g = segment_->geometry();
  shm::StatsBlock& stats = segment_->stats();
  if (entry.client >= g.max_clients || entry.position < g.pins_per_client ||
      entry.position >= 2 * uint64_t{g.pins_per_client} || !valid_key(entry.layer, entry.expert)) {
    stats.bad_requests.fetch_add(1, std::memory_order_relaxed);
    return Outcome::kDropped;
  }
  const shm::ClientEntry& client = segment_->client(entry.client);
  const bool current = client.state.load(std::memory_order_acquire) ==
                           static_cast<uint32_t>(shm::ClientState::kActive) &&
                       client.epoch == entry.epoch && client.hold == entry.batch;
  if (!current || segment_->client_pins(entry.client)[entry.position] != shm::kNoSlot)
    return Outcome::kDropped;
  const uint64_t key = shm::make_key(entry.layer, entry.expert);
  std::optional<uint32_t> slot = index().find(key);
  if (slot && segment_->slot(*slot).key != key) {
    index().erase(key);
    slot.reset();
  }
  if (slot) {
    const shm::SlotEntry& s = segment_->slot(*slot);
    if (s.state.load(std::memory_order_relaxed) == static_cast<uint32_t>(SlotState::kFailed))
      return Outcome::kDropped;
    if (s.pins == 0 && unpinned <= hold_reserve_) return Outcome::kStarved;
  } else {
    if (unpinned <= hold_reserve_) return Outcome::kStarved;
    slot = evictor_->choose(*segment_, entry.layer);
    if (!slot) return Outcome::kStarved;
    evict(*slot);
    fill(*slot, key, shm::ReadOrigin::kHold, pass);
  }
  if (segment_->slot(*slot).pins == 0) --unpinned;
  shm::hold_slot(*segment_, entry.client, entry.position, *slot);
  stats.held.fetch_add(1, std::memory_order_relaxed);
  return Outcome::kDone;
}

void Worker::Impl::assign_prefetch(const shm::RingEntry& entry, Pass& pass) {
  shm::StatsBlock& stats = segment_->stats();
  if (!valid_key(entry.layer, entry.expert)) {
    stats.bad_requests.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  const uint64_t key = shm::make_key(entry.layer, entry.expert);
  // The guess is for the layer's next visit; the eviction policy keeps it till then.
  const uint64_t visits = entry.layer < shm::kStatLayers
                              ? stats.layers[entry.layer].visits.load(std::memory_order_relaxed)
                              : 0;
  evictor_->guessed(entry.layer, visits);
  const std::optional<uint32_t> cached = index().find(key);
  if (cached && segment_->slot(*cached).key == key) {
    segment_->slot(*cached).guessed_visit = visits;
    stats.prefetch_dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  const uint64_t clock = segment_->header().clock.load(std::memory_order_relaxed);
  const std::optional<uint32_t> slot =
      evictor_->choose_cold(*segment_, clock > cold_window_ ? clock - cold_window_ : 0);
  if (!slot) {
    stats.prefetch_dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  evict(*slot);
  fill(*slot, key, shm::ReadOrigin::kPrefetch, pass);
  segment_->slot(*slot).guessed_visit = visits;
}

void Worker::Impl::evict(uint32_t slot) {
  shm::SlotEntry& s = segment_->slot(slot);
  if (s.key == 0) return;
  shm::StatsBlock& stats = segment_->stats();
  evictor_->evicted(s);
  index().erase(s.key);
  if (s.state.load(std::memory_order_relaxed) == static_cast<uint32_t>(SlotState::kReady)) {
    stats.evictions.fetch_add(1, std::memory_order_relaxed);
    if (s.origin != static_cast<uint32_t>(shm::ReadOrigin::kDemand) && s.used == 0) {
      stats.wasted_prefetches.fetch_add(1, std::memory_order_relaxed);
    }
  }
  s.key = 0;
}

void Worker::Impl::fill(uint32_t slot, uint64_t key, shm::ReadOrigin origin, Pass& pass) {
  shm::SlotEntry& s = segment_->slot(slot);
  s.key = key;
  ++s.generation;
  // LFRU: a fresh fill counts one use; a demand pin right after adds its own.
  s.hits = origin == shm::ReadOrigin::kDemand ? 0 : 1;
  // A speculative fill does not advance the clock: guesses must not make
  // every other slot look older (and so evictable by the next guess).
  std::atomic<uint64_t>& clock = segment_->header().clock;
  s.last_access = origin == shm::ReadOrigin::kDemand ? clock.fetch_add(1, std::memory_order_relaxed) + 1
                                                     : clock.load(std::memory_order_relaxed);
  evictor_->filled(s, s.last_access);
  s.origin = static_cast<uint32_t>(origin);
  s.used = 0;
  s.waiters = 0;
  s.error[0] = '\0';
  s.state.store(static_cast<uint32_t>(SlotState::kLoading), std::memory_order_release);
  s.futex.fetch_add(1, std::memory_order_relaxed);
  index().insert(key, slot);
  pass.jobs.push_back(ReadJob{slot, s.generation, shm::key_layer(key), shm::key_expert(key),
                              static_cast<uint32_t>(origin), segment_->slot_data(slot), shm::monotonic_ns()});
}

void Worker::Impl::count_busy(int32_t reads, uint64_t at_ns) {
  const std::lock_guard<std::mutex> guard(busy_mutex_);
  const uint64_t now = std::max(at_ns, busy_mark_ns_);
  if (busy_reads_ > 0)
    segment_->stats().read_busy_ns.fetch_add(now - busy_mark_ns_, std::memory_order_relaxed);
  busy_mark_ns_ = now;
  busy_reads_ = static_cast<uint32_t>(static_cast<int32_t>(busy_reads_) + reads);
}

void Worker::Impl::complete(const ReadJob& job, std::optional<std::string> problem) {
  shm::StatsBlock& stats = segment_->stats();
  const uint64_t done_ns = shm::monotonic_ns();
  const uint64_t elapsed = done_ns - job.submitted_ns;
  // Counted before the slot turns READY: a client that sees the record and
  // then snapshots the stats finds its read in them (bench decode's phases).
  if (problem) {
    stats.read_errors.fetch_add(1, std::memory_order_relaxed);
  } else {
    const auto origin = static_cast<shm::ReadOrigin>(job.origin);
    (origin == shm::ReadOrigin::kDemand ? stats.demand_reads
     : origin == shm::ReadOrigin::kHold ? stats.held_reads
                                        : stats.prefetch_reads)
        .fetch_add(1, std::memory_order_relaxed);
    stats.bytes_read.fetch_add(container_.moe_layer(job.layer).record_stride, std::memory_order_relaxed);
  }
  stats.read_ns_total.fetch_add(elapsed, std::memory_order_relaxed);
  stats.latency[shm::latency_bucket(elapsed)].fetch_add(1, std::memory_order_relaxed);
  count_busy(-1, done_ns);  // where its latency ends, so a lone read's busy time is its latency
  uint64_t waiters = 0;
  try {
    shm::SlotEntry& s = segment_->slot(job.slot);
    {
      shm::SegmentLock lock(*segment_);
      if (problem) {
        std::snprintf(s.error, sizeof(s.error), "%s", problem->c_str());
        s.state.store(static_cast<uint32_t>(SlotState::kFailed), std::memory_order_release);
      } else {
        s.state.store(static_cast<uint32_t>(SlotState::kReady), std::memory_order_release);
      }
      waiters = s.waiters;
      s.waiters = 0;
      s.futex.fetch_add(1, std::memory_order_release);
      depth_->completed(container_.moe_layer(job.layer).record_stride, shm::monotonic_ns(),
                        stats.queue_depth.load(std::memory_order_relaxed) > 0);
    }
    shm::futex_wake_all(s.futex);
  } catch (const Error& e) {
    std::fprintf(stderr, "sluice-io: completing a read of layer %u expert %u: %s\n", job.layer, job.expert, e.what());
  }
  if (problem && !options_.quiet) {
    std::fprintf(stderr, "sluice-io: layer %u expert %u: %s\n", job.layer, job.expert, problem->c_str());
  }
  stats.inflight.fetch_sub(1, std::memory_order_relaxed);
  for (uint32_t c = 0; c < segment_->geometry().max_clients; ++c) {
    if (waiters & (uint64_t{1} << c)) shm::futex_bump(segment_->client(c).notify);
  }
  inflight_.fetch_sub(1);
  shm::futex_bump(segment_->header().work);  // a reader is free: schedule more
}

void Worker::Impl::reap() {
  for (uint32_t c = 0; c < segment_->geometry().max_clients; ++c) {
    shm::ClientEntry& client = segment_->client(c);
    if (client.state.load(std::memory_order_acquire) != static_cast<uint32_t>(shm::ClientState::kActive)) continue;
    const int32_t pid = client.pid;
    const uint32_t epoch = client.epoch;
    if (shm::process_alive(pid, client.start_time)) continue;
    shm::SegmentLock lock(*segment_);
    if (client.epoch != epoch) continue;  // it left (or was replaced) meanwhile
    shm::release_client(*segment_, c);
    segment_->stats().clients_reaped.fetch_add(1, std::memory_order_relaxed);
  }
}

void Worker::Impl::prefetch(uint32_t layer, std::span<const uint32_t> experts, PrefetchOrigin origin) {
  const MoeLayerInfo& info = container_.moe_layer(layer);
  // The lock below is shared with every client; hold it for one layer at most.
  if (experts.size() > info.experts) {
    fail("prefetch: layer {}: {} experts in one request, but the layer has {}", layer, experts.size(), info.experts);
  }
  for (uint32_t expert : experts) {
    if (expert >= info.experts) fail("prefetch: layer {} expert {}: no such expert (the layer has {})", layer, expert, info.experts);
  }
  shm::StatsBlock& stats = segment_->stats();
  stats.prefetch_requests.fetch_add(experts.size(), std::memory_order_relaxed);
  uint64_t dropped = 0;
  {
    shm::SegmentLock lock(*segment_);
    shm::RingView ring(segment_->prefetch_ring(), segment_->geometry().prefetch_ring_capacity);
    for (uint32_t expert : experts) {
      if (!ring.push(shm::RingEntry{0, 0, 0, 0, layer, expert, static_cast<uint32_t>(origin), 0})) ++dropped;
    }
  }
  stats.prefetch_dropped.fetch_add(dropped, std::memory_order_relaxed);
  if (dropped < experts.size()) shm::futex_bump(segment_->header().work);
}

Worker::Worker(const Container& container, const WorkerOptions& options)
    : impl_(std::make_unique<Impl>(container, options)) {}
Worker::~Worker() = default;
shm::Segment& Worker::segment() { return *impl_->segment_; }
const std::string& Worker::segment_name() const { return impl_->segment_->name(); }
const shm::Geometry& Worker::geometry() const { return impl_->segment_->geometry(); }
uint64_t Worker::identity() const { return impl_->container_.identity(); }
bool Worker::direct_io() const { return impl_->direct_io_; }
const char* Worker::backend_name() const { return impl_->backend_->name(); }
bool Worker::registered_buffers() const { return impl_->backend_->registered_buffers(); }
const Startup& Worker::startup() const { return impl_->startup_; }
uint64_t Worker::page_faults_since_startup() const {
  return shm::process_page_faults() - impl_->startup_.page_faults;
}
void Worker::prefetch(uint32_t layer, std::span<const uint32_t> experts, PrefetchOrigin origin) {
  impl_->prefetch(layer, experts, origin);
}
shm::StatsSnapshot Worker::stats() const { return shm::read_stats(*impl_->segment_); }

}  // namespace sluice::ioworker
