// compute/chat/normalize.h: turns messages as OpenAI clients send them into
// the shape real chat templates expect (content null or a list of parts,
// tool-call arguments as a JSON string or an object, the developer role).
// It rejects what no template can show (images) with an error naming the
// message; it never changes the text of a message.
#pragma once

#include <nlohmann/json.hpp>

#include "compute/chat/chat_template.h"

namespace sluice::chat {

struct NormalizeOptions {
  // Keep `content: null` on assistant turns that carry tool calls (and turn
  // "" into null there): DeepSeek-V3 renders the calls only then. Otherwise
  // null content becomes "" (Qwen3 raises a TypeError on null).
  bool null_content_with_tool_calls = false;
  enum class Arguments { kAsGiven, kString, kObject };
  // kString: objects are written as JSON text (templates that concatenate);
  // kObject: JSON text is parsed (templates that apply tojson themselves).
  Arguments arguments = Arguments::kAsGiven;
};

// What `tmpl` expects, read from how it uses `content` and `arguments`.
NormalizeOptions normalize_options_for(const ChatTemplate& tmpl);

// Throws Error naming the message and field ("messages[2].content[1]: ...").
nlohmann::ordered_json normalize_messages(const nlohmann::ordered_json& messages,
                                          const NormalizeOptions& options);

}  // namespace sluice::chat
