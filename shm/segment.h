// shm/segment.h: one mapped expert-cache segment: creating it (named, mode
// 0600, reclaiming the stale segment of a dead owner; or anonymous for the
// embedded mode), attaching to a running daemon's, and bounds-checked access
// to every table in it. It never interprets records and never does I/O on them.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "shm/layout.h"

namespace sluice::shm {

// "sluice-<euid>-<instance>": the POSIX shm name (no leading slash) of an
// instance of this user.
// Throws Error when `instance` is empty or holds more than [A-Za-z0-9_.-]{1,48}.
std::string segment_name(const std::string& instance);

class Segment {
 public:
  // Creates the named segment of `instance` with mode 0600 and holds an
  // exclusive flock on it for its lifetime (that lock is how another process
  // tells a live owner from a dead one). A segment of that name left by a
  // dead owner is removed first; one whose owner lives is refused, naming it.
  static std::unique_ptr<Segment> create(const std::string& instance, const Geometry& geometry,
                                         uint64_t identity);
  // An anonymous shared mapping for the embedded mode (worker and clients in
  // one process); nothing to clean up in /dev/shm.
  static std::unique_ptr<Segment> create_anonymous(const Geometry& geometry, uint64_t identity);
  // Maps a running daemon's segment by its name (as segment_name() returns
  // it, or with a leading '/'). Refuses a bad magic, layout version or
  // geometry, a dead owner, and an identity other than `expected_identity`
  // (the message names both identities and the segment).
  static std::unique_ptr<Segment> attach(const std::string& name, uint64_t expected_identity);

  // The owner marks the segment stopped (waking every waiter) and removes
  // the name; an attached mapping is just unmapped.
  ~Segment();
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  const std::string& name() const { return name_; }  // "" when anonymous
  bool is_owner() const { return owner_; }
  uint64_t mapped_bytes() const { return bytes_; }
  const Geometry& geometry() const { return geometry_; }
  const Layout& layout() const { return layout_; }

  SegmentHeader& header() const { return *header_; }
  StatsBlock& stats() const;
  // Each accessor throws Error when `index` is out of range: indices come
  // from shared memory a client may have scribbled on.
  ClientEntry& client(uint32_t index) const;
  // The batch's positions, then as many hold positions (layout.h hold_position).
  std::span<uint32_t> client_pins(uint32_t index) const;
  SlotEntry& slot(uint32_t index) const;
  uint8_t* slot_data(uint32_t index) const;
  IndexEntry* index_table() const;
  RingHeader& demand_ring() const;
  RingHeader& prefetch_ring() const;
  // The hidden-state mailbox of client entry `client` (shm/mailbox.h);
  // throws Error when the geometry has none or the index is out of range.
  MailboxHeader& mailbox_header(uint32_t client) const;
  // rows × width value words, then rows × ids id words.
  std::atomic<uint32_t>* mailbox_words(uint32_t client) const;

  // False once the owner has stopped or died: for a named segment, the
  // owner's flock is gone (a system call: call it only on slow paths).
  bool owner_alive() const;
  // Owner only: publish the serving state and the O_DIRECT flag.
  void set_owner_state(OwnerState state);

 private:
  struct Mapping;  // the Boost.Interprocess objects
  Segment();
  void adopt(std::unique_ptr<Mapping> mapping);
  void initialize(const Geometry& geometry, uint64_t identity, const std::string& instance);

  std::string name_;
  bool owner_ = false;
  std::unique_ptr<Mapping> mapping_;
  int fd_ = -1;  // named segments: the mapping's descriptor, for the flock and liveness probes
  uint8_t* base_ = nullptr;
  uint64_t bytes_ = 0;
  SegmentHeader* header_ = nullptr;
  Geometry geometry_;
  Layout layout_;
};

}  // namespace sluice::shm
