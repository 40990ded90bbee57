// compute/serve/scheduler.h: the one thread that owns the engine. Requests
// wait in a bounded queue and run one at a time; the sequence state and its
// token ids stay between requests, so a prompt that extends them prefills
// only the new tokens (a snapshot of the last prompt's end serves the next
// turn of a conversation). Only this thread touches the engine.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "compute/chat/json_constraint.h"
#include "compute/chat/reply_parser.h"
#include "compute/model/engine.h"
#include "compute/model/routing_tap.h"
#include "compute/serve/metrics.h"
#include "compute/serve/request.h"
#include "compute/tokenizer/tokenizer.h"

namespace sluice::serve {

struct JobSpec {
  std::vector<int32_t> prompt;
  GenerationSettings settings;
  uint32_t max_tokens = 0;        // already capped by the context left
  std::vector<int32_t> stop_ids;  // besides the model's end-of-sequence ids
  // Chat replies are split by token id into content, reasoning and tool
  // calls; without a format the text is all content.
  std::optional<chat::ReplyFormat> reply_format;
  bool in_reasoning = false;  // the prompt opened <think>
  // response_format: the content is constrained to one value of it.
  std::shared_ptr<const chat::JsonGrammar> grammar;
  // True once the client has gone; checked before the job starts and after
  // every token, so a disconnect ends the generation within one token.
  std::function<bool()> client_gone;
};

struct JobResult {
  std::string finish_reason;  // "stop", "length", or "cancelled"
  uint32_t prompt_tokens = 0;
  uint32_t cached_tokens = 0;  // prompt tokens reused from the previous request
  uint32_t completion_tokens = 0;
  uint32_t reasoning_tokens = 0;  // generated tokens that wrote reasoning
  bool tool_calls = false;        // the reply holds a tool call (finish_reason "tool_calls")
  double prefill_seconds = 0;
  double decode_seconds = 0;
  ExpertSourceStats experts;  // this request's share of the engine's counters
};

// One request's stream of output, filled by the worker and drained by the
// HTTP thread that submitted it.
class Job {
 public:
  struct Event {
    enum class Kind { kText, kReasoning, kToolCall, kToolArguments, kDone, kError } kind;
    // kText: released content; kReasoning: reasoning; kToolArguments: a
    // piece of a call's arguments; kError: the message.
    std::string text;
    size_t tool_index = 0;   // kToolCall, kToolArguments
    std::string id, name;    // kToolCall: announced once, before its arguments
  };
  // Blocks until the worker has something for this job.
  Event next();
  // Valid once next() returned kDone.
  const JobResult& result() const { return result_; }
  // Asks the worker to end this job after its current token (the client can
  // no longer be written to). The job still ends with kDone or kError.
  void cancel() { cancelled_ = true; }
  // The worker's side: queues an event for next().
  void push(Event event);

 private:
  friend class Scheduler;

  JobSpec spec_;
  JobResult result_;
  std::atomic<bool> cancelled_ = false;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<Event> events_;
};

struct SchedulerOptions {
  size_t queue_limit = 16;      // requests waiting beyond the running one; more get 429
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
  // Ends the running generation after its current token, fails the queued
  // ones, and stops the worker.
  void stop();
  // The seconds a refused client should wait: about one request's time.
  int retry_after_seconds() const;

 private:
  void work();
  void run(Job& job);
  // The part of `prompt` the engine must still prefill, resetting the
  // sequence when the prompt does not extend the tokens it holds.
  size_t reusable_prefix(const std::vector<int32_t>& prompt);
  void publish_experts();
  void forget_sequence();
  bool cancelled(const Job& job) const;
  // Runs `tokens` at the end of the sequence; `step` names it in errors.
  void forward(std::span<const int32_t> tokens, std::span<float> logits, std::string_view step);

  Engine& engine_;
  const tokenizer::Tokenizer& tokenizer_;
  Metrics& metrics_;
  size_t queue_limit_;
  uint32_t prefill_chunk_;
  std::shared_ptr<const chat::TokenTrie> trie_;  // built at the first constrained request
  std::unique_ptr<RoutingSession> routing_;
  // The engine's sequence as it was at the end of the last prompt.
  std::optional<SequenceSnapshot> prompt_snapshot_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool stopping_ = false;
  bool running_ = false;
  double last_request_seconds_ = 1;
  std::thread worker_;
};

}  // namespace sluice::serve
