// shm/layout.cpp: offsets of every table from the geometry, and the largest
// geometry a budget buys. Pure arithmetic, checked against overflow.
#include "shm/layout.h"

#include <algorithm>
#include <bit>

#include "proto/error.h"

namespace sluice::shm {
namespace {

constexpr uint64_t kTableAlign = 64;
constexpr uint64_t kMaxSlots = uint64_t{1} << 28;
constexpr uint64_t kMaxRing = uint64_t{1} << 24;
constexpr uint32_t kMaxPinsPerClient = 4096;  // FORMAT.md: experts per layer ≤ 4096
constexpr uint32_t kMaxMailboxWidth = 1u << 20;
constexpr uint32_t kMaxMailboxRows = 4096;

uint64_t align_up(uint64_t value, uint64_t alignment) { return (value + alignment - 1) / alignment * alignment; }

}  // namespace

Layout compute_layout(const Geometry& g) {
  if (g.slot_count == 0 || g.slot_count > kMaxSlots) fail("cache geometry: slot count {} out of range", g.slot_count);
  if (g.slot_bytes == 0 || g.slot_bytes % kSlotAlign != 0) {
    fail("cache geometry: slot size {} is not a positive multiple of {}", g.slot_bytes, kSlotAlign);
  }
  if (g.max_clients == 0 || g.max_clients > kMaxClients) {
    fail("cache geometry: max clients {} out of range 1..{}", g.max_clients, kMaxClients);
  }
  if (g.pins_per_client == 0 || g.pins_per_client > kMaxPinsPerClient) {
    fail("cache geometry: pins per client {} out of range 1..{}", g.pins_per_client, kMaxPinsPerClient);
  }
  if (!std::has_single_bit(g.index_capacity) || uint64_t{g.index_capacity} < 2 * uint64_t{g.slot_count}) {
    fail("cache geometry: index capacity {} is not a power of two ≥ 2 × {} slots", g.index_capacity, g.slot_count);
  }
  for (uint32_t ring : {g.demand_ring_capacity, g.prefetch_ring_capacity}) {
    if (ring == 0 || ring > kMaxRing) fail("cache geometry: ring capacity {} out of range", ring);
  }
  const bool no_mailbox = g.mailbox_width == 0 && g.mailbox_rows == 0 && g.mailbox_ids == 0;
  if (!no_mailbox && (g.mailbox_width == 0 || g.mailbox_width > kMaxMailboxWidth || g.mailbox_rows == 0 ||
                      g.mailbox_rows > kMaxMailboxRows || g.mailbox_ids == 0 || g.mailbox_ids > kMaxPinsPerClient)) {
    fail("cache geometry: mailbox of {} values × {} rows with {} ids per row out of range", g.mailbox_width,
         g.mailbox_rows, g.mailbox_ids);
  }
  Layout l;
  uint64_t at = align_up(sizeof(SegmentHeader), kTableAlign);
  l.stats = at;
  at = align_up(at + sizeof(StatsBlock), kTableAlign);
  l.clients = at;
  l.client_stride = align_up(
      sizeof(ClientEntry) + 2 * uint64_t{g.pins_per_client} * sizeof(uint32_t), kTableAlign);
  at += l.client_stride * g.max_clients;
  l.slots = at;
  at = align_up(at + uint64_t{g.slot_count} * sizeof(SlotEntry), kTableAlign);
  l.index = at;
  at = align_up(at + uint64_t{g.index_capacity} * sizeof(IndexEntry), kTableAlign);
  l.demand_ring = at;
  at = align_up(at + sizeof(RingHeader) + uint64_t{g.demand_ring_capacity} * sizeof(RingEntry), kTableAlign);
  l.prefetch_ring = at;
  at = align_up(at + sizeof(RingHeader) + uint64_t{g.prefetch_ring_capacity} * sizeof(RingEntry), kTableAlign);
  l.mailbox = at;
  if (!no_mailbox) {
    l.mailbox_stride = align_up(sizeof(MailboxHeader) + mailbox_word_count(g) * sizeof(uint32_t), kTableAlign);
    at += l.mailbox_stride * g.max_clients;
  }
  l.data = align_up(at, kSlotAlign);
  l.total = l.data + uint64_t{g.slot_count} * g.slot_bytes;
  return l;
}

Geometry geometry_for_slots(uint32_t slots, uint32_t slot_bytes, uint32_t max_clients, uint32_t pins_per_client,
                            MailboxShape mailbox) {
  Geometry g;
  g.slot_count = slots;
  g.slot_bytes = slot_bytes;
  g.max_clients = max_clients;
  g.pins_per_client = pins_per_client;
  g.index_capacity = static_cast<uint32_t>(std::bit_ceil(std::max<uint64_t>(2 * uint64_t{slots}, 2)));
  // Room for every client's largest batch and its hold, so a post never meets a full ring in
  // practice.
  g.demand_ring_capacity = static_cast<uint32_t>(
      std::clamp<uint64_t>(2 * uint64_t{max_clients} * pins_per_client, 1, kMaxRing));
  g.prefetch_ring_capacity = static_cast<uint32_t>(std::clamp<uint64_t>(slots, 256, kMaxRing));
  g.mailbox_width = mailbox.width;
  g.mailbox_rows = mailbox.rows;
  g.mailbox_ids = mailbox.ids;
  return g;
}

Geometry plan_geometry(uint64_t budget, uint32_t slot_bytes, uint32_t min_slots, uint32_t max_clients,
                       uint32_t pins_per_client, MailboxShape mailbox) {
  if (slot_bytes == 0) fail("cache geometry: slot size is zero");
  const auto total_for = [&](uint64_t slots) {
    return compute_layout(geometry_for_slots(static_cast<uint32_t>(slots), slot_bytes, max_clients, pins_per_client, mailbox)).total;
  };
  // The largest slot count whose whole segment fits: bisect, the size grows with the count.
  uint64_t lo = 0, hi = std::min<uint64_t>(kMaxSlots, budget / slot_bytes);
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo + 1) / 2;
    if (total_for(mid) <= budget) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const uint32_t floor_slots = std::max<uint32_t>(min_slots, 1);
  if (lo < floor_slots) {
    fail("cache budget of {} bytes holds {} slots of {} bytes; the minimum is {} slots ({} bytes)", budget, lo,
         slot_bytes, floor_slots, total_for(floor_slots));
  }
  return geometry_for_slots(static_cast<uint32_t>(lo), slot_bytes, max_clients, pins_per_client, mailbox);
}

}  // namespace sluice::shm
