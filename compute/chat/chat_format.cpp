// compute/chat/chat_format.cpp: the Jinja and XTML chat formats behind
// chat_format.h, and the choice between them by the container's family. It
// holds no state that a render changes; both formats are safe to share
// between threads.
#include "compute/chat/chat_format.h"

#include <fstream>
#include <utility>

#include "compute/chat/normalize.h"
#include "compute/chat/xtml.h"
#include "proto/error.h"
#include "proto/family_spec.h"

namespace sluice::chat {
namespace {

using json = nlohmann::ordered_json;
using tokenizer::TokenId;

class JinjaChatFormat final : public ChatFormat {
 public:
  JinjaChatFormat(ChatTemplate t, const tokenizer::Tokenizer& tok, json special_tokens)
      : template_(std::move(t)),
        tokenizer_(tok),
        special_tokens_(std::move(special_tokens)),
        normalize_(normalize_options_for(template_)),
        reply_(reply_format_for(tok)) {}

  std::string_view name() const override { return "chat template"; }

  Rendered render(const ChatInput& given) const override {
    ChatInput input = given;
    if (!input.raw_messages) input.messages = normalize_messages(input.messages, normalize_);
    // "none": the model is not told about the tools; "required" and a named
    // function reach it only through the tools it is shown.
    if (input.tool_choice == "none") input.tools = nullptr;
    if (input.special_tokens.empty()) input.special_tokens = special_tokens_;
    return template_.render(input);
  }

  std::vector<TokenId> tokenize(const Rendered& rendered) const override {
    return chat::tokenize(tokenizer_, rendered);
  }

  const ReplyFormat& reply_format() const override { return reply_; }
  bool thinks() const override { return reply_.thinks(); }

  bool opens_reasoning(std::span<const TokenId> prompt) const override {
    if (!reply_.thinks()) return false;
    for (auto it = prompt.rbegin(); it != prompt.rend(); ++it) {
      if (*it == *reply_.think_close) return false;
      if (*it == *reply_.think_open) return true;
    }
    return false;
  }

  ConstraintOptions constraint_frame(std::span<const TokenId> prompt,
                                     std::vector<TokenId> end_ids) const override {
    ConstraintOptions frame;
    frame.end_ids = std::move(end_ids);
    if (reply_.thinks()) {
      frame.start_after = reply_.think_close;
      frame.reasoning_open = reply_.think_open;
      frame.starts_free = opens_reasoning(prompt);
    }
    return frame;
  }

 private:
  ChatTemplate template_;
  const tokenizer::Tokenizer& tokenizer_;
  json special_tokens_;
  NormalizeOptions normalize_;
  ReplyFormat reply_;
};

class XtmlChatFormat final : public ChatFormat {
 public:
  explicit XtmlChatFormat(const tokenizer::Tokenizer& tok)
      : tokenizer_(tok), reply_(xtml_reply_format(tok)) {}

  std::string_view name() const override { return "XTML"; }
  Rendered render(const ChatInput& input) const override { return render_xtml(input); }
  std::vector<TokenId> tokenize(const Rendered& rendered) const override {
    return tokenize_xtml(tokenizer_, rendered);
  }
  const ReplyFormat& reply_format() const override { return reply_; }
  bool thinks() const override { return true; }  // every K3 reply may open a think element
  bool opens_reasoning(std::span<const TokenId> prompt) const override {
    return xtml_opens_reasoning(tokenizer_, prompt);
  }
  ConstraintOptions constraint_frame(std::span<const TokenId> prompt,
                                     std::vector<TokenId> end_ids) const override {
    return xtml_constraint_frame(reply_, opens_reasoning(prompt), std::move(end_ids));
  }

 private:
  const tokenizer::Tokenizer& tokenizer_;
  ReplyFormat reply_;
};

}  // namespace

std::unique_ptr<ChatFormat> jinja_chat_format(ChatTemplate chat_template,
                                              const tokenizer::Tokenizer& tokenizer,
                                              json special_tokens) {
  return std::make_unique<JinjaChatFormat>(std::move(chat_template), tokenizer,
                                           std::move(special_tokens));
}

std::unique_ptr<ChatFormat> xtml_chat_format(const tokenizer::Tokenizer& tokenizer) {
  return std::make_unique<XtmlChatFormat>(tokenizer);
}

std::unique_ptr<ChatFormat> chat_format_for(const Container& container,
                                            const tokenizer::Tokenizer& tokenizer) {
  const FamilySpec* family = find_family(container.arch());
  if (family && family->chat_format == ChatFormatKind::kXtml) return xtml_chat_format(tokenizer);
  if (!container.chat_template()) return nullptr;
  json special_tokens = json::object();
  const std::string config_path = container.dir() + "/tokenizer_config.json";
  if (std::ifstream config(config_path, std::ios::binary); config) {
    const json parsed = json::parse(config, nullptr, false);
    if (parsed.is_discarded()) fail("{}: not valid JSON", config_path);
    special_tokens = special_tokens_from_config(parsed);
  }
  return jinja_chat_format(
      ChatTemplate::parse(*container.chat_template(), container.dir() + " chat_template"),
      tokenizer, std::move(special_tokens));
}

ChatInput chat_input_from_request(nlohmann::ordered_json request, std::string_view where) {
  ChatInput input;
  if (request.is_object()) {
    if (!request.contains("messages")) fail("{}: the object has no \"messages\"", where);
    if (request.contains("tools")) input.tools = request["tools"];
    if (request.contains("tool_choice")) input.tool_choice = request["tool_choice"];
    if (request.contains("response_format")) input.response_format = request["response_format"];
    if (request.contains("reasoning_effort"))
      input.extra["reasoning_effort"] = request["reasoning_effort"];
    request = nlohmann::ordered_json(request["messages"]);
  }
  if (!request.is_array()) fail("{}: expected an array of messages or a request object", where);
  input.messages = std::move(request);
  return input;
}

}  // namespace sluice::chat
