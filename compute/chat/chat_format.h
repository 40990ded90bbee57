// compute/chat/chat_format.h: a model's chat format as one object — how a
// conversation becomes prompt ids and how the reply is read back. The family
// names the format (proto/family_spec.h): the checkpoint's Jinja template or
// Kimi K3's XTML. Callers (template, chat, serve) never branch on the family.
#pragma once

#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "compute/chat/chat_template.h"
#include "compute/chat/json_constraint.h"
#include "compute/chat/reply_parser.h"
#include "compute/tokenizer/tokenizer.h"
#include "proto/container.h"

namespace sluice::chat {

class ChatFormat {
 public:
  virtual ~ChatFormat() = default;
  // "chat template" or "XTML", for messages.
  virtual std::string_view name() const = 0;
  // Normalises the messages as the format needs and renders them. Throws
  // ChatTemplateError (the template failed or raised) or Error naming the
  // message and field it cannot write.
  virtual Rendered render(const ChatInput& input) const = 0;
  // The prompt ids; text that came from messages never becomes a control token.
  virtual std::vector<tokenizer::TokenId> tokenize(const Rendered& rendered) const = 0;
  virtual const ReplyFormat& reply_format() const = 0;
  // Whether the model has a thinking mode whose reasoning the reply parser
  // tells apart (think markers, or XTML's think element).
  virtual bool thinks() const = 0;
  // Whether `prompt` leaves the reply inside reasoning (a pre-opened <think>
  // or XTML think element).
  virtual bool opens_reasoning(std::span<const tokenizer::TokenId> prompt) const = 0;
  // What surrounds a constrained reply to `prompt` (token_grammar.h): its
  // reasoning, kept free, and the syntax between it, the constrained part
  // and one of `end_ids`.
  virtual ConstraintOptions constraint_frame(std::span<const tokenizer::TokenId> prompt,
                                             std::vector<tokenizer::TokenId> end_ids) const = 0;
};

// The format the container's family names, over `tokenizer` (which must
// outlive it); nullptr when the family uses a Jinja template and the
// container has none. Throws Error naming the file or token that is wrong.
std::unique_ptr<ChatFormat> chat_format_for(const Container& container,
                                            const tokenizer::Tokenizer& tokenizer);

// A ChatInput from `request`: an array of OpenAI chat messages, or a
// chat-completions request object with "messages" (and "tools",
// "tool_choice", "response_format", "reasoning_effort"). Throws Error
// beginning with `where` when it is neither.
ChatInput chat_input_from_request(nlohmann::ordered_json request, std::string_view where);

// The two formats, for tests and for chat_format_for.
std::unique_ptr<ChatFormat> jinja_chat_format(ChatTemplate chat_template,
                                              const tokenizer::Tokenizer& tokenizer,
                                              nlohmann::ordered_json special_tokens);
std::unique_ptr<ChatFormat> xtml_chat_format(const tokenizer::Tokenizer& tokenizer);

}  // namespace sluice::chat
