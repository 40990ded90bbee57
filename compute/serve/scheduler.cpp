// compute/serve/scheduler.cpp: the engine worker: queue, prefix reuse and the
// generation loop. The loop runs the model exactly as Engine::generate does
// (same prefill chunks, same sampler), so greedy output equals `sluice run`
// on the same ids; penalties, stop strings and cancellation are added here.
#include "compute/serve/scheduler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <unordered_map>

#include "compute/serve/api_error.h"
#include "compute/serve/stop_filter.h"
#include "proto/error.h"

namespace sluice::serve {
namespace {

// A prompt's state larger than this is not kept for the next request.
constexpr size_t kMaxSnapshotBytes = size_t{512} << 20;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

ExpertSourceStats difference(const ExpertSourceStats& after, const ExpertSourceStats& before) {
  ExpertSourceStats d = after;
  d.requests -= before.requests;
  d.hits -= before.hits;
  d.reads -= before.reads;
  d.bytes_read -= before.bytes_read;
  d.wait_seconds -= before.wait_seconds;
  return d;
}

// A reply on its way to the job: decoded (or parsed by token id into
// content, reasoning and tool calls), with stop strings cut from the content.
class ReplyStream {
 public:
  ReplyStream(Job& job, const tokenizer::Tokenizer& tokenizer, const JobSpec& spec, JobResult& result)
      : job_(job), decoder_(tokenizer, true), filter_(spec.settings.stop), result_(result) {
    if (spec.reply_format)
      parser_.emplace(tokenizer, *spec.reply_format, chat::ReplyOptions{spec.in_reasoning, 0});
  }

  void push(int32_t token) {
    if (!parser_) {
      content(decoder_.push(token));
      return;
    }
    events_.clear();
    parser_->push(token, events_);
    if (std::any_of(events_.begin(), events_.end(), [](const chat::ReplyEvent& e) {
          return e.kind == chat::ReplyEvent::Kind::kReasoning;
        }))
      ++result_.reasoning_tokens;
    deliver();
  }

  void finish() {
    if (parser_) {
      events_.clear();
      parser_->finish(events_);
      deliver();
    } else {
      content(decoder_.finish());
    }
    send(Job::Event::Kind::kText, filter_.finish());
  }

  bool stopped() const { return filter_.stopped(); }

 private:
  void content(const std::string& text) { send(Job::Event::Kind::kText, filter_.push(text)); }

  void send(Job::Event::Kind kind, const std::string& text) {
    if (!text.empty()) job_.push({kind, text});
  }

  void deliver() {
    for (const auto& e : events_) {
      switch (e.kind) {
        case chat::ReplyEvent::Kind::kContent:
          content(e.text);
          break;
        case chat::ReplyEvent::Kind::kReasoning:
          send(Job::Event::Kind::kReasoning, e.text);
          break;
        case chat::ReplyEvent::Kind::kToolCall:
          result_.tool_calls = true;
          job_.push({Job::Event::Kind::kToolCall, {}, e.tool_index, e.id, e.name});
          break;
        case chat::ReplyEvent::Kind::kToolArguments:
          if (!e.text.empty())
            job_.push({Job::Event::Kind::kToolArguments, e.text, e.tool_index, {}, {}});
          break;
      }
    }
  }

  Job& job_;
  tokenizer::StreamingDecoder decoder_;
  std::optional<chat::ReplyParser> parser_;
  std::vector<chat::ReplyEvent> events_;
  StopFilter filter_;
  JobResult& result_;
};

}  // namespace

Job::Event Job::next() {
  std::unique_lock lock(mutex_);
  ready_.wait(lock, [this] { return !events_.empty(); });
  Event event = std::move(events_.front());
  events_.pop_front();
  return event;
}

void Job::push(Event event) {
  {
    const std::lock_guard lock(mutex_);
    events_.push_back(std::move(event));
  }
  ready_.notify_one();
}

Scheduler::Scheduler(Engine& engine, const tokenizer::Tokenizer& tokenizer, Metrics& metrics,
                     const SchedulerOptions& options)
    : engine_(engine),
      tokenizer_(tokenizer),
      metrics_(metrics),
      queue_limit_(options.queue_limit),
      prefill_chunk_(std::max<uint32_t>(1, options.prefill_chunk)),
      routing_(std::make_unique<RoutingSession>(engine, options.routing)) {
  publish_experts();
  worker_ = std::thread([this] { work(); });
}

Scheduler::~Scheduler() {
  stop();
  if (worker_.joinable()) worker_.join();
  try {
    routing_->finish();
  } catch (const Error&) {
    // The embedded router's failure was already reported by its own thread;
    // nothing is left to generate for.
  }
}

std::shared_ptr<Job> Scheduler::submit(JobSpec spec) {
  auto job = std::make_shared<Job>();
  job->spec_ = std::move(spec);
  {
    const std::lock_guard lock(mutex_);
    if (stopping_) throw ApiError(503, "unavailable_error", "the server is shutting down");
    if (queue_.size() >= queue_limit_) {
      throw ApiError(429, "rate_limit_error",
                     fmt::format("the queue is full ({} requests wait for the engine); retry later",
                                 queue_.size()));
    }
    queue_.push_back(job);
    metrics_.set_queue(queue_.size(), running_);
  }
  wake_.notify_one();
  return job;
}

void Scheduler::stop() {
  std::deque<std::shared_ptr<Job>> dropped;
  {
    const std::lock_guard lock(mutex_);
    stopping_ = true;
    dropped.swap(queue_);
  }
  wake_.notify_one();
  for (auto& job : dropped) job->push({Job::Event::Kind::kError, "the server is shutting down"});
}

int Scheduler::retry_after_seconds() const {
  const std::lock_guard lock(mutex_);
  return std::max(1, static_cast<int>(std::ceil(last_request_seconds_)));
}

void Scheduler::work() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      job = queue_.front();
      queue_.pop_front();
      running_ = true;
      metrics_.set_queue(queue_.size(), true);
    }
    const auto start = std::chrono::steady_clock::now();
    try {
      run(*job);
      const JobResult& r = job->result_;
      metrics_.add_generation({r.finish_reason, r.prompt_tokens, r.cached_tokens,
                               r.completion_tokens, r.prefill_seconds, r.decode_seconds});
      job->push({Job::Event::Kind::kDone, {}});
    } catch (const Error& e) {
      // The sequence state is unknown after a failed forward pass.
      forget_sequence();
      job->push({Job::Event::Kind::kError, e.what()});
    } catch (const std::bad_alloc&) {
      forget_sequence();
      job->push({Job::Event::Kind::kError, "out of memory"});
    }
    publish_experts();
    const std::lock_guard lock(mutex_);
    running_ = false;
    last_request_seconds_ = seconds_since(start);
    metrics_.set_queue(queue_.size(), false);
  }
}

namespace {

bool extends(std::span<const int32_t> prefix, const std::vector<int32_t>& prompt) {
  return !prefix.empty() && prefix.size() < prompt.size() &&
         std::equal(prefix.begin(), prefix.end(), prompt.begin());
}

}  // namespace

size_t Scheduler::reusable_prefix(const std::vector<int32_t>& prompt) {
  // Only an exact extension is reusable: a recurrent family's state (KDA)
  // cannot be rewound, so a shorter common prefix needs a snapshot taken
  // there. The last prompt's end is one: the next turn of a conversation
  // extends it even when the reply re-tokenizes differently.
  SequenceState& sequence = engine_.sequence();
  if (extends(sequence.tokens(), prompt)) return sequence.position();
  if (prompt_snapshot_ && extends(prompt_snapshot_->tokens, prompt)) {
    sequence.restore(*prompt_snapshot_);
    return sequence.position();
  }
  sequence.reset();
  return 0;
}

void Scheduler::forget_sequence() {
  engine_.sequence().reset();
  prompt_snapshot_.reset();
}

void Scheduler::publish_experts() {
  std::optional<shm::GuessStats> guesses;
  if (routing_->runs_router()) guesses = routing_->guesses();
  metrics_.set_experts(engine_.experts().stats(), guesses);
}

bool Scheduler::cancelled(const Job& job) const {
  if (job.cancelled_ || (job.spec_.client_gone && job.spec_.client_gone())) return true;
  const std::lock_guard lock(mutex_);
  return stopping_;
}

void Scheduler::forward(std::span<const int32_t> tokens, std::span<float> logits,
                        std::string_view step) {
  Transformer& model = engine_.transformer();
  model.forward(engine_.sequence(), tokens, logits, false);
  check_logits_finite(logits, step);
  const auto& routing = model.last_routing();
  for (const auto& token_routing : routing)
    for (size_t layer = 0; layer < token_routing.size(); ++layer)
      metrics_.add_routing(layer, token_routing[layer].experts);
}

void Scheduler::run(Job& job) {
  const JobSpec& spec = job.spec_;
  JobResult& result = job.result_;
  if (cancelled(job)) {
    result.finish_reason = "cancelled";
    return;
  }
  const Transformer& model = engine_.transformer();
  SequenceState& sequence = engine_.sequence();
  const ExpertSourceStats before = engine_.experts().stats();
  const size_t reused = reusable_prefix(spec.prompt);
  result.prompt_tokens = static_cast<uint32_t>(spec.prompt.size());
  result.cached_tokens = static_cast<uint32_t>(reused);
  if (spec.prompt.size() - reused > model.context() - sequence.position())
    fail("the prompt is {} tokens, more than the context of {} holds", spec.prompt.size(),
         model.context());

  std::vector<float> logits(engine_.config().vocab);
  auto start = std::chrono::steady_clock::now();
  const std::span<const int32_t> rest = std::span(spec.prompt).subspan(reused);
  for (size_t first = 0; first < rest.size(); first += prefill_chunk_) {
    const size_t count = std::min<size_t>(prefill_chunk_, rest.size() - first);
    forward(
        rest.subspan(first, count), logits,
        fmt::format("prefill of prompt tokens {}..{}", reused + first, reused + first + count - 1));
    if (cancelled(job)) {
      result.finish_reason = "cancelled";
      return;
    }
  }
  result.prefill_seconds = seconds_since(start);
  if (sequence.snapshot_floats(sequence.position()) * sizeof(float) <= kMaxSnapshotBytes) {
    prompt_snapshot_ = sequence.snapshot();
  } else {
    prompt_snapshot_.reset();
  }

  const GenerationSettings& settings = spec.settings;
  SamplingParams sampling = settings.sampling;
  std::optional<chat::JsonConstraint> constraint;
  if (spec.grammar) {
    if (!trie_) trie_ = std::make_shared<const chat::TokenTrie>(tokenizer_);
    chat::ConstraintOptions options;
    options.end_ids = engine_.config().eos_ids;
    options.end_ids.insert(options.end_ids.end(), spec.stop_ids.begin(), spec.stop_ids.end());
    if (spec.reply_format && spec.reply_format->thinks()) {
      options.start_after = spec.reply_format->think_close;
      options.reasoning_open = spec.reply_format->think_open;
      options.starts_free = spec.in_reasoning;
    }
    constraint.emplace(spec.grammar, trie_, options);
    sampling.constraint = &*constraint;
  }
  Sampler sampler(sampling);
  std::vector<int32_t> context(spec.prompt.begin(), spec.prompt.end());
  std::unordered_map<int32_t, uint32_t> counts;  // generated tokens, for the penalties
  const bool adjusts = settings.presence_penalty != 0.0f || settings.frequency_penalty != 0.0f ||
                       !settings.logit_bias.empty();
  std::vector<float> adjusted;
  ReplyStream reply(job, tokenizer_, spec, result);
  const auto& eos = engine_.config().eos_ids;

  start = std::chrono::steady_clock::now();
  result.finish_reason = "length";
  for (uint32_t i = 0; i < spec.max_tokens; ++i) {
    std::span<const float> row = logits;
    if (adjusts) {
      adjusted = logits;
      for (const auto& [token, bias] : settings.logit_bias) adjusted[token] += bias;
      for (const auto& [token, count] : counts)
        adjusted[token] -= settings.frequency_penalty * count + settings.presence_penalty;
      row = adjusted;
    }
    const int32_t token = sampler.sample(row, context);
    context.push_back(token);
    ++counts[token];
    ++result.completion_tokens;
    const bool end =
        std::find(eos.begin(), eos.end(), token) != eos.end() ||
        std::find(spec.stop_ids.begin(), spec.stop_ids.end(), token) != spec.stop_ids.end();
    if (!end) reply.push(token);
    const double elapsed = seconds_since(start);
    if (elapsed > 0) metrics_.set_decode_rate(result.completion_tokens / elapsed);
    if (cancelled(job)) {
      result.finish_reason = "cancelled";
      break;
    }
    if (end || reply.stopped()) {
      result.finish_reason = "stop";
      break;
    }
    if (i + 1 == spec.max_tokens || sequence.position() == model.context()) break;
    forward(std::span<const int32_t>(&token, 1), logits,
            fmt::format("decode step {} (after generated token {})", i + 1, token));
  }
  if (result.finish_reason != "cancelled") {
    reply.finish();
    if (result.tool_calls) result.finish_reason = "tool_calls";
  }
  result.decode_seconds = seconds_since(start);
  result.experts = difference(engine_.experts().stats(), before);
}

}  // namespace sluice::serve
