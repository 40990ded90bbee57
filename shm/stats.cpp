// shm/stats.cpp: snapshots of the counters and histogram percentiles.
#include "shm/stats.h"

#include <cmath>

#include "shm/process.h"

namespace sluice::shm {

uint32_t latency_bucket(uint64_t ns) {
  const double us = static_cast<double>(ns) / 1000.0;
  if (us < 1.0) return 0;
  const auto b = static_cast<uint32_t>(std::floor(4.0 * std::log2(us)));
  return std::min(b, kLatencyBuckets - 1);
}

double latency_bucket_upper_us(uint32_t bucket) { return std::exp2(static_cast<double>(bucket + 1) / 4.0); }

double histogram_quantile_us(const uint64_t* counts, uint32_t buckets, double q) {
  uint64_t total = 0;
  for (uint32_t b = 0; b < buckets; ++b) total += counts[b];
  if (total == 0) return 0;
  const auto target = static_cast<uint64_t>(std::ceil(q * static_cast<double>(total)));
  uint64_t seen = 0;
  for (uint32_t b = 0; b < buckets; ++b) {
    seen += counts[b];
    if (seen >= std::max<uint64_t>(target, 1)) return latency_bucket_upper_us(b);
  }
  return latency_bucket_upper_us(buckets - 1);
}

GuessStats LookaheadStats::total() const {
  GuessStats sum;
  for (const GuessStats& g : layers) {
    sum.scored += g.scored;
    sum.rank1_hits += g.rank1_hits;
    sum.recalled += g.recalled;
    sum.real += g.real;
  }
  return sum;
}

StatsSnapshot read_stats(const Segment& segment) {
  const StatsBlock& s = segment.stats();
  const auto get = [](const std::atomic<uint64_t>& v) { return v.load(std::memory_order_relaxed); };
  StatsSnapshot out;
  out.hits = get(s.hits);
  out.inflight_hits = get(s.inflight_hits);
  out.misses = get(s.misses);
  out.demand_reads = get(s.demand_reads);
  out.prefetch_reads = get(s.prefetch_reads);
  out.prefetch_requests = get(s.prefetch_requests);
  out.prefetch_dropped = get(s.prefetch_dropped);
  out.bytes_read = get(s.bytes_read);
  out.read_errors = get(s.read_errors);
  out.evictions = get(s.evictions);
  out.wasted_prefetches = get(s.wasted_prefetches);
  out.held = get(s.held);
  out.held_used = get(s.held_used);
  out.held_reads = get(s.held_reads);
  out.held_revoked = get(s.held_revoked);
  out.bad_requests = get(s.bad_requests);
  out.clients_reaped = get(s.clients_reaped);
  out.queue_depth = get(s.queue_depth);
  out.inflight = get(s.inflight);
  out.read_depth = get(s.read_depth);
  out.read_seconds_total = static_cast<double>(get(s.read_ns_total)) * 1e-9;
  out.read_busy_seconds = static_cast<double>(get(s.read_busy_ns)) * 1e-9;
  uint64_t hist[kLatencyBuckets];
  for (uint32_t b = 0; b < kLatencyBuckets; ++b) hist[b] = get(s.latency[b]);
  out.read_p50_us = histogram_quantile_us(hist, kLatencyBuckets, 0.50);
  out.read_p90_us = histogram_quantile_us(hist, kLatencyBuckets, 0.90);
  out.read_p99_us = histogram_quantile_us(hist, kLatencyBuckets, 0.99);
  out.direct_io = segment.header().direct_io != 0;
  const Geometry& g = segment.geometry();
  out.slot_count = g.slot_count;
  out.slot_bytes = g.slot_bytes;
  for (uint32_t i = 0; i < g.slot_count; ++i) {
    const SlotEntry& slot = segment.slot(i);
    out.slots_ready += slot.state.load(std::memory_order_relaxed) == static_cast<uint32_t>(SlotState::kReady);
    out.slots_pinned += slot.pins != 0;  // racy read, a gauge
  }
  for (uint32_t l = 0; l < kStatLayers; ++l) {
    const uint64_t hits = get(s.layers[l].hits), misses = get(s.layers[l].misses);
    if (hits + misses != 0) out.layers.push_back(LayerStats{l, hits, misses});
  }
  const uint64_t now = monotonic_ns();
  for (uint32_t c = 0; c < g.max_clients; ++c) {
    const ClientEntry& e = segment.client(c);
    if (e.state.load(std::memory_order_acquire) != static_cast<uint32_t>(ClientState::kActive)) continue;
    const uint64_t beat = get(e.heartbeat_ns);
    out.clients.push_back(ClientStats{c, e.pid, get(e.requests), get(e.hits), get(e.misses),
                                      static_cast<double>(get(e.wait_ns)) * 1e-9,
                                      now > beat ? static_cast<double>(now - beat) * 1e-9 : 0.0});
  }
  const LookaheadCounters& la = s.lookahead;
  out.lookahead.router_pid = la.router_pid.load(std::memory_order_relaxed);
  out.lookahead.k = la.k.load(std::memory_order_relaxed);
  out.lookahead.messages = get(la.messages);
  out.lookahead.skipped = get(la.skipped);
  out.lookahead.prefetches = get(la.prefetches);
  out.lookahead.prefetched = get(la.prefetched);
  const uint64_t router_beat = get(la.router_heartbeat_ns);
  out.lookahead.heartbeat_age_seconds = router_beat == 0 ? -1.0
                                        : now > router_beat
                                            ? static_cast<double>(now - router_beat) * 1e-9
                                            : 0.0;
  const uint64_t owner_beat = segment.header().owner_heartbeat_ns.load(std::memory_order_relaxed);
  out.scheduler_heartbeat_age_seconds =
      now > owner_beat ? static_cast<double>(now - owner_beat) * 1e-9 : 0.0;
  for (uint32_t l = 0; l < kStatLayers; ++l) {
    const GuessCounters& g = la.layers[l];
    if (get(g.scored) == 0) continue;
    out.lookahead.layers.push_back(GuessStats{l, get(g.scored), get(g.rank1_hits), get(g.recalled), get(g.real)});
  }
  return out;
}

}  // namespace sluice::shm
