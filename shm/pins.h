// shm/pins.h: pin bookkeeping shared by clients and the worker: a pin is an
// entry in a client's pin list plus one count on the slot, always changed
// together under the segment lock. Nothing here waits, reads records or evicts.
#pragma once

#include <cstdint>

#include "shm/segment.h"

namespace sluice::shm {

// Pins `slot` for `client` at `position` of its pin list and counts the
// access (LFRU hits, LRU clock, its age in visits of its layer). Caller holds the lock. Throws Error on an
// out-of-range client, position or slot, or a position already pinned.
void pin_slot(Segment& segment, uint32_t client, uint32_t position, uint32_t slot);

// Pins `slot` at a hold position without counting an access: a held record
// is a guess until the batch it was held for takes it (count_access then).
// Same lock and errors as pin_slot.
void hold_slot(Segment& segment, uint32_t client, uint32_t position, uint32_t slot);
// Counts one use of the key in `slot`, as pin_slot does. Caller holds the lock.
void count_access(Segment& segment, uint32_t slot);

// The class of a key used `uses` times over the `known` visits of its layer
// (all of them, since the cache started): its rate of use, drawn toward 0.1
// while few visits are known. A key of class `cls` used again `age` visits after its last use:
// one count in `reuse` (age 0, the same visit, none). pin_slot counts every
// pin so; router/'s replay simulator counts alike.
uint32_t reuse_class(uint64_t uses, uint64_t known);
void count_reuse(ReuseCounters& reuse, uint32_t cls, uint64_t age);

// Drops the pin at `position` (no-op when none). Returns true when the slot's
// count reached zero. Caller holds the lock.
bool unpin_position(Segment& segment, uint32_t client, uint32_t position);

// Drops every pin of `client`, clears it from every slot's waiter set and
// frees its table entry, so its queued requests are dropped (epoch
// mismatch). Caller holds the lock.
void release_client(Segment& segment, uint32_t client);

}  // namespace sluice::shm
