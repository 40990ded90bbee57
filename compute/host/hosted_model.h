// compute/host/hosted_model.h: a model opened the way `sluice run` opens it
// (the engine over the expert source EngineFlags choose, the container's
// tokenizer, the routing session that runs lookahead), and the generation
// steps `sluice run` and libsluice share: the prompt's ids, text streamed
// as it becomes complete, the statistics as JSON. Prints nothing.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "compute/host/engine_setup.h"
#include "compute/model/engine.h"
#include "compute/model/routing_tap.h"
#include "compute/tokenizer/tokenizer.h"

namespace sluice {

// A container's tokenizer and the seconds loading it took, which run and eval
// report in --json as {"tokenizer": {"file": ..., "load_seconds": ...}}.
struct TimedTokenizer {
  tokenizer::Tokenizer tokenizer;
  double load_seconds;
  nlohmann::json report() const { return {{"file", tokenizer.loaded_from()}, {"load_seconds", load_seconds}}; }
};
TimedTokenizer load_container_tokenizer(const std::string& model);

class HostedModel {
 public:
  // Throws Error naming the container, the budget or the daemon that is wrong.
  HostedModel(const std::string& path, const EngineFlags& flags, const RoutingOptions& routing,
              std::function<bool(size_t done, size_t total)> prefill_progress = {});
  HostedModel(const HostedModel&) = delete;
  HostedModel& operator=(const HostedModel&) = delete;

  Engine& engine() { return engine_; }
  const tokenizer::Tokenizer& tokenizer() const { return tokenizer_.tokenizer; }
  nlohmann::json tokenizer_report() const { return tokenizer_.report(); }
  RoutingSession& routing() { return *routing_; }
  const EngineFlags& flags() const { return flags_; }
  uint32_t lookahead() const { return lookahead_; }

 private:
  EngineFlags flags_;
  EngineOptions options_;  // holds an attached daemon session: outlives the engine
  Engine engine_;
  TimedTokenizer tokenizer_;
  uint32_t lookahead_;
  std::optional<RoutingSession> routing_;
};

// `text` as a prompt: its ids, after the tokenizer's BOS when it adds one
// and the sequence is empty (a resumed sequence already began).
std::vector<int32_t> prompt_ids(const tokenizer::Tokenizer& tokenizer, std::string_view text,
                                bool sequence_empty);

// What generate_text() passes on: each token with the text it completed
// (possibly empty) and the logits it was drawn from; then, once, kTextTail
// with the text still held back (an incomplete UTF-8 sequence, as U+FFFD;
// usually empty) and no logits. Returning false stops the generation.
inline constexpr int32_t kTextTail = -1;
using TextCallback =
    std::function<bool(int32_t token, std::string_view piece, std::span<const float> logits)>;

// Engine::generate on `sequence` with each token's text as `sluice run`
// prints it (special tokens skipped). An empty `prompt` continues from
// `logits`, the row after the sequence's last token (Engine::decode);
// `logits` is left holding the row the last token was drawn from.
GenerationStats generate_text(Engine& engine, const tokenizer::Tokenizer& tokenizer,
                              SequenceState& sequence, std::span<const int32_t> prompt,
                              std::span<float> logits, uint32_t max_tokens, Sampler& sampler,
                              std::span<const int32_t> stop_ids, bool ignore_eos,
                              const TextCallback& on_piece, std::span<const float> media_rows = {});

// The expert source's counters: requested, hits, reads, bytes_read, wait_seconds, direct_io.
nlohmann::json experts_json(const ExpertSourceStats& stats);
// One generation's numbers as `sluice run --json` reports them: prompt and
// generated tokens, seconds and tok/s of prefill and decode, finish_reason,
// context (its length), context_full and experts.
nlohmann::json generation_json(const GenerationStats& stats, uint32_t context);

}  // namespace sluice
