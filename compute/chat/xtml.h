// compute/chat/xtml.h: Kimi K3's prompt format, XTML (k3.md §5), written as
// code: messages become segments flagged markup or text, and each segment is
// encoded on its own. Text (anything a client, a document or a tool wrote)
// is never searched for control tokens.
#pragma once

#include <span>
#include <string_view>
#include <vector>

#include "compute/chat/chat_template.h"
#include "compute/chat/json_constraint.h"
#include "compute/chat/reply_parser.h"
#include "compute/tokenizer/tokenizer.h"

namespace sluice::chat {

// The fixed texts of encoding_k3.py, which is not available here: each is
// written to the spec's description and NOT confirmed byte-exact. A prompt
// with tools, a thinking effort, a tool choice or a response format differs
// from the released encoder's in these texts (and only there).
inline constexpr std::string_view kXtmlToolDeclarePreamble =
    "# Tools\n\nYou have access to the tools declared below in JSON; call them when they help.\n\n";
// Tools introduced mid-conversation (encoding_k3.py's lazily loaded tools).
inline constexpr std::string_view kXtmlToolDeclareLaterPreamble =
    "# Tools\n\nFrom here on you also have access to the tools declared below in JSON; call them "
    "when they help.\n\n";
inline constexpr std::string_view kXtmlThinkingEffortNote =
    "Thinking effort: {}. (Effort is one of low, medium, high or max.)";
inline constexpr std::string_view kXtmlToolChoiceRequiredNote =
    "You must call at least one of the declared tools in your reply.";
inline constexpr std::string_view kXtmlToolChoiceNoneNote =
    "Do not call any tool in your reply; answer directly.";
inline constexpr std::string_view kXtmlJsonObjectNote =
    "Your response must be a single JSON object.";
inline constexpr std::string_view kXtmlJsonSchemaNote =
    "Your response must be a single JSON value that matches this JSON schema:\n";
// The thinking efforts encoding_k3.py accepts (its note also names medium).
inline constexpr std::string_view kXtmlEfforts[] = {"low", "high", "max"};

// Renders the conversation as XTML. Reads `input.messages` (OpenAI-shaped:
// system, developer, user, assistant with reasoning_content and tool_calls,
// tool), `input.tools`, `input.tool_choice`, `input.response_format`,
// `input.extra["enable_thinking"]` (default true) and
// `input.extra["thinking_effort"]` (or "reasoning_effort"). A system or
// developer message may carry "tools": they are declared where it stands,
// with the mid-conversation preamble once any other message came before it,
// and its content, if any, follows as a system message. Image parts
// become media blocks through `input.images`. Throws Error naming the
// message and field that cannot be written.
Rendered render_xtml(const ChatInput& input);

// Ids of an XTML prompt: markup segments resolve control-token text to ids
// (earliest match, then longest, anywhere in the segment); text segments
// are encoded with every special disallowed. No BOS.
std::vector<tokenizer::TokenId> tokenize_xtml(const tokenizer::Tokenizer& tokenizer,
                                              const Rendered& rendered);

// The markers the K3 reply parser reads by id: <|open|>, <|close|>,
// <|sep|>; the end of message stops generation. Throws Error naming the
// marker the tokenizer lacks.
ReplyFormat xtml_reply_format(const tokenizer::Tokenizer& tokenizer);

// Whether `prompt` ends by opening a think element (the generation prompt
// with thinking on): the reply then starts as reasoning.
bool xtml_opens_reasoning(const tokenizer::Tokenizer& tokenizer,
                          std::span<const tokenizer::TokenId> prompt);

// The frame of a constrained XTML reply: with thinking on (`in_reasoning`),
// the think element is free until <|close|>, then think<|sep|><|open|>
// response<|sep|> opens the response; a constrained value then closes the
// response and the message before one of `end_ids`.
ConstraintOptions xtml_constraint_frame(const ReplyFormat& format, bool in_reasoning,
                                        std::vector<tokenizer::TokenId> end_ids);

}  // namespace sluice::chat
