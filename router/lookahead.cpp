// router/lookahead.cpp: the publisher's step numbering and the router loop.
// A guess is sent as soon as the message is read; scoring happens when the
// real routing of the guessed layer arrives in a later message.
#include "router/lookahead.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <utility>

#include <unistd.h>

#include "proto/error.h"

namespace sluice::router {

uint32_t lookahead_from_environment() {
  const char* value = std::getenv("SLUICE_LOOKAHEAD");
  if (value == nullptr || *value == '\0') return kDefaultLookahead;
  uint32_t k = 0;
  const char* end = value + std::strlen(value);
  const auto [ptr, error] = std::from_chars(value, end, k);
  if (error != std::errc() || ptr != end || k > 4096) {
    fail("SLUICE_LOOKAHEAD='{}': expected a number of experts (0 turns lookahead off)", value);
  }
  return k;
}

// Steps carry the writer's pid above bit 40, so the router never scores one
// client's guess against another client's routing when several share a mailbox.
Publisher::Publisher(const shm::Segment& segment, bool prefill)
    : segment_(segment), mailbox_(segment), prefill_(prefill), step_(uint64_t(::getpid()) << 40) {}

void Publisher::publish(uint32_t layer, uint32_t rows, std::span<const float> input, uint32_t experts_per_row,
                        std::span<const uint32_t> experts) {
  // A new forward call starts when the layer does not advance.
  if (!started_ || layer <= last_layer_) ++step_;
  started_ = true;
  last_layer_ = layer;
  if (rows > 1 && !prefill_) return;
  if (rows > mailbox_.shape().rows) return;  // a chunk wider than the mailbox: no lookahead for it
  // No router serves this segment: nobody would read the message.
  if (segment_.stats().lookahead.router_pid.load(std::memory_order_relaxed) == 0) return;
  mailbox_.publish(step_, layer, rows, input, experts_per_row, experts);
}

Lookahead::Lookahead(const Predictor& predictor, const shm::Segment& segment, uint32_t k, PrefetchSink sink)
    : predictor_(predictor),
      mailbox_(segment),
      counters_(segment.stats().lookahead),
      k_(k),
      sink_(std::move(sink)) {
  if (k_ == 0) fail("router: lookahead of 0 experts (use no router instead)");
  if (mailbox_.shape().width != predictor_.hidden()) {
    fail("router: the segment's mailbox holds rows of {} values, the model's hidden size is {}",
         mailbox_.shape().width, predictor_.hidden());
  }
  seen_ = mailbox_.sequence();
  counters_.k.store(k_, std::memory_order_relaxed);
  counters_.router_pid.store(::getpid(), std::memory_order_relaxed);
}

Lookahead::~Lookahead() {
  stopping_ = true;
  if (thread_.joinable()) thread_.join();
  int32_t mine = ::getpid();
  counters_.router_pid.compare_exchange_strong(mine, 0, std::memory_order_relaxed);
}

bool Lookahead::poll(std::chrono::nanoseconds wait) {
  std::optional<uint32_t> sequence = mailbox_.read(seen_, message_);
  if (!sequence && wait.count() > 0) {
    mailbox_.wait(seen_, wait);
    sequence = mailbox_.read(seen_, message_);
  }
  if (!sequence) {
    recover_if_stuck();
    return false;
  }
  stuck_since_.reset();
  const uint64_t skipped = seen_ == 0 ? 0 : (*sequence - seen_) / 2 - 1;
  seen_ = *sequence;
  handle(message_);
  counters_.messages.fetch_add(1, std::memory_order_relaxed);
  counters_.skipped.fetch_add(skipped, std::memory_order_relaxed);
  return true;
}

void Lookahead::recover_if_stuck() {
  const uint32_t raw = mailbox_.raw_sequence();
  if ((raw & 1) == 0) {
    stuck_since_.reset();
    return;
  }
  const auto now = std::chrono::steady_clock::now();
  if (!stuck_since_ || stuck_odd_ != raw) {
    stuck_since_ = now;
    stuck_odd_ = raw;
  } else if (now - *stuck_since_ > kDeadWriterAfter) {
    mailbox_.recover_dead_writer(raw);
    stuck_since_.reset();
  }
}

void Lookahead::handle(const shm::MailboxMessage& message) {
  score(message);
  pending_ = false;
  const std::optional<uint32_t> next = predictor_.next_moe_layer(message.layer);
  if (!next) return;
  const uint32_t hidden = predictor_.hidden();
  guesses_.resize(message.rows);
  merged_.clear();
  for (uint32_t r = 0; r < message.rows; ++r) {
    guesses_[r] = predictor_.predict(*next, std::span<const float>(&message.values[size_t{r} * hidden], hidden), k_);
    for (uint32_t e : guesses_[r]) {
      if (std::find(merged_.begin(), merged_.end(), e) == merged_.end()) merged_.push_back(e);
    }
  }
  pending_ = true;
  pending_step_ = message.step;
  pending_layer_ = *next;
  sink_(*next, merged_);
  counters_.prefetches.fetch_add(1, std::memory_order_relaxed);
  counters_.prefetched.fetch_add(merged_.size(), std::memory_order_relaxed);
}

void Lookahead::score(const shm::MailboxMessage& message) {
  if (!pending_ || pending_step_ != message.step || pending_layer_ != message.layer ||
      guesses_.size() != message.rows || message.ids_per_row == 0 || message.layer >= shm::kStatLayers) {
    return;
  }
  shm::GuessCounters& layer = counters_.layers[message.layer];
  for (uint32_t r = 0; r < message.rows; ++r) {
    const std::vector<uint32_t>& guess = guesses_[r];
    const auto real =
        std::span<const uint32_t>(&message.ids[size_t{r} * message.ids_per_row], message.ids_per_row);
    const bool rank1 = !guess.empty() && std::find(real.begin(), real.end(), guess[0]) != real.end();
    uint64_t recalled = 0;
    for (uint32_t e : real) recalled += std::find(guess.begin(), guess.end(), e) != guess.end();
    layer.scored.fetch_add(1, std::memory_order_relaxed);
    if (rank1) layer.rank1_hits.fetch_add(1, std::memory_order_relaxed);
    layer.recalled.fetch_add(recalled, std::memory_order_relaxed);
    layer.real.fetch_add(real.size(), std::memory_order_relaxed);
  }
}

void Lookahead::start() {
  if (thread_.joinable()) fail("router: lookahead thread already running");
  stopping_ = false;
  thread_ = std::thread([this] {
    try {
      while (!stopping_.load(std::memory_order_relaxed)) poll(std::chrono::milliseconds(20));
    } catch (...) {
      failure_ = std::current_exception();
    }
  });
}

void Lookahead::stop() {
  stopping_ = true;
  if (thread_.joinable()) thread_.join();
  if (failure_) std::rethrow_exception(std::exchange(failure_, nullptr));
}

}  // namespace sluice::router
