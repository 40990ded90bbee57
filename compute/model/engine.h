// compute/model/engine.h: one loaded model ready to generate: the container,
// its config and trunk, the thread pool, an expert source, the transformer
// and a default sequence. It owns no text: callers tokenize.
//
// Sequences (what a server drives): the engine's own default sequence is
// what prefill(tokens, ...), generate(prompt, ...) and `sluice run` use. A
// caller serving several conversations makes one SequenceState per
// conversation with new_sequence() (each holds its own caches and recurrent
// state, sized like the default one: SequenceState::bytes()), prefills each
// with prefill(sequence, tokens, logits), and then advances any set of them
// together with step(sequences, tokens, logits): one token per sequence per
// call, one logits row per sequence, each row bit-identical to that
// sequence stepped alone. A sequence's state is saved and restored with
// SequenceState::snapshot()/restore() in memory, or save_session() /
// load_session() (compute/model/session_file.h) in a file. All of it runs on
// the caller's thread; an Engine is not thread-safe.
#pragma once

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "compute/kernels/thread_pool.h"
#include "compute/model/expert_source.h"
#include "compute/model/sampler.h"
#include "compute/model/sequence_state.h"
#include "compute/model/transformer.h"
#include "compute/model/weights.h"
#include "proto/container.h"
#include "proto/error.h"
#include "proto/model_config.h"

namespace sluice {

struct EngineOptions {
  uint32_t context = 0;  // 0: the model's max_position_embeddings, at most 4096
  std::optional<size_t> threads;
  bool verify_records = false;
  uint32_t prefill_chunk = 64;
  // Experts of the next MoE layer held per decode step (Transformer::set_hold_next); 0: off.
  // Unset: hold_from_environment(top-k).
  std::optional<uint32_t> hold_next;
  // Builds the expert source over the opened container; empty: a
  // DirectExpertSource (no cache). CachedExpertSource::embedded / ::attached
  // (compute/model/cached_expert_source.h) plug the shared-memory cache in.
  std::function<std::unique_ptr<ExpertSource>(const Container&)> expert_source;
  // Called after each prefill chunk with the prompt tokens done so far and
  // their total; returning false abandons the prefill (and the generation).
  std::function<bool(size_t done, size_t total)> prefill_progress;
};

// Why generate() stopped: an end-of-sequence or stop id, max_tokens or the
// end of the context, or the caller (its callback or prefill_progress).
enum class FinishReason { kStop, kLength, kCancelled };
const char* finish_reason_name(FinishReason reason);  // "stop", "length", "cancelled"

struct GenerationStats {
  uint32_t prompt_tokens = 0;
  uint32_t generated_tokens = 0;
  double prefill_seconds = 0;
  double decode_seconds = 0;
  FinishReason finish = FinishReason::kLength;
  bool context_full = false;  // kLength because the context, not max_tokens, ran out
  ExpertSourceStats experts;
};

// Experts of the next layer held per decode step from SLUICE_HOLD (unset:
// `top_k`, the whole guessed batch; 0: off). Throws Error on anything but a
// non-negative integer.
uint32_t hold_from_environment(uint32_t top_k);

// Hands out a prompt's media rows (the input embeddings of its media pads,
// in order) chunk by chunk: each chunk takes the rows of its own pads, so a
// pad alone in a one-token last chunk gets its row too.
class MediaRowCursor {
 public:
  MediaRowCursor(std::span<const float> rows, int32_t pad, uint32_t hidden)
      : rows_(rows), pad_(pad), hidden_(hidden) {}
  std::span<const float> next(std::span<const int32_t> chunk) {
    if (rows_.empty()) return {};
    const size_t values =
        static_cast<size_t>(std::count(chunk.begin(), chunk.end(), pad_)) * hidden_;
    if (values > rows_.size() - used_)
      fail("prefill: the prompt has more media pads than its images have rows");
    const std::span<const float> out = rows_.subspan(used_, values);
    used_ += values;
    return out;
  }

 private:
  std::span<const float> rows_;
  int32_t pad_;
  uint32_t hidden_;
  size_t used_ = 0;
};

// Throws Error naming `step` when any logit is NaN or infinite: damage or a
// numerical fault upstream, never something to sample from.
void check_logits_finite(std::span<const float> logits, std::string_view step);

class Engine {
 public:
  Engine(const std::string& model_dir, const EngineOptions& options);

  const Container& container() const { return container_; }
  const ModelConfig& config() const { return config_; }
  Transformer& transformer() { return *transformer_; }
  const ModelWeights& weights() const { return weights_; }
  const ExpertSource& experts() const { return *source_; }
  ExpertSource& experts() { return *source_; }
  size_t threads() const { return pool_.size(); }
  // The ids no reply may contain: a vision model's media pad (its embedding
  // is an image's place, never text) and, once the caller has said how many
  // ids its tokenizer has (set_tokenizer_ids), the ids above them, which the
  // model's vocabulary pads out and no text has. generate() bans them; a
  // caller sampling step()'s logits bans them too.
  std::span<const int32_t> never_sampled() const { return never_sampled_; }
  void set_tokenizer_ids(size_t tokenizer_ids);
  // The kernels and thread pool the model runs on (for the vision tower).
  kernels::Exec exec() { return {kernels::isa_from_environment(), &pool_}; }

  // The default sequence.
  SequenceState& sequence() { return sequence_; }
  // Another sequence at position 0, independent of every other.
  SequenceState new_sequence() const { return transformer_->new_sequence(); }

  // Runs `tokens` through the model in chunks of at most prefill_chunk and
  // leaves the last token's logits in `logits`. False when prefill_progress
  // abandoned it (the tokens run so far stay in the sequence). `media_rows`:
  // the input embeddings of the media pad tokens, in order (Transformer::forward).
  bool prefill(std::span<const int32_t> tokens, std::span<float> logits) {
    return prefill(sequence_, tokens, logits);
  }
  bool prefill(SequenceState& sequence, std::span<const int32_t> tokens, std::span<float> logits,
               std::span<const float> media_rows = {});

  // One decode step of distinct sequences together: tokens[i] runs on
  // sequences[i]; logits holds sequences.size() vocabulary-sized rows. The
  // MoE layers read the union of the sequences' experts once.
  void step(std::span<SequenceState* const> sequences, std::span<const int32_t> tokens,
            std::span<float> logits);

  // Called with each generated token; return false to stop.
  using TokenCallback = std::function<bool(int32_t token, std::span<const float> logits)>;

  // Prefills `prompt`, then samples up to `max_tokens` tokens, stopping after
  // an end-of-sequence id of the config or one of `stop_ids` (unless
  // `ignore_eos`). The callback sees every token with the logits it was
  // sampled from. The last token is not run through the model. A prompt
  // longer than the context left is refused before any prefill; generation
  // that fills the context ends with FinishReason::kLength.
  // `media_rows` are the prompt's image rows, as prefill takes them.
  GenerationStats generate(std::span<const int32_t> prompt, uint32_t max_tokens,
                           const SamplingParams& sampling, std::span<const int32_t> stop_ids,
                           bool ignore_eos, const TokenCallback& on_token,
                           std::span<const float> media_rows = {}) {
    return generate(sequence_, prompt, max_tokens, sampling, stop_ids, ignore_eos, on_token, media_rows);
  }
  // The same on `sequence`, continuing from its position.
  GenerationStats generate(SequenceState& sequence, std::span<const int32_t> prompt,
                           uint32_t max_tokens, const SamplingParams& sampling,
                           std::span<const int32_t> stop_ids, bool ignore_eos,
                           const TokenCallback& on_token, std::span<const float> media_rows = {});
  // The same with a sampler that lives on after it (its random state and
  // constraint carry over to the next call: the C API's sampler handle).
  // `logits` (vocabulary-sized) is left holding the row the last token was drawn from.
  GenerationStats generate(SequenceState& sequence, std::span<const int32_t> prompt,
                           uint32_t max_tokens, Sampler& sampler,
                           std::span<const int32_t> stop_ids, bool ignore_eos,
                           const TokenCallback& on_token, std::span<float> logits,
                           std::span<const float> media_rows = {});
  // generate()'s decode loop alone: samples up to `max_tokens` tokens from
  // `logits`, the row after `sequence`'s last token, running each through
  // the model but the last (stats.prompt_tokens stays 0).
  GenerationStats decode(SequenceState& sequence, std::span<float> logits, uint32_t max_tokens,
                         Sampler& sampler, std::span<const int32_t> stop_ids, bool ignore_eos,
                         const TokenCallback& on_token);
  // Runs one token through `sequence` (a decode step), leaving its logits in
  // `logits`: what generate() does with each token but the last, and what a
  // caller saving the sequence after generating does with the last.
  void advance(SequenceState& sequence, int32_t token, std::span<float> logits);
  // A sampler of `sampling` that never draws never_sampled().
  Sampler make_sampler(const SamplingParams& sampling) const;

 private:
  Container container_;
  ModelConfig config_;
  ModelWeights weights_;
  kernels::ThreadPool pool_;
  std::unique_ptr<ExpertSource> source_;
  std::unique_ptr<Transformer> transformer_;
  SequenceState sequence_;
  uint32_t prefill_chunk_;
  std::function<bool(size_t, size_t)> prefill_progress_;
  std::vector<int32_t> never_sampled_;
};

}  // namespace sluice
