// shm/mailbox.h: the hidden-state mailboxes in the cache segment, one per
// client entry, so clients decoding at once never overwrite each other. A
// compute client publishes one message at a time in its own mailbox (a MoE
// layer's input rows and the experts its real router chose) under a seqlock;
// the router takes consistent snapshots of each. Publishing never blocks the client, and a reader never returns a
// half-written message. The words are numbers to shm: it knows no model.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "shm/segment.h"

namespace sluice::shm {

// One message: `rows` rows of `width` values for `layer` of forward call
// `step`, and `ids_per_row` ids per row.
struct MailboxMessage {
  uint64_t step = 0;
  uint32_t layer = 0;
  uint32_t rows = 0;
  uint32_t ids_per_row = 0;
  std::vector<float> values;  // rows × width
  std::vector<uint32_t> ids;  // rows × ids_per_row
};

class Mailbox {
 public:
  // The mailbox of client entry `client` of `segment`, which must outlive
  // it. Throws Error when the segment's geometry has none or `client` is out
  // of range.
  Mailbox(const Segment& segment, uint32_t client);

  const MailboxShape& shape() const { return shape_; }

  // Writes a message; returns false without waiting when another writer holds
  // the mailbox. Throws Error when the message exceeds the shape.
  bool publish(uint64_t step, uint32_t layer, uint32_t rows, std::span<const float> values, uint32_t ids_per_row,
               std::span<const uint32_t> ids);

  // The sequence number: even, and advanced by 2 per message.
  uint32_t sequence() const;
  // Copies the latest message if the sequence differs from `seen`; returns the
  // sequence it copied at (retrying while a writer is mid-message), or nullopt
  // when nothing new has been published.
  std::optional<uint32_t> read(uint32_t seen, MailboxMessage& out) const;
  // Sleeps until a message other than `seen` is complete or the timeout passes.
  void wait(uint32_t seen, std::chrono::nanoseconds timeout) const;
  // The sequence as stored: odd while a writer is mid-message.
  uint32_t raw_sequence() const;
  // A writer killed mid-message leaves the sequence odd and every later
  // publish refused; the reader, having seen `odd` for long enough, ends that
  // message as empty. False when the sequence has moved on.
  bool recover_dead_writer(uint32_t odd);

 private:
  std::atomic<uint32_t>& bell_;
  MailboxHeader& header_;
  std::atomic<uint32_t>* values_;
  std::atomic<uint32_t>* ids_;
  MailboxShape shape_;
};

// Every publish rings the segment's bell, so a reader serving all mailboxes
// sleeps on one word: the value to wait past, then the wait (returns at once
// when the bell has moved past `seen`).
uint32_t mailbox_bell(const Segment& segment);
void wait_for_mailboxes(const Segment& segment, uint32_t seen, std::chrono::nanoseconds timeout);

}  // namespace sluice::shm
