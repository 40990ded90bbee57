// shm/stats.h: a plain copy of the segment's counters for `sluice stats`, the
// RPC stats call and run summaries, plus latency percentiles from the
// histogram. Reading never takes the lock; numbers are relaxed snapshots.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "shm/segment.h"

namespace sluice::shm {

struct LayerStats {
  uint32_t layer = 0;
  uint64_t hits = 0;
  uint64_t misses = 0;
};

struct ClientStats {
  uint32_t id = 0;
  int32_t pid = 0;
  uint64_t requests = 0;
  uint64_t hits = 0;
  uint64_t misses = 0;
  double wait_seconds = 0;
  double heartbeat_age_seconds = 0;
};

// Lookahead's guesses at one layer, scored against the real routing.
struct GuessStats {
  uint32_t layer = 0;
  uint64_t scored = 0, rank1_hits = 0, recalled = 0, real = 0;
  double precision_at_1() const { return scored ? double(rank1_hits) / double(scored) : 0.0; }
  double recall() const { return real ? double(recalled) / double(real) : 0.0; }
};

struct LookaheadStats {
  int32_t router_pid = 0;  // 0: no router has served the segment
  uint32_t k = 0;
  uint64_t messages = 0, skipped = 0, prefetches = 0, prefetched = 0;
  // Since sluice-router's loop last ran; negative: it never ran.
  double heartbeat_age_seconds = -1;
  std::vector<GuessStats> layers;  // layers with any guess scored
  GuessStats total() const;        // summed over layers (layer field 0)
};

struct StatsSnapshot {
  uint64_t hits = 0, inflight_hits = 0, misses = 0;
  uint64_t demand_reads = 0, prefetch_reads = 0, prefetch_requests = 0, prefetch_dropped = 0;
  uint64_t bytes_read = 0, read_errors = 0, evictions = 0, wasted_prefetches = 0;
  uint64_t held = 0, held_used = 0;  // records held for a client's next batch, and those it took
  uint64_t held_reads = 0;           // records read for holds
  uint64_t held_revoked = 0;         // held records given up to a batch that found no free slot
  uint64_t bad_requests = 0, clients_reaped = 0, queue_depth = 0, inflight = 0, read_depth = 0;
  double read_seconds_total = 0;
  double read_busy_seconds = 0;  // time with at least one read in flight
  double read_p50_us = 0, read_p90_us = 0, read_p99_us = 0;  // bucket upper bounds
  bool direct_io = false;
  uint32_t slot_count = 0, slot_bytes = 0;
  uint32_t slots_ready = 0, slots_pinned = 0;
  std::vector<LayerStats> layers;    // layers with any traffic
  std::vector<ClientStats> clients;  // active clients
  LookaheadStats lookahead;
  double scheduler_heartbeat_age_seconds = 0;  // since the owner's scheduler last ran
  double hit_rate() const { return hits + misses == 0 ? 0.0 : double(hits) / double(hits + misses); }
};

StatsSnapshot read_stats(const Segment& segment);

// The bucket a read of `ns` nanoseconds falls in, and a bucket's upper bound.
uint32_t latency_bucket(uint64_t ns);
double latency_bucket_upper_us(uint32_t bucket);
// The upper bound (µs) of the bucket holding quantile `q` of `counts`; 0 when empty.
double histogram_quantile_us(const uint64_t* counts, uint32_t buckets, double q);

}  // namespace sluice::shm
