// tests/fuzz/fuzz_text_targets.cpp: the fuzz targets for text a client or a
// checkpoint writes: chat templates (from checkpoints), JSON schemas and the
// constrained decoding they drive, tiktoken rank files, XTML conversations and
// HTTP request bodies (from clients). Seeds are built here; no files are read.
#include <cstring>
#include <functional>
#include <random>
#include <stdexcept>
#include <string_view>

#include <nlohmann/json.hpp>

#include "compute/chat/chat_template.h"
#include "compute/chat/json_constraint.h"
#include "compute/chat/xtml.h"
#include "compute/serve/api_error.h"
#include "compute/serve/request.h"
#include "compute/tokenizer/tokenizer.h"
#include "proto/base64.h"
#include "proto/error.h"
#include "tests/compute/chat/constrained_walk.h"
#include "tests/fuzz/fuzz_targets.h"

namespace sluice::fuzz {
namespace {

using ordered_json = nlohmann::ordered_json;

std::string_view text_of(const uint8_t* data, size_t size) { return {reinterpret_cast<const char*>(data), size}; }

// --- chat templates ------------------------------------------------------

// The contexts every template is rendered in: no messages, a plain
// conversation, and one with tools, tool calls and an extra keyword.
const std::vector<chat::ChatInput>& template_inputs() {
  static const std::vector<chat::ChatInput> inputs = [] {
    std::vector<chat::ChatInput> all(3);
    all[1].messages = ordered_json::parse(R"([{"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi <|im_end|> {{ x }}"}, {"role": "assistant", "content": "hello"}])");
    all[1].add_generation_prompt = true;
    all[1].special_tokens = {{"bos_token", "<s>"}, {"eos_token", "</s>"}};
    all[2].messages = ordered_json::parse(R"([{"role": "user", "content": "weather?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
          "function": {"name": "get", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "mild"}])");
    all[2].tools = ordered_json::parse(R"([{"type": "function", "function": {"name": "get",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])");
    all[2].extra = {{"enable_thinking", false}};
    return all;
  }();
  return inputs;
}

bool run_chat_template(const uint8_t* data, size_t size) {
  std::optional<chat::ChatTemplate> parsed;
  try {
    parsed.emplace(chat::ChatTemplate::parse(text_of(data, size), "fuzz.jinja"));
  } catch (const Error&) {
    return false;
  }
  // Small limits keep a case fast; reaching one is a clean refusal.
  const chat::RenderLimits limits{.max_output_bytes = 1 << 16, .max_call_depth = 16, .max_steps = 20000};
  bool rendered = false;
  for (const chat::ChatInput& input : template_inputs()) {
    try {
      (void)parsed->render(input, limits);
      rendered = true;
    } catch (const Error&) {
    }
  }
  return rendered;
}

std::vector<std::string> chat_template_seeds() {
  return {
      "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
      "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
      "{{ bos_token }}{% if tools %}{{ tools | tojson(indent=2) }}{% endif %}{% for m in messages %}"
      "{% if m.role == 'tool' %}[{{ m.content | trim }}]{% elif m.tool_calls %}{% for c in m.tool_calls %}"
      "{{ c.function.name }}({{ c.function.arguments }}){% endfor %}{% else %}{{ m.content }}{% endif %}"
      "{% if not loop.last %}\n{% endif %}{% endfor %}{{ eos_token }}",
      "{% macro show(x, sep=', ') -%}{{ x | join(sep) }}{%- endmacro %}{% set ns = namespace(n=0) %}"
      "{% for m in messages | selectattr('role', 'equalto', 'user') %}{% set ns.n = ns.n + 1 %}"
      "{{ show([m.content | upper, loop.index, ns.n]) }}{% endfor %}{{ (messages | length) * 2 }}"
      "{{ 'a,b'.split(',') | join('+') }}{{ range(3) | list | length }}",
      "{%- if messages[0]['role'] == 'system' -%}{{ raise_exception('no system') }}{%- endif -%}"
      "{{ messages[-1].content[:5] ~ enable_thinking | default(true) | string }}"
      "{{ {'k': [1, 2.5, none, true]} | tojson }}{{ 'x' if messages else 'y' }}",
  };
}

// --- JSON schemas and constrained decoding -------------------------------

bool run_json_schema(const uint8_t* data, size_t size) {
  nlohmann::json schema;
  try {
    schema = nlohmann::json::parse(text_of(data, size));
  } catch (const nlohmann::json::exception&) {
    return false;
  }
  std::shared_ptr<const chat::JsonGrammar> grammar;
  try {
    grammar = chat::JsonGrammar::from_schema(schema);
  } catch (const Error&) {
    return false;
  }
  std::mt19937_64 rng(std::hash<std::string_view>{}(text_of(data, size)));
  for (int walk = 0; walk < 4; ++walk) {
    const auto [text, complete] = testing::constrained_walk(grammar, rng);
    if (!complete) continue;
    // The grammar matches a completed walk whole. (Whether it is valid for the
    // schema is python3-jsonschema's to say: chat_schema_oracle_test.)
    if (!chat::matches(grammar, text)) throw std::logic_error("json schema: matches() refuses its own walk: " + text);
  }
  return true;
}

std::vector<std::string> json_schema_seeds() {
  return {
      R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
          "age": {"type": "integer", "minimum": 0, "maximum": 150}, "tags": {"type": "array",
          "items": {"enum": ["a", "b", 3, null]}, "maxItems": 3}}, "required": ["name"]})",
      R"({"$defs": {"p": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"$ref": "#/$defs/q"}},
          "additionalProperties": false}, "q": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
          "type": "array", "prefixItems": [{"$ref": "#/$defs/p"}, {"const": true}], "minItems": 2})",
      R"({"type": ["string", "boolean"], "minLength": 2})",
      R"({"allOf": [{"type": "object", "properties": {"k": {"type": "array", "items": {"type": "integer"}}},
          "required": ["k"], "additionalProperties": true}]})",
  };
}

// --- tiktoken rank files -------------------------------------------------

bool run_tiktoken(const uint8_t* data, size_t size) {
  try {
    const auto tok = tokenizer::Tokenizer::from_tiktoken(text_of(data, size), "fuzz/tiktoken.model");
    const auto ids = tok.encode("hello  world\n\n123 héllo");
    (void)tok.decode_bytes(ids);
    return true;
  } catch (const Error&) {
    return false;
  }
}

std::vector<std::string> tiktoken_seeds() {
  std::string ranks;
  uint32_t rank = 0;
  for (int b = 0; b < 256; ++b) {
    const uint8_t byte = static_cast<uint8_t>(b);
    ranks += encode_base64(std::span(&byte, 1)) + " " + std::to_string(rank++) + "\n";
  }
  for (std::string_view merged : {"he", "ll", "hell", "hello", " w", "or", " wor", "ld", " world", "12"}) {
    ranks += encode_base64(std::span(reinterpret_cast<const uint8_t*>(merged.data()), merged.size())) + " " +
             std::to_string(rank++) + "\n";
  }
  return {ranks};
}

// --- XTML conversations --------------------------------------------------

bool run_xtml(const uint8_t* data, size_t size) {
  ordered_json request;
  try {
    request = ordered_json::parse(text_of(data, size));
  } catch (const nlohmann::json::exception&) {
    return false;
  }
  if (!request.is_object()) return false;
  chat::ChatInput input;
  input.messages = request.value("messages", ordered_json::array());
  input.tools = request.value("tools", ordered_json(nullptr));
  input.tool_choice = request.value("tool_choice", ordered_json(nullptr));
  input.response_format = request.value("response_format", ordered_json(nullptr));
  input.extra = request.value("extra", ordered_json::object());
  input.add_generation_prompt = true;
  try {
    (void)chat::render_xtml(input);
    return true;
  } catch (const Error&) {
    return false;
  }
}

std::vector<std::string> xtml_seeds() {
  return {
      R"({"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": [{"type": "text",
          "text": "weather <|open|>?"}]}, {"role": "assistant", "reasoning_content": "think", "content": "",
          "tool_calls": [{"id": "functions.get:0", "type": "function", "function": {"name": "get",
          "arguments": "{\"city\": \"Paris\", \"n\": 2}"}}]}, {"role": "tool", "tool_call_id": "functions.get:0",
          "content": "mild"}], "tools": [{"type": "function", "function": {"name": "get", "description": "d",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
          "tool_choice": "required", "extra": {"thinking_effort": "low"}})",
      R"({"messages": [{"role": "developer", "content": "x", "tools": [{"type": "function", "function":
          {"name": "late", "parameters": {}}}]}, {"role": "user", "content": "json please"}],
          "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": {"type": "object"}}},
          "extra": {"enable_thinking": false}})",
  };
}

// --- HTTP request bodies -------------------------------------------------

bool run_http_request(const uint8_t* data, size_t size) {
  try {
    const nlohmann::json body = serve::parse_body(std::string(text_of(data, size)));
    bool accepted = false;
    try {
      (void)serve::parse_chat_request(body, 1);
      accepted = true;
    } catch (const serve::ApiError&) {
    }
    try {
      (void)serve::parse_completion_request(body, 1);
      accepted = true;
    } catch (const serve::ApiError&) {
    }
    return accepted;
  } catch (const serve::ApiError&) {
    return false;
  }
}

std::vector<std::string> http_request_seeds() {
  return {
      R"({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 16, "temperature": 0.7,
          "top_p": 0.9, "seed": 5, "stream": true, "stream_options": {"include_usage": true}, "stop": ["\n", "x"],
          "response_format": {"type": "json_object"}, "tool_choice": "auto", "logit_bias": {"5": -1.5}})",
      R"({"prompt": [[1, 2, 3]], "max_tokens": 4, "echo": true, "presence_penalty": 0.5, "n": 1})",
      R"({"prompt": "once upon", "stop": "the end", "frequency_penalty": -1.5, "top_k": 40, "min_p": 0.05})",
  };
}

}  // namespace

std::vector<Target> text_targets() {
  return {
      {"chat_template", run_chat_template, chat_template_seeds, false},
      {"json_schema", run_json_schema, json_schema_seeds, true},
      {"tiktoken", run_tiktoken, tiktoken_seeds, false},
      {"xtml", run_xtml, xtml_seeds, true},
      {"http_request", run_http_request, http_request_seeds, true},
  };
}

}  // namespace sluice::fuzz
