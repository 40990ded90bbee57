// shm/client.h: the compute side of the cache. A hit is looked up, pinned and
// handed out with no message and no system call (an uncontended lock is a
// CAS); misses go to the demand ring in one batch and the client sleeps on
// its futex word until each lands. It never touches a slot it has not pinned
// and never checks record contents (compute/ checks headers: shm knows no model).
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "proto/error.h"
#include "shm/segment.h"
#include "shm/segment_lock.h"

namespace sluice::shm {

// The segment's owner died or stopped serving: the segment will never serve
// again, but a client may attach to the daemon that replaces it.
class OwnerGone : public Error {
 public:
  using Error::Error;
};

struct ClientCounters {
  uint64_t requests = 0;
  uint64_t hits = 0;          // pinned at request time (ready or loading)
  uint64_t misses = 0;        // posted to the demand ring
  double wait_seconds = 0;    // blocked in next()
};

struct LandedSlot {
  uint32_t index = 0;          // position in the request
  uint32_t slot = 0;
  const uint8_t* data = nullptr;  // slot_bytes bytes, valid until released
};

class Client {
 public:
  // Registers this process in the client table (pid and start time, so the
  // worker can reap it if it dies). Throws Error when the table is full or
  // the owner is gone. `segment` must outlive the client. next() gives up
  // after waiting `read_timeout` for a record (a stopped or stuck owner).
  explicit Client(Segment& segment, std::chrono::milliseconds read_timeout = kDefaultReadTimeout);
  // Releases every pin and frees the table entry.
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Starts a batch for distinct `experts` of `layer` (at most
  // pins_per_client): pins every key found in the cache and posts the rest to
  // the demand ring, all under one lock; wakes the worker only if it posted.
  // Every slot of the previous batch must have been released.
  void request(uint32_t layer, std::span<const uint32_t> experts);
  // Holds the records of distinct `experts` of `layer` (at most
  // pins_per_client) for the next request(): a guess of the next layer's
  // batch, pinned and read while this batch completes, so the next request
  // finds them ready and nothing evicts them meanwhile. Cached ones are
  // pinned at once; the worker reads the rest behind every demand read and
  // only while its slots allow it (worker.cpp assign_hold), and a batch
  // that finds every slot pinned takes back slots only holds pin
  // (take_back_held), so a hold never stalls a batch, this client's own
  // included. The next request() takes the held records it asks for
  // and unpins the others; a new hold() drops the previous one. Best
  // effort: what the worker has not pinned by then is simply not held.
  void hold(uint32_t layer, std::span<const uint32_t> experts);
  // Returns a READY pinned slot of the batch not yet handed out, blocking
  // until one lands. Throws Error when a read failed (the worker's message),
  // when a pinned slot holds another key, or when nothing landed within the
  // read timeout; OwnerGone when the owner is gone (naming the segment and
  // its pid).
  LandedSlot next();
  // Unpins a handed-out slot; its memory may be reused at once.
  void release(const LandedSlot& landed);

  uint32_t id() const { return id_; }
  ClientCounters counters() const { return counters_; }
  // How long next() sleeps between liveness checks of the owner.
  static constexpr std::chrono::milliseconds kWaitSlice{100};
  // Long enough for a supervisor to notice a stopped daemon, kill it and
  // start another (sluice-up: seconds), short enough that nobody waits forever.
  static constexpr std::chrono::milliseconds kDefaultReadTimeout{60000};

 private:
  enum class Position : uint8_t { kPosted, kPinned, kHandedOut, kReleased };
  bool collect_assigned();
  // Under the lock: moves a held record of (layer, expert) to batch position
  // `position`; true when it did (the record counts as a hit).
  bool adopt_held(uint32_t layer, uint32_t expert, uint32_t position, bool& loading);
  void check_owner() const;
  // The segment lock, given up after read_timeout_ behind a stopped holder.
  SegmentLock lock_segment() const;
  // "sluice-io (pid N) is alive, ..." with why a wait may be stuck.
  std::string owner_condition() const;
  [[noreturn]] void fail_read_timeout(uint64_t waited_ns) const;
  // Still the same table entry: not reaped, not taken over by another client.
  bool registered() const;

  Segment& segment_;
  std::chrono::milliseconds read_timeout_;
  uint32_t id_ = 0;
  uint32_t epoch_ = 0;
  uint32_t batch_ = 0;
  uint32_t layer_ = 0;
  std::vector<uint32_t> experts_;
  std::vector<Position> positions_;
  std::vector<uint32_t> slots_;        // slot per position once pinned
  std::vector<uint32_t> unposted_;     // positions the full ring did not take yet
  size_t outstanding_ = 0;             // positions not yet handed out
  uint32_t hold_id_ = 0;               // the latest hold (never 0)
  uint32_t hold_layer_ = 0;
  std::vector<uint32_t> held_;  // the experts of the latest hold, by hold index
  ClientCounters counters_;
};

}  // namespace sluice::shm
