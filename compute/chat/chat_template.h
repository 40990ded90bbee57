// compute/chat/chat_template.h: the public face of the chat room — a
// checkpoint's Jinja chat template rendered as Hugging Face renders it, with
// the output split into markup (the template's own text) and content (text
// that came from messages or tools). Content never becomes a control token.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "compute/tokenizer/tokenizer.h"
#include "proto/error.h"

namespace sluice::chat {

// A render or parse failure: "chat template NAME line N: what". `raised` is
// set when the template called raise_exception; `reason` is then its own
// message, verbatim.
class ChatTemplateError : public Error {
 public:
  ChatTemplateError(const std::string& message, int line, bool raised, std::string reason)
      : Error(message), line(line), raised(raised), reason(std::move(reason)) {}
  int line;
  bool raised;
  std::string reason;
};

// What apply_chat_template passes to the template.
struct ChatInput {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools = nullptr;  // null renders as None, as HF passes it
  bool add_generation_prompt = false;
  // Special-token strings (bos_token, eos_token, ...): template markup.
  nlohmann::ordered_json special_tokens = nlohmann::ordered_json::object();
  // Extra keyword arguments (enable_thinking, ...): content, like messages.
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
};

struct RenderLimits {
  size_t max_output_bytes = size_t{16} << 20;
  int max_call_depth = 64;
  uint64_t max_steps = 2'000'000;  // real templates take thousands
};

// One run of rendered text, wholly markup or wholly content.
struct Segment {
  std::string text;
  bool content;
};

struct Rendered {
  std::vector<Segment> segments;
  std::string text() const;
};

struct Program;

class ChatTemplate {
 public:
  // Parses `source`; `name` labels every error. Throws ChatTemplateError.
  static ChatTemplate parse(std::string_view source, std::string name);
  // Safe to call from several threads at once: a render shares nothing
  // mutable with another.
  Rendered render(const ChatInput& input, const RenderLimits& limits = {}) const;
  const std::string& name() const { return name_; }

  // What the template does with message fields, for normalize.h: whether it
  // tests `<...>.NAME is none` (or `is not none`), applies a filter FILTER to
  // `<...>.NAME`, or tests `<...>.NAME is string`.
  bool tests_none_on(std::string_view attribute) const;
  bool filters_attribute(std::string_view attribute, std::string_view filter) const;
  bool tests_string_on(std::string_view attribute) const;

 private:
  std::shared_ptr<const Program> program_;
  std::string name_;
};

// The special-token strings tokenizer_config.json defines (bos_token,
// eos_token, unk_token, pad_token as strings or AddedToken objects), as the
// template context gets them.
nlohmann::ordered_json special_tokens_from_config(const nlohmann::ordered_json& tokenizer_config);

// Token ids for a rendered prompt. Control tokens are recognised only inside
// markup; the text between two of them (markup and content together) is
// encoded with Tokenizer::encode, so for benign content the ids equal
// encode_with_specials of the whole text, as Hugging Face tokenizes it. No
// BOS is added: templates that want one write it. An added token's
// lstrip/rstrip (swallowing neighbouring whitespace) is not reproduced; the
// Qwen3 and DeepSeek-V3 added tokens have neither.
std::vector<tokenizer::TokenId> tokenize(const tokenizer::Tokenizer& tokenizer,
                                         const Rendered& rendered);

}  // namespace sluice::chat
