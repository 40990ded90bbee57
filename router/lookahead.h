// router/lookahead.h: both ends of lookahead over the cache segment's
// mailbox. The Publisher is what a compute client calls per MoE layer; the
// Lookahead reads the mailbox, guesses the next MoE layer's experts, hands
// them to a prefetch sink and scores earlier guesses against the real routing
// in the segment's stats block. Neither can change what the model computes.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "router/predictor.h"
#include "shm/mailbox.h"
#include "shm/segment.h"

namespace sluice::router {

inline constexpr uint32_t kDefaultLookahead = 6;

// K from SLUICE_LOOKAHEAD (unset: kDefaultLookahead; 0: off). Throws Error on
// anything but a non-negative integer.
uint32_t lookahead_from_environment();

// The compute client's side: numbers forward calls and publishes each MoE
// layer's input and real routing while a router serves the segment. Decode
// steps (one token) always; chunks of several tokens only with `prefill`,
// since lookahead evicted a chunk's records before use (bench decode, and the
// reference engine).
class Publisher {
 public:
  // `segment` must outlive the publisher and have a mailbox.
  Publisher(const shm::Segment& segment, bool prefill);
  // `input` is rows × hidden, `experts` rows × experts_per_row (routing order).
  // A message another client is writing at that moment is dropped: the
  // publisher never waits.
  void publish(uint32_t layer, uint32_t rows, std::span<const float> input, uint32_t experts_per_row,
               std::span<const uint32_t> experts);

 private:
  const shm::Segment& segment_;
  shm::Mailbox mailbox_;
  bool prefill_;
  uint64_t step_ = 0;
  uint32_t last_layer_ = 0;
  bool started_ = false;
};

// Called with a guess: the next MoE layer and its experts (distinct, best first).
using PrefetchSink = std::function<void(uint32_t layer, std::span<const uint32_t> experts)>;

class Lookahead {
 public:
  // `k` experts per token (>0). `predictor` and `segment` must outlive it.
  // Registers this process as the segment's router until destroyed.
  Lookahead(const Predictor& predictor, const shm::Segment& segment, uint32_t k, PrefetchSink sink);
  ~Lookahead();
  Lookahead(const Lookahead&) = delete;
  Lookahead& operator=(const Lookahead&) = delete;

  // Handles the newest message, waiting up to `wait` for one; true if it did.
  bool poll(std::chrono::nanoseconds wait);
  // Runs poll in a thread of its own until stop() (embedded mode). A sink
  // that throws stops the thread and is reported by stop().
  void start();
  void stop();

 private:
  void handle(const shm::MailboxMessage& message);
  // A sequence left odd this long belongs to a writer that died mid-message.
  static constexpr std::chrono::seconds kDeadWriterAfter{1};
  void recover_if_stuck();
  void score(const shm::MailboxMessage& message);

  const Predictor& predictor_;
  shm::Mailbox mailbox_;
  shm::LookaheadCounters& counters_;
  uint32_t k_;
  PrefetchSink sink_;
  uint32_t seen_ = 0;
  shm::MailboxMessage message_;
  // The guesses made for (pending_step_, pending_layer_), one per row.
  bool pending_ = false;
  uint64_t pending_step_ = 0;
  uint32_t pending_layer_ = 0;
  std::vector<std::vector<uint32_t>> guesses_;
  std::vector<uint32_t> merged_;
  std::optional<std::chrono::steady_clock::time_point> stuck_since_;
  uint32_t stuck_odd_ = 0;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::exception_ptr failure_;
};

}  // namespace sluice::router
