// router/lookahead.cpp: the publisher's step numbering and the router loop.
// Guesses are sent as soon as the message is read; the next layer's is
// scored when its real routing arrives in a later message.
#include "router/lookahead.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

#include "proto/env_count.h"
#include "proto/error.h"

namespace sluice::router {

uint32_t lookahead_from_environment() {
  return count_from_environment("SLUICE_LOOKAHEAD", 0, 4096, "a number of experts (0 turns lookahead off)")
      .value_or(kDefaultLookahead);
}

uint32_t layers_ahead_from_environment() {
  return count_from_environment("SLUICE_LOOKAHEAD_LAYERS", 1, kMaxLayersAhead,
                                fmt::format("a number of MoE layers from 1 to {}", kMaxLayersAhead))
      .value_or(kDefaultLayersAhead);
}

Publisher::Publisher(const shm::Segment& segment, uint32_t client, bool prefill)
    : segment_(segment), mailbox_(segment, client), prefill_(prefill) {}

void Publisher::publish(uint32_t layer, uint32_t rows, bool decode, std::span<const float> input,
                        uint32_t experts_per_row, std::span<const uint32_t> experts) {
  // A new forward call starts when the layer does not advance.
  if (!started_ || layer <= last_layer_) ++step_;
  started_ = true;
  last_layer_ = layer;
  if (rows > 1 && !decode && !prefill_) return;
  if (rows > mailbox_.shape().rows) {
    if (!decode) return;  // a chunk wider than the mailbox: no lookahead for it
    // A batch wider than the mailbox: its first sequences still get guesses.
    rows = mailbox_.shape().rows;
    input = input.first(size_t{rows} * mailbox_.shape().width);
    experts = experts.first(size_t{rows} * experts_per_row);
  }
  // No router serves this segment: nobody would read the message.
  if (segment_.stats().lookahead.router_pid.load(std::memory_order_relaxed) == 0) return;
  mailbox_.publish(step_, layer, rows, input, experts_per_row, experts);
}

std::vector<uint32_t> rank_union(std::span<const std::vector<uint32_t>> guesses) {
  size_t k = 0;
  for (const auto& guess : guesses) k = std::max(k, guess.size());
  struct Candidate {
    uint32_t expert;
    size_t score = 0;
    size_t best_rank = SIZE_MAX;
  };
  std::vector<Candidate> candidates;
  for (const auto& guess : guesses) {
    for (size_t rank = 0; rank < guess.size(); ++rank) {
      auto it = std::find_if(candidates.begin(), candidates.end(),
                             [&](const Candidate& c) { return c.expert == guess[rank]; });
      if (it == candidates.end()) it = candidates.insert(candidates.end(), Candidate{guess[rank]});
      it->score += k - rank;
      it->best_rank = std::min(it->best_rank, rank);
    }
  }
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    if (a.score != b.score) return a.score > b.score;
    if (a.best_rank != b.best_rank) return a.best_rank < b.best_rank;
    return a.expert < b.expert;
  });
  std::vector<uint32_t> ranked;
  ranked.reserve(candidates.size());
  for (const Candidate& c : candidates) ranked.push_back(c.expert);
  return ranked;
}

Lookahead::Lookahead(const Predictor& predictor, const shm::Segment& segment, uint32_t k, PrefetchSink sink,
                     uint32_t layers_ahead)
    : predictor_(predictor),
      segment_(segment),
      counters_(segment.stats().lookahead),
      k_(k),
      layers_ahead_(layers_ahead),
      sink_(std::move(sink)) {
  if (k_ == 0) fail("router: lookahead of 0 experts (use no router instead)");
  if (layers_ahead_ == 0 || layers_ahead_ > kMaxLayersAhead) {
    fail("router: lookahead of {} layers ahead (expected 1 to {})", layers_ahead_, kMaxLayersAhead);
  }
  const uint32_t width = shm::Mailbox(segment, 0).shape().width;
  if (width != predictor_.hidden()) {
    fail("router: the segment's mailbox holds rows of {} values, the model's hidden size is {}", width,
         predictor_.hidden());
  }
  boxes_.reserve(segment.geometry().max_clients);
  for (uint32_t c = 0; c < segment.geometry().max_clients; ++c) {
    Box& box = boxes_.emplace_back(segment, c);
    box.seen = box.mailbox.sequence();
  }
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
  // The bell is read before the mailboxes: a message landing after the scan
  // has moved it, so the wait below returns at once.
  const uint32_t bell = shm::mailbox_bell(segment_);
  bool handled = false;
  for (Box& box : boxes_) handled = poll_box(box) || handled;
  if (handled || wait.count() <= 0) return handled;
  shm::wait_for_mailboxes(segment_, bell, wait);
  for (Box& box : boxes_) handled = poll_box(box) || handled;
  return handled;
}

bool Lookahead::poll_box(Box& box) {
  const std::optional<uint32_t> sequence = box.mailbox.read(box.seen, message_);
  if (!sequence) {
    recover_if_stuck(box);
    return false;
  }
  box.stuck_since.reset();
  const uint64_t skipped = box.seen == 0 ? 0 : (*sequence - box.seen) / 2 - 1;
  box.seen = *sequence;
  handle(box, message_);
  counters_.messages.fetch_add(1, std::memory_order_relaxed);
  counters_.skipped.fetch_add(skipped, std::memory_order_relaxed);
  segment_.client(box.client).lookahead_messages.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void Lookahead::recover_if_stuck(Box& box) {
  const uint32_t raw = box.mailbox.raw_sequence();
  if ((raw & 1) == 0) {
    box.stuck_since.reset();
    return;
  }
  const auto now = std::chrono::steady_clock::now();
  if (!box.stuck_since || box.stuck_odd != raw) {
    box.stuck_since = now;
    box.stuck_odd = raw;
  } else if (now - *box.stuck_since > kDeadWriterAfter) {
    box.mailbox.recover_dead_writer(raw);
    box.stuck_since.reset();
  }
}

void Lookahead::handle(Box& box, const shm::MailboxMessage& message) {
  score(box, message);
  box.pending = false;
  const std::optional<uint32_t> next = predictor_.next_moe_layer(message.layer);
  if (!next) return;
  // The next layer's guesses stay in the box until its routing scores them.
  box.pending = true;
  box.pending_step = message.step;
  box.pending_layer = *next;
  send(box, *next, guess(*next, message, box.guesses));
  // Layers further on are guessed from the same input (the residual stream
  // changes little from one layer to the next), and never scored.
  std::optional<uint32_t> later = predictor_.next_moe_layer(*next);
  for (uint32_t ahead = 2; later && ahead <= layers_ahead_; ++ahead, later = predictor_.next_moe_layer(*later))
    send(box, *later, guess(*later, message, further_rows_));
}

std::vector<uint32_t> Lookahead::guess(uint32_t layer, const shm::MailboxMessage& message,
                                       std::vector<std::vector<uint32_t>>& rows) const {
  const uint32_t hidden = predictor_.hidden();
  rows.resize(message.rows);
  for (uint32_t r = 0; r < message.rows; ++r)
    rows[r] = predictor_.predict(layer, std::span<const float>(&message.values[size_t{r} * hidden], hidden), k_);
  return message.rows == 1 ? rows[0] : rank_union(rows);
}

void Lookahead::send(const Box& box, uint32_t layer, const std::vector<uint32_t>& experts) {
  sink_(layer, experts);
  counters_.prefetches.fetch_add(1, std::memory_order_relaxed);
  counters_.prefetched.fetch_add(experts.size(), std::memory_order_relaxed);
  segment_.client(box.client).lookahead_guesses.fetch_add(experts.size(), std::memory_order_relaxed);
}

void Lookahead::score(const Box& box, const shm::MailboxMessage& message) {
  if (!box.pending || box.pending_step != message.step || box.pending_layer != message.layer ||
      box.guesses.size() != message.rows || message.ids_per_row == 0 || message.layer >= shm::kStatLayers) {
    return;
  }
  shm::GuessCounters& layer = counters_.layers[message.layer];
  for (uint32_t r = 0; r < message.rows; ++r) {
    const std::vector<uint32_t>& guess = box.guesses[r];
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
