// compute/serve/request.h: the bodies of /v1/chat/completions and
// /v1/completions checked field by field and turned into what a generation
// needs. Every refusal is an ApiError naming the field; unknown fields are
// ignored as OpenAI's own server ignores them. No tokenizing here.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "compute/model/sampler.h"

namespace sluice::serve {

using json = nlohmann::ordered_json;

// What both endpoints share: sampling, limits, stop strings, streaming.
struct GenerationSettings {
  SamplingParams sampling;         // temperature, top_p, seed (drawn when absent)
  float presence_penalty = 0.0f;   // -2..2, over the tokens generated so far
  float frequency_penalty = 0.0f;  // -2..2, times each token's count so far
  std::vector<std::pair<int32_t, float>> logit_bias;  // added to the logits; -100 bans a token
  std::optional<uint32_t> max_tokens;                 // absent: what the context leaves
  std::vector<std::string> stop;                      // at most 4, never returned
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
};

struct ChatRequest {
  json messages;         // as sent; normalised when rendered
  json tools = nullptr;  // null when absent (the template sees None)
  json tool_choice = nullptr;
  bool parallel_tool_calls = true;  // a required call may be followed by more
  json response_format = nullptr;
  json template_kwargs = json::object();  // chat_template_kwargs (enable_thinking, ...)
  GenerationSettings settings;
};

struct CompletionRequest {
  std::optional<std::string> prompt_text;  // a string, or a list of one string
  std::vector<int32_t> prompt_ids;         // a list of token ids, or a list of one such list
  bool echo = false;
  GenerationSettings settings;
};

// Throw ApiError (400, with param) for anything out of shape or range.
// `seed` is used when the request has none.
ChatRequest parse_chat_request(const json& body, uint64_t default_seed);
CompletionRequest parse_completion_request(const json& body, uint64_t default_seed);

// The body as JSON, or a 400 naming what is wrong with it.
json parse_body(const std::string& text);

}  // namespace sluice::serve
