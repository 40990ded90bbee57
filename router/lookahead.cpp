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
Publisher::Publisher(Mailbox& mailbox, bool prefill)
    : mailbox_(mailbox), prefill_(prefill), step_(uint64_t(::getpid()) << 40) {}

void Publisher::publish(uint32_t layer, uint32_t rows, std::span<const float> input, uint32_t experts_per_row,
                        std::span<const uint32_t> experts) {
  // A new forward call starts when the layer does not advance.
  if (!started_ || layer <= last_layer_) ++step_;
  started_ = true;
  last_layer_ = layer;
  if (rows > 1 && !prefill_) return;
  if (rows > mailbox_.geometry().max_rows) return;  // a chunk wider than the mailbox: no lookahead for it
  if (mailbox_.publish(step_, layer, rows, input, experts_per_row, experts)) {
    ++published_;
  } else {
    ++busy_;
  }
}

Lookahead::Lookahead(const Predictor& predictor, Mailbox& mailbox, uint32_t k, PrefetchSink sink)
    : predictor_(predictor), mailbox_(mailbox), k_(k), sink_(std::move(sink)) {
  if (k_ == 0) fail("router: lookahead of 0 experts (use no router instead)");
  if (mailbox_.geometry().hidden != predictor_.hidden()) {
    fail("router: mailbox hidden size {} differs from the model's {}", mailbox_.geometry().hidden, predictor_.hidden());
  }
  seen_ = mailbox_.sequence();
}

Lookahead::~Lookahead() {
  stopping_ = true;
  if (thread_.joinable()) thread_.join();
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
  handle(message_, *sequence);
  mailbox_.count_router(1, skipped, 0, 0);
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

void Lookahead::handle(const MailboxMessage& message, uint32_t) {
  score(message);
  pending_ = false;
  const std::optional<uint32_t> next = predictor_.next_moe_layer(message.layer);
  if (!next || message.layer >= predictor_.layer_count()) return;
  const uint32_t hidden = predictor_.hidden();
  guesses_.resize(message.rows);
  merged_.clear();
  for (uint32_t r = 0; r < message.rows; ++r) {
    guesses_[r] = predictor_.predict(*next, std::span<const float>(&message.hidden[size_t{r} * hidden], hidden), k_);
    for (uint32_t e : guesses_[r]) {
      if (std::find(merged_.begin(), merged_.end(), e) == merged_.end()) merged_.push_back(e);
    }
  }
  pending_ = true;
  pending_step_ = message.step;
  pending_layer_ = *next;
  sink_(*next, merged_);
  mailbox_.count_router(0, 0, 1, merged_.size());
}

void Lookahead::score(const MailboxMessage& message) {
  if (!pending_ || pending_step_ != message.step || pending_layer_ != message.layer ||
      guesses_.size() != message.rows || message.experts_per_row == 0) {
    return;
  }
  for (uint32_t r = 0; r < message.rows; ++r) {
    const std::vector<uint32_t>& guess = guesses_[r];
    const auto real = std::span<const uint32_t>(&message.experts[size_t{r} * message.experts_per_row],
                                                message.experts_per_row);
    const bool rank1 = !guess.empty() && std::find(real.begin(), real.end(), guess[0]) != real.end();
    uint64_t recalled = 0;
    for (uint32_t e : real) recalled += std::find(guess.begin(), guess.end(), e) != guess.end();
    mailbox_.score(message.layer, rank1, recalled, real.size());
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
