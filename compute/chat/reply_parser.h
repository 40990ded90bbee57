// compute/chat/reply_parser.h: splits a model's generated tokens into content,
// reasoning and tool calls as they arrive (serving.md 7). Structure is decided
// by token id only: text that spells a marker is always content.
// It never throws on malformed output; it never looks at the prompt.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "compute/tokenizer/tokenizer.h"

namespace sluice::chat {

using tokenizer::TokenId;

// How a family writes tool calls (every marker is one added token).
enum class ToolSyntax {
  kNone,
  // Qwen3 / Hermes: <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>, repeatable.
  kQwen3,
  // DeepSeek-V3:
  // <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\nARGS\n```
  // <｜tool▁call▁end｜>...<｜tool▁calls▁end｜>; V3.1's NAME<｜tool▁sep｜>ARGS also parses.
  kDeepSeekV3,
  // Kimi K2 / Kimi-Linear: <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX
  // <|tool_call_argument_begin|>{json}<|tool_call_end|>...<|tool_calls_section_end|>.
  kKimi,
  // Kimi K3 (XTML, k3.md §5): elements <|open|>TAG ATTRS<|sep|>BODY<|close|>TAG<|sep|>;
  // think (reasoning), response (content), tools > call tool="NAME" > argument
  // key="K" type="T" (or json type="object" holding the raw arguments).
  kXtml,
};

// The marker ids of one tokenizer, looked up once by their text among its
// added tokens; a marker the tokenizer lacks is nullopt.
struct ReplyFormat {
  ToolSyntax tools = ToolSyntax::kNone;
  std::optional<TokenId> think_open, think_close;  // <think>, </think>
  // kQwen3: <tool_call>, </tool_call>. kDeepSeekV3: calls begin/end, call
  // begin/end, sep. kKimi: section begin/end, call begin/end, argument begin.
  // kXtml: <|open|> and <|close|> as section_open and section_close, <|sep|>
  // as separator.
  std::optional<TokenId> section_open, section_close, call_open, call_close, separator;
  bool thinks() const { return think_open && think_close; }
};

// Reads the family's markers from the tokenizer's added tokens (Qwen3's
// <tool_call>, DeepSeek's <｜tool▁calls▁begin｜>, Kimi's
// <|tool_calls_section_begin|>, <think>/</think>).
ReplyFormat reply_format_for(const tokenizer::Tokenizer& tokenizer);

struct ToolCall {
  std::string id;  // Kimi: functions.NAME:IDX as generated; else made here
  std::string name;
  std::string arguments;  // JSON text, as generated
};

// What the parser knows once the reply is over.
struct Reply {
  std::string content;
  std::string reasoning;
  std::vector<ToolCall> tool_calls;
};

// One piece of the reply, in generation order. Concatenating the content
// (reasoning) events gives Reply::content (reasoning); a call's kToolCall
// event comes once, with its index, id and name, before any of its
// kToolArguments pieces, which concatenate to its arguments.
struct ReplyEvent {
  enum class Kind { kContent, kReasoning, kToolCall, kToolArguments };
  Kind kind;
  std::string text;  // content, reasoning or an arguments piece (valid UTF-8)
  size_t tool_index = 0;
  std::string id, name;  // kToolCall only
};

struct ReplyOptions {
  // The prompt already opened <think> (the template pre-fills it): the reply
  // starts as reasoning.
  bool in_reasoning = false;
  // Ids of server-made calls are "call_" + 24 characters drawn from this seed
  // and the call's index, so a test can predict them; 0 draws a random seed.
  uint64_t id_seed = 0;
};

// Not thread-safe; one per reply. Holds back only incomplete UTF-8, the
// content's trailing whitespace until text follows (at the end it is content
// only in a reply without calls, as OpenAI sends content null beside calls)
// and, in a call's arguments, the tail that may be the call's closing syntax
// (Qwen3's final '}', DeepSeek's closing fence).
class ReplyParser {
 public:
  ReplyParser(const tokenizer::Tokenizer& tokenizer, ReplyFormat format, ReplyOptions options = {});
  ~ReplyParser();
  ReplyParser(ReplyParser&&) noexcept;

  // Appends to `events` what this token completes. Special tokens that are
  // not markers (end of turn, end of sequence) add nothing.
  void push(TokenId id, std::vector<ReplyEvent>& events);
  // Ends the reply: flushes whatever was held back. A call cut short keeps
  // what arrived of it.
  void finish(std::vector<ReplyEvent>& events);
  // Everything so far (complete after finish()).
  const Reply& reply() const;

  struct State;

 private:
  std::unique_ptr<State> state_;
};

// Parses a whole reply at once: push() of every id, then finish().
Reply parse_reply(const tokenizer::Tokenizer& tokenizer, const ReplyFormat& format,
                  const std::vector<TokenId>& ids, ReplyOptions options = {});

}  // namespace sluice::chat
