// shm/mailbox.cpp: the seqlock. Payload words are relaxed atomics so a reader
// racing a writer is defined behaviour; the sequence check throws torn copies
// away. Every size read back from the segment is checked against the shape.
#include "shm/mailbox.h"

#include <bit>

#include "proto/error.h"
#include "shm/futex.h"

namespace sluice::shm {

Mailbox::Mailbox(const Segment& segment, uint32_t client)
    : bell_(segment.header().mailbox_bell),
      header_(segment.mailbox_header(client)),
      values_(segment.mailbox_words(client)),
      ids_(values_ + size_t{segment.geometry().mailbox_rows} * segment.geometry().mailbox_width),
      shape_{segment.geometry().mailbox_width, segment.geometry().mailbox_rows, segment.geometry().mailbox_ids} {}

bool Mailbox::publish(uint64_t step, uint32_t layer, uint32_t rows, std::span<const float> values,
                      uint32_t ids_per_row, std::span<const uint32_t> ids) {
  if (rows == 0 || rows > shape_.rows || ids_per_row > shape_.ids || values.size() != size_t{rows} * shape_.width ||
      ids.size() != size_t{rows} * ids_per_row) {
    fail("mailbox: message of {} rows, {} values, {}×{} ids does not fit width {}, rows ≤ {}, ids ≤ {}", rows,
         values.size(), rows, ids_per_row, shape_.width, shape_.rows, shape_.ids);
  }
  uint32_t seq = header_.seq.load(std::memory_order_relaxed);
  if ((seq & 1) != 0 || !header_.seq.compare_exchange_strong(seq, seq + 1, std::memory_order_acquire)) return false;
  std::atomic_thread_fence(std::memory_order_release);
  header_.step.store(step, std::memory_order_relaxed);
  header_.layer.store(layer, std::memory_order_relaxed);
  header_.rows.store(rows, std::memory_order_relaxed);
  header_.ids_per_row.store(ids_per_row, std::memory_order_relaxed);
  for (size_t i = 0; i < values.size(); ++i) {
    values_[i].store(std::bit_cast<uint32_t>(values[i]), std::memory_order_relaxed);
  }
  for (size_t i = 0; i < ids.size(); ++i) ids_[i].store(ids[i], std::memory_order_relaxed);
  header_.seq.store(seq + 2, std::memory_order_release);
  futex_wake_all(header_.seq);
  futex_bump(bell_);
  return true;
}

uint32_t Mailbox::sequence() const { return header_.seq.load(std::memory_order_acquire) & ~1u; }

uint32_t Mailbox::raw_sequence() const { return header_.seq.load(std::memory_order_acquire); }

std::optional<uint32_t> Mailbox::read(uint32_t seen, MailboxMessage& out) const {
  // A writer finishes a message in microseconds; one that stays odd for this
  // many tries has died mid-message (recover_dead_writer() fixes that).
  for (int spins = 0; spins < 100000; ++spins) {
    const uint32_t before = header_.seq.load(std::memory_order_acquire);
    if (before == seen || before == 0) return std::nullopt;
    if ((before & 1) != 0) continue;
    out.step = header_.step.load(std::memory_order_relaxed);
    out.layer = header_.layer.load(std::memory_order_relaxed);
    const uint32_t rows = header_.rows.load(std::memory_order_relaxed);
    const uint32_t per_row = header_.ids_per_row.load(std::memory_order_relaxed);
    const bool sane = rows >= 1 && rows <= shape_.rows && per_row <= shape_.ids;
    if (sane) {
      out.rows = rows;
      out.ids_per_row = per_row;
      out.values.resize(size_t{rows} * shape_.width);
      for (size_t i = 0; i < out.values.size(); ++i) {
        out.values[i] = std::bit_cast<float>(values_[i].load(std::memory_order_relaxed));
      }
      out.ids.resize(size_t{rows} * per_row);
      for (size_t i = 0; i < out.ids.size(); ++i) out.ids[i] = ids_[i].load(std::memory_order_relaxed);
    }
    std::atomic_thread_fence(std::memory_order_acquire);
    if (header_.seq.load(std::memory_order_relaxed) == before) {
      if (!sane) return std::nullopt;  // a scribbled or recovered message: nothing usable
      return before;
    }
  }
  return std::nullopt;
}

bool Mailbox::recover_dead_writer(uint32_t odd) {
  if ((odd & 1) == 0 || header_.seq.load(std::memory_order_acquire) != odd) return false;
  header_.rows.store(0, std::memory_order_relaxed);  // the half-written message reads as nothing
  uint32_t expected = odd;
  if (!header_.seq.compare_exchange_strong(expected, odd + 1, std::memory_order_release)) return false;
  futex_wake_all(header_.seq);
  futex_bump(bell_);
  return true;
}

void Mailbox::wait(uint32_t seen, std::chrono::nanoseconds timeout) const {
  const uint32_t now = header_.seq.load(std::memory_order_acquire);
  if (now != seen && (now & 1) == 0) return;  // a new message is already there
  futex_wait(header_.seq, now, timeout);
}

uint32_t mailbox_bell(const Segment& segment) {
  return segment.header().mailbox_bell.load(std::memory_order_acquire);
}

void wait_for_mailboxes(const Segment& segment, uint32_t seen, std::chrono::nanoseconds timeout) {
  futex_wait(segment.header().mailbox_bell, seen, timeout);
}

}  // namespace sluice::shm
