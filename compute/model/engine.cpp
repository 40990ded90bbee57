// compute/model/engine.cpp: loading a model and the generation loop.
#include "compute/model/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include <fmt/format.h>

#include "compute/kernels/dispatch.h"
#include "proto/env_count.h"
#include "proto/error.h"

namespace sluice {
namespace {

std::unique_ptr<ExpertSource> make_source(const Container& container,
                                          const EngineOptions& options) {
  return options.expert_source
             ? options.expert_source(container)
             : std::make_unique<DirectExpertSource>(container, options.verify_records);
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::vector<int32_t> never_sampled_ids(const ModelConfig& config, size_t tokenizer_ids) {
  std::vector<int32_t> ids;
  if (config.vision) ids.push_back(static_cast<int32_t>(config.vision->media_pad_id));
  if (tokenizer_ids > 0) {
    for (size_t id = tokenizer_ids; id < config.vocab; ++id)
      ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

}  // namespace

void check_logits_finite(std::span<const float> logits, std::string_view step) {
  for (size_t i = 0; i < logits.size(); ++i) {
    if (!std::isfinite(logits[i])) {
      fail("{}: the forward pass produced a non-finite logit ({} for token id {}); the model's weights or the "
           "computation are damaged (try `sluice verify`)",
           step, logits[i], i);
    }
  }
}

Engine::Engine(const std::string& model_dir, const EngineOptions& options)
    : container_(Container::open(model_dir)),
      config_(ModelConfig::from_json(container_.arch(), container_.config())),
      weights_(ModelWeights::load(container_, config_)),
      pool_(kernels::resolve_thread_count(options.threads)),
      source_(make_source(container_, options)),
      transformer_(std::make_unique<Transformer>(
          config_, weights_, *source_, config_.context_or_default(options.context),
          kernels::Exec{kernels::isa_from_environment(), &pool_, kernels::trunk_activations_from_environment()})),
      sequence_(transformer_->new_sequence()),
      prefill_chunk_(options.prefill_chunk),
      prefill_progress_(options.prefill_progress),
      never_sampled_(never_sampled_ids(config_, 0)) {
  if (prefill_chunk_ == 0) fail("--chunk must be at least 1");
  transformer_->set_hold_next(options.hold_next ? *options.hold_next : hold_from_environment(config_.top_k));
}

void Engine::set_tokenizer_ids(size_t tokenizer_ids) {
  never_sampled_ = never_sampled_ids(config_, tokenizer_ids);
}

uint32_t hold_from_environment(uint32_t top_k) {
  return count_from_environment("SLUICE_HOLD", 0, 4096, "a number of experts (0 turns holding the next batch off)")
      .value_or(top_k);
}

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
  }
  return "unknown";
}

bool Engine::prefill(SequenceState& sequence, std::span<const int32_t> tokens,
                     std::span<float> logits, std::span<const float> media_rows) {
  if (!media_rows.empty() && !config_.vision) fail("the model has no vision tower: it cannot take images");
  const int32_t pad = config_.vision ? static_cast<int32_t>(config_.vision->media_pad_id) : -1;
  if (!media_rows.empty()) {
    const auto pads = static_cast<size_t>(std::count(tokens.begin(), tokens.end(), pad));
    if (pads * config_.hidden != media_rows.size()) {
      fail("the prompt has {} media pad tokens but its images have {} rows", pads, media_rows.size() / config_.hidden);
    }
  }
  MediaRowCursor media(media_rows, pad, config_.hidden);
  for (size_t start = 0; start < tokens.size(); start += prefill_chunk_) {
    const size_t count = std::min<size_t>(prefill_chunk_, tokens.size() - start);
    const std::span<const int32_t> chunk = tokens.subspan(start, count);
    transformer_->forward(sequence, chunk, logits, false, media.next(chunk));
    check_logits_finite(logits, fmt::format("prefill of prompt tokens {}..{}", start, start + count - 1));
    if (prefill_progress_ && !prefill_progress_(start + count, tokens.size())) return false;
  }
  return true;
}

void Engine::step(std::span<SequenceState* const> sequences, std::span<const int32_t> tokens,
                  std::span<float> logits) {
  transformer_->forward_batch(sequences, tokens, logits);
  check_logits_finite(logits.first(sequences.size() * config_.vocab),
                      fmt::format("decode step of {} sequences", sequences.size()));
}

Sampler Engine::make_sampler(const SamplingParams& sampling) const {
  SamplingParams params = sampling;
  params.banned.insert(params.banned.end(), never_sampled_.begin(), never_sampled_.end());
  return Sampler(params);
}

void Engine::advance(SequenceState& sequence, int32_t token, std::span<float> logits) {
  if (sequence.position() >= transformer_->context())
    fail("the context of {} is full: token {} cannot be run", transformer_->context(), token);
  transformer_->forward(sequence, std::span<const int32_t>(&token, 1), logits, false);
  check_logits_finite(logits, fmt::format("decode step at position {} (token {})", sequence.position() - 1, token));
}

GenerationStats Engine::generate(SequenceState& sequence, std::span<const int32_t> prompt,
                                 uint32_t max_tokens, const SamplingParams& sampling,
                                 std::span<const int32_t> stop_ids, bool ignore_eos,
                                 const TokenCallback& on_token, std::span<const float> media_rows) {
  Sampler sampler = make_sampler(sampling);
  std::vector<float> logits(config_.vocab);
  return generate(sequence, prompt, max_tokens, sampler, stop_ids, ignore_eos, on_token, logits,
                  media_rows);
}

GenerationStats Engine::generate(SequenceState& sequence, std::span<const int32_t> prompt,
                                 uint32_t max_tokens, Sampler& sampler,
                                 std::span<const int32_t> stop_ids, bool ignore_eos,
                                 const TokenCallback& on_token, std::span<float> logits,
                                 std::span<const float> media_rows) {
  if (prompt.empty()) fail("the prompt is empty: nothing to continue");
  if (logits.size() != config_.vocab)
    fail("generate: a logits row of {} floats for a vocabulary of {}", logits.size(), config_.vocab);
  const uint32_t room = transformer_->context() - sequence.position();
  if (prompt.size() > room) {
    fail(
        "the prompt is {} tokens, longer than the {} left of the context of {} (the model's "
        "maximum is {})",
        prompt.size(), room, transformer_->context(), config_.max_positions);
  }
  const auto start = std::chrono::steady_clock::now();
  const bool prefilled = prefill(sequence, prompt, logits, media_rows);
  const double prefill_seconds = seconds_since(start);
  GenerationStats stats;
  if (prefilled) {
    stats = decode(sequence, logits, max_tokens, sampler, stop_ids, ignore_eos, on_token);
  } else {
    stats.finish = FinishReason::kCancelled;
    stats.experts = source_->stats();
  }
  stats.prompt_tokens = static_cast<uint32_t>(prompt.size());
  stats.prefill_seconds = prefill_seconds;
  return stats;
}

GenerationStats Engine::decode(SequenceState& sequence, std::span<float> logits, uint32_t max_tokens,
                               Sampler& sampler, std::span<const int32_t> stop_ids, bool ignore_eos,
                               const TokenCallback& on_token) {
  GenerationStats stats;
  const auto start = std::chrono::steady_clock::now();
  for (uint32_t i = 0; i < max_tokens; ++i) {
    // Penalties see the whole sequence, a resumed session's earlier tokens included.
    const int32_t token = sampler.sample(logits, sequence.tokens());
    ++stats.generated_tokens;
    const bool stop = !ignore_eos && (std::find(stop_ids.begin(), stop_ids.end(), token) != stop_ids.end() ||
                      std::find(config_.eos_ids.begin(), config_.eos_ids.end(), token) != config_.eos_ids.end());
    if (!on_token(token, logits)) {
      stats.finish = FinishReason::kCancelled;
      break;
    }
    if (stop) {
      stats.finish = FinishReason::kStop;
      break;
    }
    if (i + 1 == max_tokens) break;
    if (sequence.position() == transformer_->context()) {
      stats.context_full = true;
      break;
    }
    advance(sequence, token, logits);
  }
  stats.decode_seconds = seconds_since(start);
  stats.experts = source_->stats();
  return stats;
}

}  // namespace sluice
