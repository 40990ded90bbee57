// router/lookahead.h: both ends of lookahead over the cache segment's
// mailboxes (one per client entry). The Publisher is what a compute client
// calls per MoE layer, in its own mailbox; the Lookahead reads every mailbox,
// guesses the next MoE layer's experts of each client, hands them to a
// prefetch sink and scores earlier guesses against that client's real
// routing in the segment's stats block. Neither can change what the model
// computes.
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

// How many MoE layers past the published one the router guesses, to start
// reads earlier than the engine's own hold of the next layer (SLUICE_HOLD).
// One by default: guessing two ahead measured no faster on OLMoE-1B-7B at
// the floor (the disk is saturated) and at one working set above it (the
// guesses find few cold slots to fill).
inline constexpr uint32_t kDefaultLayersAhead = 1;
inline constexpr uint32_t kMaxLayersAhead = 8;

// From SLUICE_LOOKAHEAD_LAYERS (unset: kDefaultLayersAhead). Throws Error on
// anything but an integer from 1 to kMaxLayersAhead.
uint32_t layers_ahead_from_environment();

// The compute client's side: numbers forward calls and publishes each MoE
// layer's input and real routing while a router serves the segment. Decode
// steps always, batched ones too (one row per sequence; the first rows the
// mailbox holds when it holds fewer); chunks of several tokens of one
// sequence only with `prefill`, since lookahead evicted a chunk's records
// before use (bench decode, and the reference engine).
class Publisher {
 public:
  // `segment` must outlive the publisher and have mailboxes; `client` is
  // this process's client entry (shm::Client::id()), whose mailbox it writes.
  Publisher(const shm::Segment& segment, uint32_t client, bool prefill);
  // `input` is rows × hidden, `experts` rows × experts_per_row (routing order);
  // `decode`: each row is one sequence's decode token (Transformer::last_call_decodes).
  // The publisher never waits (a message is dropped if the mailbox is held).
  void publish(uint32_t layer, uint32_t rows, bool decode, std::span<const float> input,
               uint32_t experts_per_row, std::span<const uint32_t> experts);

 private:
  const shm::Segment& segment_;
  shm::Mailbox mailbox_;
  bool prefill_;
  uint64_t step_ = 0;
  uint32_t last_layer_ = 0;
  bool started_ = false;
};

// Called with a guess: a coming MoE layer and its experts (distinct, best
// first; for several rows, their guesses ranked together by rank_union),
// nearest layer first.
using PrefetchSink = std::function<void(uint32_t layer, std::span<const uint32_t> experts)>;

// The union of several rows' guesses (each distinct, best first), best
// first: an expert scores k − rank in each row that guesses it (k the
// longest guess), so one that more rows want, or wants sooner, is read
// first; ties go to the better single rank, then the lower id.
std::vector<uint32_t> rank_union(std::span<const std::vector<uint32_t>> guesses);

class Lookahead {
 public:
  // `k` experts per token (>0) of each of the `layers_ahead` MoE layers
  // after a published one (1 to kMaxLayersAhead). `predictor` and `segment`
  // must outlive it. Registers this process as the segment's router until
  // destroyed.
  Lookahead(const Predictor& predictor, const shm::Segment& segment, uint32_t k, PrefetchSink sink,
            uint32_t layers_ahead);
  ~Lookahead();
  Lookahead(const Lookahead&) = delete;
  Lookahead& operator=(const Lookahead&) = delete;

  // Handles the newest message of every mailbox, waiting up to `wait` for
  // one; true if it handled any.
  bool poll(std::chrono::nanoseconds wait);
  // Runs poll in a thread of its own until stop() (embedded mode). A sink
  // that throws stops the thread and is reported by stop().
  void start();
  void stop();

 private:
  // One client entry's mailbox and what the router remembers of it.
  struct Box {
    explicit Box(const shm::Segment& segment, uint32_t client) : mailbox(segment, client), client(client) {}
    shm::Mailbox mailbox;
    uint32_t client;
    uint32_t seen = 0;
    // The guesses made for (pending_step, pending_layer), the next MoE
    // layer, one per row; guesses further ahead are sent, not scored.
    bool pending = false;
    uint64_t pending_step = 0;
    uint32_t pending_layer = 0;
    std::vector<std::vector<uint32_t>> guesses;
    std::optional<std::chrono::steady_clock::time_point> stuck_since;
    uint32_t stuck_odd = 0;
  };
  bool poll_box(Box& box);
  void handle(Box& box, const shm::MailboxMessage& message);
  // `layer`'s guess for every row of `message`, kept in `rows`; the rows'
  // union (rank_union) when there are several.
  std::vector<uint32_t> guess(uint32_t layer, const shm::MailboxMessage& message,
                              std::vector<std::vector<uint32_t>>& rows) const;
  // Hands a guess to the sink and counts it.
  void send(const Box& box, uint32_t layer, const std::vector<uint32_t>& experts);
  // A sequence left odd this long belongs to a writer that died mid-message.
  static constexpr std::chrono::seconds kDeadWriterAfter{1};
  void recover_if_stuck(Box& box);
  void score(const Box& box, const shm::MailboxMessage& message);

  const Predictor& predictor_;
  const shm::Segment& segment_;
  std::vector<Box> boxes_;
  shm::LookaheadCounters& counters_;
  uint32_t k_;
  uint32_t layers_ahead_;
  PrefetchSink sink_;
  shm::MailboxMessage message_;
  std::vector<std::vector<uint32_t>> further_rows_;  // the rows' guesses past the next layer
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::exception_ptr failure_;
};

}  // namespace sluice::router
