// shm/layout.h: the byte layout of the expert-cache segment: its geometry,
// the structs that live in it and their offsets, all computed from the
// geometry alone. No model knowledge and no I/O: a reader of a segment
// recomputes these offsets and never trusts one stored in the segment.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <pthread.h>

namespace sluice::shm {

inline constexpr uint64_t kSegmentMagic = 0x47534543'49554C53;  // "SLUICESG"
// 2: the hidden-state mailbox and lookahead counters; 3: a mailbox per client;
// 4: the router's heartbeat; 5: each client's hold positions (the next batch).
inline constexpr uint32_t kLayoutVersion = 5;
inline constexpr size_t kSlotAlign = 4096;  // O_DIRECT reads land in slots
inline constexpr uint32_t kMaxClients = 64;  // a slot's waiter set is a 64-bit mask
inline constexpr uint32_t kStatLayers = 256;  // FORMAT.md: layers ≤ 256
inline constexpr uint32_t kLatencyBuckets = 96;  // bucket b: [2^(b/4), 2^((b+1)/4)) µs
inline constexpr uint32_t kNoSlot = 0;           // in a pin list: no pin (entries hold slot + 1)
// Reuse counts for the eviction model (ioworker/hit_density.h): classes by
// uses per visit so far, ages in visits of the key's layer (the last bucket: older).
inline constexpr uint32_t kReuseClasses = 8;
inline constexpr uint32_t kReuseAges = 24;

// A cache key: model layer and expert id. 0 never names an expert, so it
// marks an empty index entry.
inline constexpr uint64_t make_key(uint32_t layer, uint32_t expert) {
  return (uint64_t{layer} + 1) << 32 | expert;
}
inline constexpr uint32_t key_layer(uint64_t key) { return static_cast<uint32_t>((key >> 32) - 1); }
inline constexpr uint32_t key_expert(uint64_t key) { return static_cast<uint32_t>(key); }

struct Geometry {
  uint32_t slot_count = 0;
  uint32_t slot_bytes = 0;        // the largest record stride, a multiple of 4096
  uint32_t max_clients = 0;       // ≤ kMaxClients
  uint32_t pins_per_client =
      0;  // the largest batch a client posts: experts of the widest layer
          // (its pin list holds as many again for the next batch: hold positions)
  uint32_t index_capacity = 0;    // power of two ≥ 2 × slot_count
  uint32_t demand_ring_capacity = 0;
  uint32_t prefetch_ring_capacity = 0;
  // The hidden-state mailboxes (shm/mailbox.h), one per client entry:
  // values per row, rows per message, ids per row. All zero: no mailboxes.
  uint32_t mailbox_width = 0;
  uint32_t mailbox_rows = 0;
  uint32_t mailbox_ids = 0;
  bool operator==(const Geometry&) const = default;
};

// What a mailbox must hold: the compute client's MoE input (width = the
// model's hidden size) for up to `rows` tokens, and `ids` routed experts per row.
struct MailboxShape {
  uint32_t width = 0;
  uint32_t rows = 0;
  uint32_t ids = 0;
};

// Byte offsets from the segment start; every one a multiple of 64, data 4096.
struct Layout {
  uint64_t stats = 0;
  uint64_t clients = 0;
  uint64_t client_stride = 0;  // a ClientEntry followed by its pin list
  uint64_t slots = 0;
  uint64_t index = 0;
  uint64_t demand_ring = 0;
  uint64_t prefetch_ring = 0;
  uint64_t mailbox = 0;  // max_clients mailboxes: a MailboxHeader, then its words; none when absent
  uint64_t mailbox_stride = 0;  // bytes per mailbox, a multiple of 64; 0 when absent
  uint64_t data = 0;
  uint64_t total = 0;
  bool operator==(const Layout&) const = default;
};

// 32-bit words after the MailboxHeader: rows × width values, then rows × ids ids.
inline uint64_t mailbox_word_count(const Geometry& g) {
  return uint64_t{g.mailbox_rows} * (uint64_t{g.mailbox_width} + g.mailbox_ids);
}

// Throws Error when the geometry cannot describe a segment (zero slots,
// misaligned slot size, too many clients, capacities out of range).
Layout compute_layout(const Geometry& geometry);

// The geometry of a cache of `slots` slots, rings sized from it.
Geometry geometry_for_slots(uint32_t slots, uint32_t slot_bytes, uint32_t max_clients, uint32_t pins_per_client,
                            MailboxShape mailbox = {});

// The geometry of the largest cache that fits, segment and all, in `budget`
// bytes: rings sized from the slot count. Throws Error naming the budget when
// fewer than `min_slots` slots fit.
Geometry plan_geometry(uint64_t budget, uint32_t slot_bytes, uint32_t min_slots, uint32_t max_clients,
                       uint32_t pins_per_client, MailboxShape mailbox = {});

enum class OwnerState : uint32_t { kStarting = 0, kServing = 1, kStopped = 2, kFailed = 3 };

struct SegmentHeader {
  uint64_t magic = 0;
  uint32_t layout_version = 0;
  uint32_t header_bytes = 0;  // sizeof(SegmentHeader) of the writer
  Geometry geometry;
  Layout layout;
  uint64_t identity = 0;      // the container's identity (Container::identity())
  int32_t owner_pid = 0;
  uint32_t direct_io = 0;     // 1 when every bank read bypasses the page cache
  uint64_t owner_start_time = 0;  // /proc/<pid>/stat start time, clock ticks
  char instance[64] = {};
  std::atomic<uint32_t> owner_state{0};      // OwnerState
  std::atomic<uint32_t> work{0};             // futex word the worker sleeps on; clients bump it
  std::atomic<uint32_t> demand_starved{0};   // worker waits for an unpin to find a victim
  std::atomic<uint32_t> mailbox_bell{0};     // futex word: bumped after a message in any mailbox
  std::atomic<uint64_t> clock{0};            // access clock for LRU / LFRU ties
  std::atomic<uint64_t> owner_heartbeat_ns{0};
  // Guards the index, the rings, slot keys/pins/waiters and every pin list.
  // Process-shared and robust; never held across I/O or a futex wait.
  pthread_mutex_t lock;
};

// What lookahead's guesses scored against the real routing of one layer.
struct GuessCounters {
  std::atomic<uint64_t> scored{0};      // guesses compared with a real routing
  std::atomic<uint64_t> rank1_hits{0};  // the guess at rank 1 was among the real experts
  std::atomic<uint64_t> recalled{0};    // real experts that were among the guess
  std::atomic<uint64_t> real{0};        // real experts compared
};

// Written by the router reading the mailbox (sluice-router or the embedded thread).
struct LookaheadCounters {
  std::atomic<int32_t> router_pid{0};  // 0: no router has served this segment
  std::atomic<uint32_t> k{0};          // experts guessed per token and layer
  std::atomic<uint64_t> messages{0};   // mailbox messages read
  std::atomic<uint64_t> skipped{0};    // overwritten before the router read them
  std::atomic<uint64_t> prefetches{0};  // prefetch requests sent
  std::atomic<uint64_t> prefetched{0};  // experts asked for in them
  std::atomic<uint64_t> router_heartbeat_ns{0};  // sluice-router's loop, for its supervisor
  GuessCounters layers[kStatLayers];
};

struct LayerCounters {
  std::atomic<uint64_t> hits{0};
  std::atomic<uint64_t> misses{0};
  std::atomic<uint64_t> visits{0};  // batches requested (clients, under the lock): the layer's clock
};

// How many uses of a key of class c came at age a+1 (pins.h counts them at
// every pin); tail_visits[c] the visits those in the last bucket waited
// beyond it. Read by the worker to learn the chance of reuse by age.
struct ReuseCounters {
  std::atomic<uint64_t> used[kReuseClasses][kReuseAges] = {};
  std::atomic<uint64_t> tail_visits[kReuseClasses] = {};
};

// Counters only grow (gauges excepted); readers take relaxed snapshots.
struct StatsBlock {
  std::atomic<uint64_t> hits{0};            // found in the cache (ready or loading)
  std::atomic<uint64_t> inflight_hits{0};   // of those, found still loading
  std::atomic<uint64_t> misses{0};          // posted to the demand ring
  std::atomic<uint64_t> demand_reads{0};
  std::atomic<uint64_t> prefetch_reads{0};
  std::atomic<uint64_t> prefetch_requests{0};
  std::atomic<uint64_t> prefetch_dropped{0};  // already cached, queue full, or no victim
  std::atomic<uint64_t> bytes_read{0};
  std::atomic<uint64_t> read_errors{0};
  std::atomic<uint64_t> evictions{0};
  std::atomic<uint64_t> wasted_prefetches{0};  // prefetched or held, then evicted unused
  std::atomic<uint64_t> held{0};               // records pinned for a client's next batch
  std::atomic<uint64_t> held_used{0};          // of those, taken by the batch they were held for
  std::atomic<uint64_t> held_reads{0};  // records read for a hold (not in demand or prefetch reads)
  // Held records given up to a batch that found no unpinned slot (worker.cpp take_back_held).
  std::atomic<uint64_t> held_revoked{0};
  std::atomic<uint64_t> bad_requests{0};       // ring entries that failed a bounds check
  std::atomic<uint64_t> clients_reaped{0};
  std::atomic<uint64_t> queue_depth{0};        // gauge: requests waiting for a reader
  std::atomic<uint64_t> inflight{0};           // gauge: reads submitted, not completed
  std::atomic<uint64_t> read_depth{
      0};  // gauge: reads the worker allows in flight now (depth_tuner.h)
  std::atomic<uint64_t> read_ns_total{0};
  // Time with at least one read in flight: read_ns_total over it is the
  // mean number of reads the worker kept in flight while it read.
  std::atomic<uint64_t> read_busy_ns{0};
  std::atomic<uint64_t> latency[kLatencyBuckets] = {};
  LayerCounters layers[kStatLayers];
  LookaheadCounters lookahead;
  ReuseCounters reuse;
};

enum class ClientState : uint32_t { kFree = 0, kActive = 1 };

struct alignas(64) ClientEntry {
  std::atomic<uint32_t> state{0};   // ClientState
  uint32_t epoch = 0;               // bumped at each registration; ring entries carry it
  int32_t pid = 0;
  uint32_t batch = 0;               // the batch the client waits on (under the lock)
  uint64_t start_time = 0;
  std::atomic<uint64_t> heartbeat_ns{0};
  std::atomic<uint32_t> notify{0};  // futex word: bumped when one of its requests is pinned or lands
  uint32_t hold = 0;  // the hold the worker may still pin for (under the lock); 0: none
  std::atomic<uint64_t> requests{0};
  std::atomic<uint64_t> hits{0};
  std::atomic<uint64_t> misses{0};
  std::atomic<uint64_t> wait_ns{0};
  // Lookahead for this client's mailbox (the router writes them): messages
  // read, and prefetch guesses sent from them.
  std::atomic<uint64_t> lookahead_messages{0};
  std::atomic<uint64_t> lookahead_guesses{0};
  // Followed by uint32_t pins[2 × pins_per_client]: for each position of the
  // current batch, then each hold position (hold_position()), the pinned
  // slot + 1 (kNoSlot when none). Under the lock; the source of truth that
  // slot pin counts are rebuilt from.
};

enum class SlotState : uint32_t { kEmpty = 0, kLoading = 1, kReady = 2, kFailed = 3 };
enum class ReadOrigin : uint32_t {
  kDemand = 0,
  kPrefetch = 1,
  kHold = 2
};  // kHold: a client's next batch

struct alignas(64) SlotEntry {
  std::atomic<uint32_t> state{0};   // SlotState; READY is stored with release after the data
  std::atomic<uint32_t> futex{0};   // bumped and woken at every state change
  uint32_t generation = 0;          // bumped each time the slot takes a new key
  uint32_t pins = 0;                // under the lock
  uint64_t key = 0;                 // under the lock; fixed while pinned
  uint64_t waiters = 0;             // bit i: client i waits for this slot to land
  uint64_t hits = 0;                // LFRU frequency; a new fill starts at 1
  uint64_t last_access = 0;         // header clock at the last pin
  uint32_t origin = 0;              // ReadOrigin of the fill
  uint32_t used = 0;                // pinned by a client since it was filled
  uint64_t past_uses = 0;           // uses of the key in earlier stays (the worker's history)
  uint64_t last_visit = 0;          // its layer's visits at the key's last use; 0: never used
  uint64_t guessed_visit = 0;       // lookahead named it for the visit after this one; 0: never
  char error[88] = {};              // why the fill failed (FAILED only)
};

// The mailbox's header; `rows × width` value words and `rows × ids` id
// words follow it. Zero bytes are its valid empty state.
struct alignas(64) MailboxHeader {
  std::atomic<uint32_t> seq{0};  // odd while a writer is mid-message; the futex word readers sleep on
  std::atomic<uint32_t> layer{0};
  std::atomic<uint32_t> rows{0};
  std::atomic<uint32_t> ids_per_row{0};
  std::atomic<uint64_t> step{0};
};

struct IndexEntry {
  uint64_t key = 0;  // 0: empty
  uint32_t slot = 0;
  uint32_t reserved = 0;
};

// The pin-list position of a client's i-th held record (after its batch's).
inline constexpr uint32_t hold_position(const Geometry& g, uint32_t i) {
  return g.pins_per_client + i;
}

// One request, from a client (demand) or the worker's prefetch entry point.
struct RingEntry {
  uint32_t client = 0;    // demand: client table index
  uint32_t epoch = 0;     // demand: the client's epoch when it posted
  uint32_t batch = 0;     // demand: the client's batch id (a hold position: its hold id)
  uint32_t position = 0;  // demand: index into the client's pin list (≥ pins_per_client: a hold)
  uint32_t layer = 0;
  uint32_t expert = 0;
  uint32_t origin = 0;    // prefetch: who asked (opaque to shm)
  uint32_t reserved = 0;
};

struct RingHeader {
  uint32_t head = 0;  // next entry to pop (monotonic, mod capacity)
  uint32_t tail = 0;  // next entry to push
  uint32_t capacity = 0;
  uint32_t reserved = 0;
};

static_assert(std::atomic<uint32_t>::is_always_lock_free && std::atomic<uint64_t>::is_always_lock_free,
              "shared-memory counters must be lock-free");
static_assert(sizeof(std::atomic<uint32_t>) == 4, "futex words are 32-bit");

}  // namespace sluice::shm
