// compute/host/hosted_model.cpp: opening a model as `sluice run` does and the
// generation steps it shares with libsluice.
#include "compute/host/hosted_model.h"

#include <chrono>
#include <utility>

namespace sluice {
namespace {

EngineOptions engine_options(const EngineFlags& flags,
                             std::function<bool(size_t, size_t)> prefill_progress) {
  EngineOptions options = flags.options();
  options.prefill_progress = std::move(prefill_progress);
  return options;
}

}  // namespace

HostedModel::HostedModel(const std::string& path, const EngineFlags& flags,
                         const RoutingOptions& routing,
                         std::function<bool(size_t, size_t)> prefill_progress)
    : flags_(flags),
      options_(engine_options(flags, std::move(prefill_progress))),
      engine_(path, options_),  // first: its errors say what a path that is no container is
      tokenizer_(load_container_tokenizer(path)),
      lookahead_(routing.lookahead) {
  engine_.set_tokenizer_ids(tokenizer_.tokenizer.vocab_size());
  routing_.emplace(engine_, routing);
}

TimedTokenizer load_container_tokenizer(const std::string& model) {
  const auto start = std::chrono::steady_clock::now();
  tokenizer::Tokenizer tok = tokenizer::Tokenizer::load_from_container(model);
  return {std::move(tok), std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
}

std::vector<int32_t> prompt_ids(const tokenizer::Tokenizer& tokenizer, std::string_view text,
                                bool sequence_empty) {
  std::vector<int32_t> ids = tokenizer.encode(text);
  if (sequence_empty && tokenizer.add_bos() && tokenizer.bos_id())
    ids.insert(ids.begin(), *tokenizer.bos_id());
  return ids;
}

GenerationStats generate_text(Engine& engine, const tokenizer::Tokenizer& tokenizer,
                              SequenceState& sequence, std::span<const int32_t> prompt,
                              std::span<float> logits, uint32_t max_tokens, Sampler& sampler,
                              std::span<const int32_t> stop_ids, bool ignore_eos,
                              const TextCallback& on_piece, std::span<const float> media_rows) {
  tokenizer::StreamingDecoder decoder(tokenizer, true);
  const Engine::TokenCallback on_token = [&](int32_t token, std::span<const float> row) {
    return on_piece(token, decoder.push(token), row);
  };
  const GenerationStats stats =
      prompt.empty()
          ? engine.decode(sequence, logits, max_tokens, sampler, stop_ids, ignore_eos, on_token)
          : engine.generate(sequence, prompt, max_tokens, sampler, stop_ids, ignore_eos, on_token,
                            logits, media_rows);
  on_piece(kTextTail, decoder.finish(), {});
  return stats;
}

nlohmann::json experts_json(const ExpertSourceStats& stats) {
  return {{"requested", stats.requests},       {"hits", stats.hits},
          {"reads", stats.reads},              {"bytes_read", stats.bytes_read},
          {"wait_seconds", stats.wait_seconds}, {"direct_io", stats.direct_io}};
}

nlohmann::json generation_json(const GenerationStats& stats, uint32_t context) {
  const double decode_rate =
      stats.decode_seconds > 0 ? stats.generated_tokens / stats.decode_seconds : 0.0;
  const double prefill_rate =
      stats.prefill_seconds > 0 ? stats.prompt_tokens / stats.prefill_seconds : 0.0;
  return {{"prompt_tokens", stats.prompt_tokens},
          {"generated_tokens", stats.generated_tokens},
          {"prefill_seconds", stats.prefill_seconds},
          {"decode_seconds", stats.decode_seconds},
          {"tok_per_s", decode_rate},
          {"prefill_tok_per_s", prefill_rate},
          {"finish_reason", finish_reason_name(stats.finish)},
          {"context", context},
          {"context_full", stats.context_full},
          {"experts", experts_json(stats.experts)}};
}

}  // namespace sluice
