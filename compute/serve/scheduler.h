// compute/serve/scheduler.h: the one thread that owns the engine. Requests
// wait in a bounded queue; up to `parallel` of them generate at once, each in
// its own sequence slot, decoded together one token per step (each MoE layer
// reads the union of their experts once). A slot keeps its sequence between
// requests, and a snapshot of its last prompt's end, so a prompt that extends
// either prefills only its new tokens. Only this thread touches the engine.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string_view>
#include <thread>
#include <vector>

#include "compute/model/engine.h"
#include "compute/model/routing_tap.h"
#include "compute/serve/job.h"
#include "compute/serve/metrics.h"
#include "compute/tokenizer/tokenizer.h"

namespace sluice::serve {

struct SchedulerOptions {
  size_t queue_limit = 16;      // requests waiting for a slot; more get 429
  uint32_t parallel = 1;        // requests generating at once (sequence slots)
  uint32_t prefill_chunk = 64;  // as --chunk: tokens whose experts are read once together
  RoutingOptions routing;
};

class Scheduler {
 public:
  Scheduler(Engine& engine, const tokenizer::Tokenizer& tokenizer, Metrics& metrics,
            const SchedulerOptions& options);
  ~Scheduler();  // stop() and join
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a generation. Throws ApiError 429 when the queue is full and 503
  // once stopping.
  std::shared_ptr<Job> submit(JobSpec spec);
  // Ends the running generations after their current token, fails the
  // queued ones, and stops the worker.
  void stop();
  // The seconds a refused client should wait: about one request's time.
  int retry_after_seconds() const;

 private:
  struct Generation;
  struct Slot;

  void work();
  // Prefills `job` in `slot` and samples its first token.
  void start(Slot& slot, std::shared_ptr<Job> job);
  // One decode step of every generating slot.
  void step();
  // Samples the slot's next token from `logits` and sends its text; false
  // once the generation is over.
  bool advance(Slot& slot, std::span<const float> logits);
  // Ends the slot's generation: its job gets kDone (or kError with
  // `error`), the slot is free again.
  void finish(Slot& slot, const std::string* error = nullptr);
  // The free slot the job's prompt reuses most of (its sequence or its
  // prompt snapshot, with the same images), else the free slot used longest ago.
  Slot& pick_slot(const JobSpec& spec);
  // Prepares the slot's sequence for the job's prompt; returns the tokens reused.
  size_t reuse(Slot& slot, const JobSpec& spec);
  // Runs `tokens` on `sequence`; `media_rows` are the input embeddings of
  // its media pads; `step_name` names it in errors.
  void forward(SequenceState& sequence, std::span<const int32_t> tokens, std::span<float> logits,
               std::string_view step_name, std::span<const float> media_rows = {});
  void record_routing();
  void publish_experts();
  bool stopping() const;
  size_t busy_slots() const;

  Engine& engine_;
  const tokenizer::Tokenizer& tokenizer_;
  Metrics& metrics_;
  size_t queue_limit_;
  uint32_t prefill_chunk_;
  std::unique_ptr<RoutingSession> routing_;
  std::shared_ptr<const chat::TokenTrie> trie_;  // built at the first constrained request
  std::unique_ptr<ImageEncoder> images_;         // made at the first image to encode
  std::vector<std::unique_ptr<Slot>> slots_;
  std::vector<float> logits_;  // one vocabulary row per slot
  uint64_t clock_ = 0;         // counts starts, for "used longest ago"

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool stopping_ = false;
  size_t running_ = 0;
  double last_request_seconds_ = 1;
  std::thread worker_;
};

}  // namespace sluice::serve
