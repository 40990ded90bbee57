// compute/chat/xtml.h: Kimi K3's prompt format, XTML (k3.md §5), written as
// code: messages become segments flagged markup or text, and each segment is
// encoded on its own. Text (anything a client, a document or a tool wrote)
// is never searched for control tokens.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "compute/chat/chat_template.h"
#include "compute/chat/json_constraint.h"
#include "compute/chat/reply_parser.h"
#include "compute/tokenizer/tokenizer.h"

namespace sluice::chat {

// The fixed texts of encoding_k3.py, the released encoder, byte for byte
// (read in vLLM's copy of it). Each is the start of, or the whole of, a text
// segment: the encoder writes every message body as text.
inline constexpr std::string_view kXtmlToolDeclarePreamble =
    "# Tools\nHere are the available tools, described in JSONSchema.\n\n";
// A system message carrying tools (lazily loaded tools), wherever it stands.
inline constexpr std::string_view kXtmlToolDeclareLaterPreamble =
    "## New Tools Available\nThe system dynamically extends the toolset via lazy-loading.\nYou "
    "have access to all existing and extended tools.\nHere are the specs for the extended "
    "tools.\n\n";
inline constexpr std::string_view kXtmlThinkingEffortNote =
    "`thinking_effort` guides on how much to think in your thinking channel (not including the "
    "response channel), supported values include `low`, `medium`, `high`, and `max`.\nNow the "
    "system is invoked with `thinking_effort={}`.";
inline constexpr std::string_view kXtmlToolChoiceRequiredNote =
    "The system is invoked with `tool_choice=required`.\nYou MUST call tools in the next message.";
inline constexpr std::string_view kXtmlToolChoiceNoneNote =
    "The system is invoked with `tool_choice=none`.\nYou MUST NOT call any tools in the next "
    "message.";
inline constexpr std::string_view kXtmlJsonObjectNote =
    "The system is invoked with `response_format=json_object`.\nYour response must be raw JSON "
    "data without markdown code blocks (```json) or any additional formatting.";
// Followed by the schema (compact, keys sorted) and "\n```".
inline constexpr std::string_view kXtmlJsonSchemaNote =
    "The system is invoked with `response_format=json_schema`.\nYour response must be raw JSON "
    "data without markdown code blocks (```json) or any additional formatting.\nThe JSON data "
    "must match the following schema:\n```json\n";
// The thinking efforts encoding_k3.py accepts (its note also names medium).
inline constexpr std::string_view kXtmlEfforts[] = {"low", "high", "max"};

// An attribute value as XTML writes it: & then " escaped, nothing else.
std::string xtml_escape_attribute(std::string_view value);

// Renders the conversation as XTML. Reads `input.messages` (OpenAI-shaped:
// system, developer, user, assistant with reasoning_content and tool_calls,
// tool), `input.tools`, `input.tool_choice`, `input.response_format`,
// `input.extra["enable_thinking"]` (default true) and
// `input.extra["thinking_effort"]` (or "reasoning_effort"), as
// encoding_k3.py's build_chat_segments writes them. A system (or developer)
// message carrying a non-empty "tools" list is the lazily-loaded tools'
// declaration, wherever it stands, and its content is not written (as the
// released encoder does). Developer messages are written as system ones (the
// released encoder drops them). Image parts become media blocks through
// `input.images`. Throws Error naming the message and field that cannot be
// written (where the released encoder skips what it cannot read).
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
