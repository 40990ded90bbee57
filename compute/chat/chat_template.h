// compute/chat/chat_template.h: the public face of the chat room — a
// checkpoint's Jinja chat template rendered as Hugging Face renders it, with
// the output split into markup (the template's own text) and content (text
// that came from messages or tools). Content never becomes a control token.
#pragma once

#include <cstdint>
#include <functional>
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

// An image part of a message as the vision side measured it: the original
// file's size (the media block names it) and how many prompt positions its
// single pad token expands to.
struct ImagePlacement {
  uint32_t width = 0, height = 0;
  uint32_t positions = 0;
};
// Measures image part `part`, the prompt's `index`-th image (from 0); `where`
// names the part in errors ("messages[1].content[2]").
using ImageResolver = std::function<ImagePlacement(const nlohmann::ordered_json& part, size_t index,
                                                   const std::string& where)>;

// What apply_chat_template passes to the template.
struct ChatInput {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools = nullptr;  // null renders as None, as HF passes it
  bool add_generation_prompt = false;
  // Special-token strings (bos_token, eos_token, ...): template markup.
  nlohmann::ordered_json special_tokens = nlohmann::ordered_json::object();
  // Extra keyword arguments (enable_thinking, ...): content, like messages.
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  // The request's tool_choice and response_format (null when absent), for
  // formats that write them into the prompt (XTML); a Jinja template never
  // sees them.
  nlohmann::ordered_json tool_choice = nullptr;
  nlohmann::ordered_json response_format = nullptr;
  // Pass the messages as given, without normalize.h (`sluice template --raw`).
  bool raw_messages = false;
  // Null: image parts are refused, naming the part.
  ImageResolver images;
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
  // One per image pad token, in prompt order (formats with media blocks).
  std::vector<ImagePlacement> images;
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
