// compute/serve/job.h: one request as the engine's worker sees it: what to
// generate (JobSpec), what came of it (JobResult), the stream of its output
// (Job, filled by the worker, drained by the HTTP thread), and ReplyStream,
// which turns generated tokens into that stream. Nothing here runs the model.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "compute/chat/reply_parser.h"
#include "compute/chat/token_grammar.h"
#include "compute/model/expert_source.h"
#include "compute/serve/request.h"
#include "compute/serve/stop_filter.h"
#include "compute/tokenizer/tokenizer.h"
#include "compute/vision/prompt_images.h"

namespace sluice::serve {

struct JobSpec {
  std::vector<int32_t> prompt;  // each image's pad expanded to its positions
  // The prompt's images (decoded, not encoded) and where they sit; the
  // worker encodes only those whose positions it has to prefill.
  std::vector<PromptImage> images;
  std::vector<MediaRun> media;
  GenerationSettings settings;
  uint32_t max_tokens = 0;        // already capped by the context left
  std::vector<int32_t> stop_ids;  // besides the model's end-of-sequence ids
  // Chat replies are split by token id into content, reasoning and tool
  // calls; without a format the text is all content.
  std::optional<chat::ReplyFormat> reply_format;
  bool in_reasoning = false;  // the prompt opened <think>
  // The whole reply's constraint (response_format's value, or a required
  // tool call, with end tokens and free reasoning); null: unconstrained.
  std::shared_ptr<const chat::TokenGrammar> grammar;
  // True once the client has gone; checked before the job starts and after
  // every token, so a disconnect ends the generation within one token.
  std::function<bool()> client_gone;
};

struct JobResult {
  std::string finish_reason;  // "stop", "length", "tool_calls" or "cancelled"
  std::string stop_sequence;  // the stop string that ended it ("stop"); else empty
  uint32_t prompt_tokens = 0;
  uint32_t cached_tokens = 0;  // prompt tokens reused from an earlier request
  uint32_t completion_tokens = 0;
  uint32_t reasoning_tokens = 0;  // generated tokens that wrote reasoning
  bool tool_calls = false;        // the reply holds a tool call
  double prefill_seconds = 0;
  double decode_seconds = 0;
  // The engine's counters over the request's time (shared with the requests
  // decoded alongside it).
  ExpertSourceStats experts;
};

class Job {
 public:
  struct Event {
    enum class Kind { kText, kReasoning, kToolCall, kToolArguments, kDone, kError };
    Event(Kind kind, std::string text = {}, size_t tool_index = 0, std::string id = {},
          std::string name = {})
        : kind(kind),
          text(std::move(text)),
          tool_index(tool_index),
          id(std::move(id)),
          name(std::move(name)) {}
    Kind kind;
    // kText: released content; kReasoning: reasoning; kToolArguments: a
    // piece of a call's arguments; kError: the message.
    std::string text;
    size_t tool_index;     // kToolCall, kToolArguments
    std::string id, name;  // kToolCall: announced once, before its arguments
  };

  explicit Job(JobSpec spec) : spec_(std::move(spec)) {}

  // Blocks until the worker has something for this job.
  Event next();
  // Valid once next() returned kDone.
  const JobResult& result() const { return result_; }
  // Asks the worker to end this job after its current token (the client can
  // no longer be written to). The job still ends with kDone or kError.
  void cancel() { cancelled_ = true; }

  // The worker's side.
  void push(Event event);
  const JobSpec& spec() const { return spec_; }
  JobResult& result() { return result_; }
  bool cancelled() const { return cancelled_ || (spec_.client_gone && spec_.client_gone()); }

 private:
  JobSpec spec_;
  JobResult result_;
  std::atomic<bool> cancelled_ = false;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<Event> events_;
};

// A reply on its way to its job: decoded (or parsed by token id into
// content, reasoning and tool calls), with stop strings cut from the content.
class ReplyStream {
 public:
  ReplyStream(Job& job, const tokenizer::Tokenizer& tokenizer);
  // A generated token other than an end token.
  void push(int32_t token);
  // Flushes what is held back (nothing after a stop string).
  void finish();
  bool stopped() const { return filter_.stopped(); }
  const std::string& stop_string() const { return filter_.matched(); }

 private:
  void content(const std::string& text);
  void send(Job::Event::Kind kind, const std::string& text);
  void deliver();

  Job& job_;
  tokenizer::StreamingDecoder decoder_;
  std::optional<chat::ReplyParser> parser_;
  std::vector<chat::ReplyEvent> events_;
  StopFilter filter_;
};

}  // namespace sluice::serve
