// compute/serve/scheduler.cpp: the engine worker: the queue, sequence slots
// with prefix reuse, and the generation loop. One request alone runs the
// model exactly as Engine::generate does (same prefill chunks, same sampler),
// so its greedy output equals `sluice run` on the same ids; several step
// together through Engine::step, each row bit-identical to stepping alone.
#include "compute/serve/scheduler.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "compute/serve/api_error.h"
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

bool extends(const SequenceSnapshot& snapshot, const JobSpec& spec) {
  return holds_prefix(snapshot.tokens, snapshot.media, spec.prompt, spec.media);
}

}  // namespace

// What one running request carries between decode steps.
struct Scheduler::Generation {
  Generation(std::shared_ptr<Job> job_in, const tokenizer::Tokenizer& tokenizer)
      : job(std::move(job_in)), reply(*job, tokenizer) {}

  std::shared_ptr<Job> job;
  std::optional<chat::GrammarConstraint> constraint;
  std::optional<Sampler> sampler;
  std::vector<int32_t> context;                  // prompt and generated tokens, for the sampler
  std::unordered_map<int32_t, uint32_t> counts;  // generated tokens, for the penalties
  std::vector<float> adjusted;
  ReplyStream reply;
  int32_t pending = 0;  // the last sampled token, to run at the next step
  std::chrono::steady_clock::time_point started, decode_started;
  ExpertSourceStats experts_before;
};

struct Scheduler::Slot {
  SequenceState* sequence;             // the engine's own for slot 0
  std::optional<SequenceState> owned;  // the others'
  std::optional<SequenceSnapshot> prompt_snapshot;
  std::unique_ptr<Generation> generation;  // null: free
  uint64_t last_used = 0;
};

Scheduler::Scheduler(Engine& engine, const tokenizer::Tokenizer& tokenizer, Metrics& metrics,
                     const SchedulerOptions& options)
    : engine_(engine),
      tokenizer_(tokenizer),
      metrics_(metrics),
      queue_limit_(options.queue_limit),
      prefill_chunk_(std::max<uint32_t>(1, options.prefill_chunk)),
      routing_(std::make_unique<RoutingSession>(engine, options.routing)) {
  const uint32_t parallel = std::max<uint32_t>(1, options.parallel);
  for (uint32_t i = 0; i < parallel; ++i) {
    auto slot = std::make_unique<Slot>();
    if (i == 0) {
      slot->sequence = &engine.sequence();
    } else {
      slot->owned.emplace(engine.new_sequence());
      slot->sequence = &*slot->owned;
    }
    slots_.push_back(std::move(slot));
  }
  logits_.resize(size_t{parallel} * engine.config().vocab);
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
  auto job = std::make_shared<Job>(std::move(spec));
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

bool Scheduler::stopping() const {
  const std::lock_guard lock(mutex_);
  return stopping_;
}

size_t Scheduler::busy_slots() const {
  return static_cast<size_t>(std::count_if(slots_.begin(), slots_.end(),
                                           [](const auto& s) { return s->generation != nullptr; }));
}

void Scheduler::work() {
  for (;;) {
    std::vector<std::shared_ptr<Job>> admitted;
    {
      std::unique_lock lock(mutex_);
      const size_t busy = busy_slots();
      wake_.wait(
          lock, [&] { return stopping_ || busy > 0 || (!queue_.empty() && busy < slots_.size()); });
      if (stopping_) break;
      while (!queue_.empty() && busy + admitted.size() < slots_.size()) {
        admitted.push_back(queue_.front());
        queue_.pop_front();
      }
      running_ = busy + admitted.size();
      metrics_.set_queue(queue_.size(), running_);
    }
    for (auto& job : admitted) {
      Slot& slot = pick_slot(job->spec());
      start(slot, std::move(job));
    }
    if (busy_slots() > 0) step();
    publish_experts();
  }
  // Stopping: the generations still running end as cancelled.
  for (auto& slot : slots_) {
    if (!slot->generation) continue;
    slot->generation->job->result().finish_reason = "cancelled";
    finish(*slot);
  }
}

Scheduler::Slot& Scheduler::pick_slot(const JobSpec& spec) {
  Slot* best = nullptr;
  size_t best_reuse = 0;
  for (auto& slot : slots_) {
    if (slot->generation) continue;
    size_t reusable = 0;
    if (slot->sequence->is_prefix_of(spec.prompt, spec.media))
      reusable = slot->sequence->position();
    if (slot->prompt_snapshot && extends(*slot->prompt_snapshot, spec))
      reusable = std::max(reusable, slot->prompt_snapshot->tokens.size());
    if (!best || reusable > best_reuse ||
        (reusable == best_reuse && slot->last_used < best->last_used)) {
      best = slot.get();
      best_reuse = reusable;
    }
  }
  return *best;  // work() admits only as many jobs as there are free slots
}

size_t Scheduler::reuse(Slot& slot, const JobSpec& spec) {
  // Only an exact extension is reusable: a recurrent family's state (KDA)
  // cannot be rewound, so a shorter common prefix needs a snapshot taken
  // there. The last prompt's end is one: the next turn of a conversation
  // extends it even when the reply re-tokenizes differently.
  // Two prompts whose ids agree still differ where their images do.
  SequenceState& sequence = *slot.sequence;
  if (sequence.is_prefix_of(spec.prompt, spec.media)) return sequence.position();
  if (slot.prompt_snapshot && extends(*slot.prompt_snapshot, spec)) {
    sequence.restore(*slot.prompt_snapshot);
    return sequence.position();
  }
  sequence.reset();
  return 0;
}

void Scheduler::publish_experts() {
  std::optional<shm::GuessStats> guesses;
  if (routing_->runs_router()) guesses = routing_->guesses();
  metrics_.set_experts(engine_.experts().stats(), guesses);
}

void Scheduler::record_routing() {
  for (const auto& token_routing : engine_.transformer().last_routing())
    for (size_t layer = 0; layer < token_routing.size(); ++layer)
      metrics_.add_routing(layer, token_routing[layer].experts);
}

void Scheduler::forward(SequenceState& sequence, std::span<const int32_t> tokens,
                        std::span<float> logits, std::string_view step_name,
                        std::span<const float> media_rows) {
  engine_.transformer().forward(sequence, tokens, logits, false, media_rows);
  check_logits_finite(logits, step_name);
  record_routing();
}

void Scheduler::start(Slot& slot, std::shared_ptr<Job> job) {
  slot.last_used = ++clock_;
  slot.generation = std::make_unique<Generation>(job, tokenizer_);
  Generation& g = *slot.generation;
  g.started = std::chrono::steady_clock::now();
  g.experts_before = engine_.experts().stats();
  const JobSpec& spec = job->spec();
  JobResult& result = job->result();
  result.finish_reason = "length";
  try {
    if (job->cancelled() || stopping()) {
      result.finish_reason = "cancelled";
      finish(slot);
      return;
    }
    SequenceState& sequence = *slot.sequence;
    const size_t reused = reuse(slot, spec);
    result.prompt_tokens = static_cast<uint32_t>(spec.prompt.size());
    result.cached_tokens = static_cast<uint32_t>(reused);
    const uint32_t context = engine_.transformer().context();
    if (spec.prompt.size() > context)
      fail("the prompt is {} tokens, more than the context of {}", spec.prompt.size(), context);

    const std::span<float> logits(logits_.data(), engine_.config().vocab);
    const std::span<const int32_t> rest = std::span(spec.prompt).subspan(reused);
    // Only the images whose positions are still to run go through the tower.
    std::vector<std::vector<float>> encoded(spec.images.size());
    const std::vector<float> media_rows =
        media_rows_from({spec.prompt, spec.media}, reused, engine_.config().hidden,
                        [&](size_t i) -> const std::vector<float>& {
                          if (!images_)
                            images_ = std::make_unique<ImageEncoder>(
                                engine_.container(), engine_.config(), engine_.exec());
                          encoded[i] = images_->encode(spec.images[i]);
                          return encoded[i];
                        });
    sequence.note_media(media_from(spec.media, reused));
    const int32_t pad =
        engine_.config().vision ? static_cast<int32_t>(engine_.config().vision->media_pad_id) : -1;
    MediaRowCursor media(media_rows, pad, engine_.config().hidden);
    for (size_t first = 0; first < rest.size(); first += prefill_chunk_) {
      const size_t count = std::min<size_t>(prefill_chunk_, rest.size() - first);
      const std::span<const int32_t> chunk = rest.subspan(first, count);
      forward(sequence, chunk, logits,
              fmt::format("prefill of prompt tokens {}..{}", reused + first,
                          reused + first + count - 1),
              media.next(chunk));
      if (job->cancelled() || stopping()) {
        result.finish_reason = "cancelled";
        finish(slot);
        return;
      }
    }
    result.prefill_seconds = seconds_since(g.started);
    if (sequence.snapshot_floats(sequence.position()) * sizeof(float) <= kMaxSnapshotBytes) {
      slot.prompt_snapshot = sequence.snapshot();
    } else {
      slot.prompt_snapshot.reset();
    }

    SamplingParams sampling = spec.settings.sampling;
    sampling.banned.assign(engine_.never_sampled().begin(), engine_.never_sampled().end());
    if (spec.grammar) {
      if (!trie_) trie_ = std::make_shared<const chat::TokenTrie>(tokenizer_);
      g.constraint.emplace(spec.grammar, trie_);
      sampling.constraint = &*g.constraint;
    }
    g.sampler.emplace(sampling);
    g.context.assign(spec.prompt.begin(), spec.prompt.end());
    g.decode_started = std::chrono::steady_clock::now();
    if (!advance(slot, logits)) finish(slot);
  } catch (const Error& e) {
    const std::string message = e.what();
    finish(slot, &message);
  }
}

void Scheduler::step() {
  std::vector<Slot*> active;
  std::vector<SequenceState*> sequences;
  std::vector<int32_t> tokens;
  for (auto& slot : slots_) {
    if (!slot->generation) continue;
    active.push_back(slot.get());
    sequences.push_back(slot->sequence);
    tokens.push_back(slot->generation->pending);
  }
  const size_t vocab = engine_.config().vocab;
  try {
    if (active.size() == 1) {
      // Alone, exactly as Engine::generate runs a decode step.
      forward(*sequences[0], tokens, std::span(logits_.data(), vocab),
              fmt::format("decode step {} (after generated token {})",
                          active[0]->generation->job->result().completion_tokens, tokens[0]));
    } else {
      engine_.step(sequences, tokens, std::span(logits_.data(), active.size() * vocab));
      record_routing();
    }
  } catch (const Error& e) {
    const std::string message = e.what();
    for (Slot* slot : active) finish(*slot, &message);
    return;
  }
  for (size_t i = 0; i < active.size(); ++i) {
    try {
      if (!advance(*active[i], std::span<const float>(logits_.data() + i * vocab, vocab)))
        finish(*active[i]);
    } catch (const Error& e) {
      const std::string message = e.what();
      finish(*active[i], &message);
    }
  }
}

bool Scheduler::advance(Slot& slot, std::span<const float> logits) {
  Generation& g = *slot.generation;
  const JobSpec& spec = g.job->spec();
  const GenerationSettings& settings = spec.settings;
  JobResult& result = g.job->result();
  std::span<const float> row = logits;
  if (settings.presence_penalty != 0.0f || settings.frequency_penalty != 0.0f ||
      !settings.logit_bias.empty()) {
    g.adjusted.assign(logits.begin(), logits.end());
    for (const auto& [token, bias] : settings.logit_bias) g.adjusted[token] += bias;
    for (const auto& [token, count] : g.counts)
      g.adjusted[token] -= settings.frequency_penalty * count + settings.presence_penalty;
    row = g.adjusted;
  }
  const int32_t token = g.sampler->sample(row, g.context);
  g.context.push_back(token);
  ++g.counts[token];
  ++result.completion_tokens;
  const auto& eos = engine_.config().eos_ids;
  const bool end =
      std::find(eos.begin(), eos.end(), token) != eos.end() ||
      std::find(spec.stop_ids.begin(), spec.stop_ids.end(), token) != spec.stop_ids.end();
  if (!end) g.reply.push(token);
  const double elapsed = seconds_since(g.decode_started);
  if (elapsed > 0) metrics_.set_decode_rate(result.completion_tokens / elapsed);
  if (g.job->cancelled() || stopping()) {
    result.finish_reason = "cancelled";
    return false;
  }
  if (end || g.reply.stopped()) {
    result.finish_reason = "stop";
    result.stop_sequence = g.reply.stop_string();
    return false;
  }
  if (result.completion_tokens == spec.max_tokens ||
      slot.sequence->position() == engine_.transformer().context())
    return false;  // "length"
  g.pending = token;
  return true;
}

void Scheduler::finish(Slot& slot, const std::string* error) {
  std::unique_ptr<Generation> g = std::move(slot.generation);
  JobResult& result = g->job->result();
  if (error) {
    // The sequence's state is unknown after a failed forward pass.
    slot.sequence->reset();
    slot.prompt_snapshot.reset();
    g->job->push({Job::Event::Kind::kError, *error});
  } else {
    if (result.finish_reason != "cancelled") {
      g->reply.finish();
      if (result.tool_calls) result.finish_reason = "tool_calls";
    }
    if (g->sampler) result.decode_seconds = seconds_since(g->decode_started);
    result.experts = difference(engine_.experts().stats(), g->experts_before);
    metrics_.add_generation({result.finish_reason, result.prompt_tokens, result.cached_tokens,
                             result.completion_tokens, result.prefill_seconds,
                             result.decode_seconds});
    g->job->push({Job::Event::Kind::kDone, {}});
  }
  const std::lock_guard lock(mutex_);
  last_request_seconds_ = seconds_since(g->started);
  running_ = busy_slots();
  metrics_.set_queue(queue_.size(), running_);
}

}  // namespace sluice::serve
