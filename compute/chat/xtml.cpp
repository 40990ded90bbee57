// compute/chat/xtml.cpp: the XTML encoder behind xtml.h (k3.md §5). Every
// string a message, tool or schema carries goes into a text segment; only
// the encoder's own element syntax and fixed notes are markup. It never
// merges two segments: the model saw each one encoded on its own.
#include "compute/chat/xtml.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "compute/chat/value.h"
#include "proto/error.h"

namespace sluice::chat {
namespace {

using json = nlohmann::ordered_json;
using tokenizer::TokenId;

constexpr std::string_view kOpen = "<|open|>";
constexpr std::string_view kClose = "<|close|>";
constexpr std::string_view kSep = "<|sep|>";
constexpr std::string_view kEndOfMessage = "<|end_of_msg|>";

struct Attribute {
  std::string_view key;
  std::string value;
  bool from_client;  // a name or key someone sent: a text segment
};


// json.dumps(v, ensure_ascii=False) with Python's default separators, as a
// typed argument's value is written.
std::string python_json(const json& value) {
  return to_json(from_json(value, false), JsonStyle{}).str();
}

// Compact, keys sorted at every depth, non-ASCII kept: the declaration JSON.
std::string compact_sorted_json(const json& value) {
  JsonStyle style;
  style.item_separator = ",";
  style.key_separator = ":";
  style.sort_keys = true;
  return to_json(from_json(value, false), style).str();
}

const char* argument_type(const json& value) {
  if (value.is_string()) return "string";
  if (value.is_boolean()) return "boolean";
  if (value.is_number()) return "number";
  if (value.is_null()) return "null";
  if (value.is_object()) return "object";
  return "array";
}

// A call id as Python's str() writes it: strings as they are, the rest as JSON.
std::string id_text(const json& id) { return id.is_string() ? id.get<std::string>() : id.dump(); }

// The function name of a tool call (nested under "function" or flat), or "".
std::string call_name(const json& call) {
  if (!call.is_object()) return "";
  const json& function = call.contains("function") ? call["function"] : call;
  return function.is_object() && function.contains("name") && function["name"].is_string()
             ? function["name"].get<std::string>()
             : "";
}

class XtmlWriter {
 public:
  XtmlWriter(const ChatInput& input, Rendered& out) : input_(input), out_(out) {}

  void markup(std::string_view s) { out_.segments.push_back({std::string(s), false}); }
  void text(std::string_view s) {
    if (!s.empty()) out_.segments.push_back({std::string(s), true});
  }

  void open(std::string_view tag, std::initializer_list<Attribute> attributes = {}) {
    markup(kOpen);
    markup(tag);
    for (const Attribute& a : attributes) {
      markup(fmt::format(" {}", a.key));
      markup("=\"");
      const std::string escaped = xtml_escape_attribute(a.value);
      if (a.from_client)
        text(escaped);
      else
        markup(escaped);
      markup("\"");
    }
    markup(kSep);
  }
  void close(std::string_view tag) {
    markup(kClose);
    markup(tag);
    markup(kSep);
  }
  void end_message() {
    close("message");
    markup(kEndOfMessage);
  }

  // encoding_k3.py's internal system messages: the body is one text segment.
  void system_note(std::string_view type, std::string_view body) {
    open("message", {{"role", "system", false}, {"type", std::string(type), false}});
    text(body);
    end_message();
  }

  // A message's content: a string, null, or parts (each text part its own
  // segment, each image a media block).
  void content(const json& content, const std::string& where) {
    if (content.is_null()) return;
    if (content.is_string()) return text(content.get<std::string>());
    if (!content.is_array()) {
      fail("{}.content must be a string, an array of parts or null, found {}", where,
           content.type_name());
    }
    for (size_t j = 0; j < content.size(); ++j) {
      const json& part = content[j];
      const std::string at = fmt::format("{}.content[{}]", where, j);
      if (part.is_string()) {
        text(part.get<std::string>());
        continue;
      }
      if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
        fail("{} must be an object with a string \"type\"", at);
      const std::string type = part["type"].get<std::string>();
      if (type == "text" || type == "input_text") {
        if (!part.contains("text") || !part["text"].is_string())
          fail("{}.text must be a string", at);
        text(part["text"].get<std::string>());
      } else if (type == "image_url" || type == "input_image" || type == "image") {
        media(part, at);
      } else {
        fail("{}: part type '{}' is not supported (text and image parts are)", at, type);
      }
    }
  }

  void assistant(const json& m, const std::string& where, bool thinking) {
    open("message", {{"role", "assistant", false}});
    if (thinking) {
      open("think");
      // The first of the two that is a non-empty string, written only when
      // it is more than whitespace.
      for (const char* key : {"reasoning_content", "reasoning"}) {
        if (!m.contains(key) || !m[key].is_string() || m[key].get<std::string>().empty()) continue;
        const std::string reasoning = m[key].get<std::string>();
        if (reasoning.find_first_not_of(" \t\n\r\f\v") != std::string::npos) text(reasoning);
        break;
      }
      close("think");
    }
    open("response");
    content(m.contains("content") ? m["content"] : json(nullptr), where);
    close("response");
    if (m.contains("tool_calls") && !m["tool_calls"].is_null()) {
      const json& calls = m["tool_calls"];
      if (!calls.is_array()) fail("{}.tool_calls must be an array", where);
      if (!calls.empty()) {
        open("tools");
        for (size_t k = 0; k < calls.size(); ++k)
          tool_call(calls[k], fmt::format("{}.tool_calls[{}]", where, k), k + 1);
        close("tools");
      }
    }
    end_message();
  }

  void tool_call(const json& call, const std::string& where, size_t index) {
    // OpenAI nests name and arguments under "function"; a flat call is read too.
    const json* function =
        call.is_object() ? (call.contains("function") ? &call["function"] : &call) : nullptr;
    if (!function || !function->is_object()) fail("{}.function must be an object", where);
    if (!function->contains("name") || !(*function)["name"].is_string())
      fail("{}.function.name must be a string", where);
    const json arguments = function->contains("arguments") ? (*function)["arguments"] : json();
    open("call", {{"tool", (*function)["name"].get<std::string>(), true},
                  {"index", std::to_string(index), false}});
    json parsed = arguments.is_null() ? json::object() : arguments;
    const bool blank = arguments.is_string() && arguments.get<std::string>().find_first_not_of(
                                                    " \t\n\r\f\v") == std::string::npos;
    if (blank) {
      parsed = json::object();
    } else if (arguments.is_string()) {
      parsed = json::parse(arguments.get<std::string>(), nullptr, false);
      if (parsed.is_discarded()) {
        // Arguments that are not JSON at all are kept verbatim.
        open("json", {{"type", "object", false}});
        text(arguments.get<std::string>());
        close("json");
        close("call");
        return;
      }
    }
    if (!parsed.is_object()) {
      fail("{}.function.arguments is JSON but a{} {}, not an object", where,
           parsed.is_array() || parsed.is_object() ? "n" : "", parsed.type_name());
    }
    for (const auto& [key, value] : parsed.items()) {
      open("argument", {{"key", key, true}, {"type", argument_type(value), false}});
      text(value.is_string() ? value.get<std::string>() : python_json(value));
      close("argument");
    }
    close("call");
  }

  // A run of consecutive tool results after the assistant turn whose calls
  // are `calls` (or null), as encoding_k3.py writes them: when every result
  // of the run names a call by tool_call_id (or id), in call order under that
  // call's name; otherwise in the order given, each named by its "tool" or
  // "name", else by the call at its position. `count` numbers the results
  // since that assistant turn (the index attribute).
  void tool_results(const json& messages, size_t first, size_t end, const json* calls,
                    size_t& count) {
    struct Result {
      size_t message;
      size_t order;
      std::string name;  // the matched call's
    };
    std::vector<Result> results;
    bool all_matched = calls != nullptr;
    for (size_t i = first; i < end; ++i) {
      const json& m = messages[i];
      Result r{i, SIZE_MAX, {}};
      const char* id_key = m.contains("tool_call_id") ? "tool_call_id" : "id";
      if (calls && m.contains(id_key) && !m[id_key].is_null()) {
        const std::string id = id_text(m[id_key]);
        for (size_t k = 0; k < calls->size(); ++k) {
          const json& c = (*calls)[k];
          if (c.is_object() && c.contains("id") && !c["id"].is_null() && id_text(c["id"]) == id) {
            r.order = k;
            r.name = call_name(c);
            break;
          }
        }
      }
      all_matched = all_matched && r.order != SIZE_MAX;
      results.push_back(std::move(r));
    }
    if (all_matched) {
      std::stable_sort(results.begin(), results.end(),
                       [](const Result& a, const Result& b) { return a.order < b.order; });
    }
    for (const Result& r : results) {
      const json& m = messages[r.message];
      const std::string where = fmt::format("messages[{}]", r.message);
      ++count;
      std::string name = all_matched ? r.name : "";
      for (const char* key : {"tool", "name"}) {
        if (name.empty() && m.contains(key) && m[key].is_string()) name = m[key].get<std::string>();
      }
      if (name.empty() && calls && count <= calls->size()) name = call_name((*calls)[count - 1]);
      if (name.empty()) {
        fail(
            "{}: a tool result needs a name: a tool_call_id naming a call of the assistant turn "
            "before it, a \"tool\" or \"name\", or a named call at its position",
            where);
      }
      open("message", {{"role", "tool", false},
                       {"tool", name, true},
                       {"index", std::to_string(count), false}});
      content(m.contains("content") ? m["content"] : json(nullptr), where);
      end_message();
    }
  }

  // The declaration's body, preamble and JSON block alike, is one text segment.
  void declare_tools(const json& tools, std::string_view preamble) {
    open("message", {{"role", "system", false}, {"type", "tool-declare", false}});
    text(fmt::format("{}```json\n{}\n```", preamble, compact_sorted_json(tools)));
    end_message();
  }

 private:
  void media(const json& part, const std::string& where) {
    if (!input_.images) {
      fail("{}: an image part, but no image can be read here (the vision tower is not loaded)",
           where);
    }
    const ImagePlacement placement = input_.images(part, out_.images.size(), where);
    markup(fmt::format("<|media_begin|>image {}x{}<|media_content|><|media_pad|><|media_end|>",
                       placement.width, placement.height));
    out_.images.push_back(placement);
  }

  const ChatInput& input_;
  Rendered& out_;
};

bool thinking_on(const ChatInput& input) {
  const auto it = input.extra.find("enable_thinking");
  if (it == input.extra.end() || it->is_null()) return true;
  if (!it->is_boolean()) fail("enable_thinking must be true or false");
  return it->get<bool>();
}

std::string thinking_effort(const ChatInput& input) {
  for (const char* key : {"thinking_effort", "reasoning_effort"}) {
    const auto it = input.extra.find(key);
    if (it == input.extra.end() || it->is_null()) continue;
    const std::string effort = it->is_string() ? it->get<std::string>() : it->dump();
    if (std::find(std::begin(kXtmlEfforts), std::end(kXtmlEfforts), effort) ==
        std::end(kXtmlEfforts)) {
      fail("{} '{}' is not one K3 accepts (low, high, max)", key, effort);
    }
    return effort;
  }
  return "";
}

}  // namespace

std::string xtml_escape_attribute(std::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == '&')
      out += "&amp;";
    else if (c == '"')
      out += "&quot;";
    else
      out += c;
  }
  return out;
}

Rendered render_xtml(const ChatInput& input) {
  const json& messages = input.messages;
  if (!messages.is_array()) fail("messages must be a JSON array, found {}", messages.type_name());
  Rendered out;
  XtmlWriter w(input, out);
  const bool thinking = thinking_on(input);
  if (!input.tools.is_null() && !input.tools.is_array())
    fail("tools must be an array of tool definitions");
  if (input.tools.is_array() && !input.tools.empty())
    w.declare_tools(input.tools, kXtmlToolDeclarePreamble);
  const std::string effort = thinking ? thinking_effort(input) : "";
  if (!effort.empty())
    w.system_note("thinking-effort", fmt::format(fmt::runtime(kXtmlThinkingEffortNote), effort));

  const json* last_calls = nullptr;
  size_t tool_results = 0;  // since the last assistant turn
  for (size_t i = 0; i < messages.size();) {
    const json& m = messages[i];
    const std::string where = fmt::format("messages[{}]", i);
    if (!m.is_object()) fail("{} must be an object, found {}", where, m.type_name());
    if (!m.contains("role") || !m["role"].is_string()) fail("{}.role must be a string", where);
    const std::string role = m["role"].get<std::string>();
    const bool system = role == "system" || role == "developer";
    if (system && m.contains("tools") && !m["tools"].is_null()) {
      if (!m["tools"].is_array()) fail("{}.tools must be an array of tool definitions", where);
      if (!m["tools"].empty()) {
        w.declare_tools(m["tools"], kXtmlToolDeclareLaterPreamble);
        ++i;
        continue;
      }
    }
    if (role == "tool") {
      size_t end = i;
      while (end < messages.size() && messages[end].is_object() &&
             messages[end].value("role", json()) == "tool")
        ++end;
      w.tool_results(messages, i, end, last_calls, tool_results);
      i = end;
      continue;
    }
    if (role == "assistant") {
      w.assistant(m, where, thinking);
      last_calls =
          m.contains("tool_calls") && m["tool_calls"].is_array() ? &m["tool_calls"] : nullptr;
      tool_results = 0;
    } else if (system || role == "user") {
      const std::string written = system ? "system" : role;
      if (m.contains("name") && m["name"].is_string() && !m["name"].get<std::string>().empty()) {
        w.open("message", {{"role", written, false}, {"name", m["name"].get<std::string>(), true}});
      } else {
        w.open("message", {{"role", written, false}});
      }
      w.content(m.contains("content") ? m["content"] : json(nullptr), where);
      w.end_message();
    } else {
      fail("{}.role '{}' is not one XTML writes (system, developer, user, assistant, tool)", where,
           role);
    }
    ++i;
  }

  if (input.tool_choice.is_string()) {
    const std::string choice = input.tool_choice.get<std::string>();
    if (choice == "required") w.system_note("tool-choice", kXtmlToolChoiceRequiredNote);
    if (choice == "none") w.system_note("tool-choice", kXtmlToolChoiceNoneNote);
  }
  const json& format = input.response_format;
  const std::string format_type = format.is_string()   ? format.get<std::string>()
                                  : format.is_object() ? format.value("type", "")
                                                       : "";
  if (format_type == "json_object") {
    w.system_note("response-format", kXtmlJsonObjectNote);
  } else if (format_type == "json_schema") {
    // The schema is json_schema.schema, else json_schema.json_schema, else
    // json_schema itself; null when there is no json_schema.
    json schema = nullptr;
    if (format.is_object() && format.contains("json_schema")) {
      const json& spec = format["json_schema"];
      schema = spec;
      if (spec.is_object() && spec.contains("schema"))
        schema = spec["schema"];
      else if (spec.is_object() && spec.contains("json_schema"))
        schema = spec["json_schema"];
    }
    w.system_note("response-format",
                  fmt::format("{}{}\n```", kXtmlJsonSchemaNote, compact_sorted_json(schema)));
  }

  if (input.add_generation_prompt) {
    w.open("message", {{"role", "assistant", false}});
    w.open(thinking ? "think" : "response");
  }
  return out;
}

std::vector<TokenId> tokenize_xtml(const tokenizer::Tokenizer& tok, const Rendered& rendered) {
  std::vector<TokenId> ids;
  for (const Segment& s : rendered.segments) {
    const auto part = s.content ? tok.encode(s.text) : tok.encode_with_specials(s.text);
    ids.insert(ids.end(), part.begin(), part.end());
  }
  return ids;
}

ReplyFormat xtml_reply_format(const tokenizer::Tokenizer& tok) {
  auto marker = [&](std::string_view text) {
    const auto id = tok.token_to_id(text);
    if (!id || !tok.is_added(*id))
      fail("the tokenizer has no {} token, which Kimi K3's XTML prompts need", text);
    return *id;
  };
  ReplyFormat f;
  f.tools = ToolSyntax::kXtml;
  f.section_open = marker(kOpen);
  f.section_close = marker(kClose);
  f.separator = marker(kSep);
  marker(kEndOfMessage);
  return f;
}

bool xtml_opens_reasoning(const tokenizer::Tokenizer& tok, std::span<const TokenId> prompt) {
  std::vector<TokenId> suffix = tok.encode_with_specials(fmt::format("{}think{}", kOpen, kSep));
  return prompt.size() >= suffix.size() &&
         std::equal(suffix.begin(), suffix.end(),
                    prompt.end() - static_cast<ptrdiff_t>(suffix.size()));
}

ConstraintOptions xtml_constraint_frame(const ReplyFormat& format, bool in_reasoning,
                                        std::vector<TokenId> end_ids) {
  const SyntaxPiece open{format.section_open, ""}, close{format.section_close, ""},
      sep{format.separator, ""};
  auto tag = [](const char* name) { return SyntaxPiece{std::nullopt, name}; };
  ConstraintOptions frame;
  frame.end_ids = std::move(end_ids);
  if (in_reasoning) {
    frame.start_after = format.section_close;
    frame.starts_free = true;
    frame.after_reasoning = {tag("think"), sep, open, tag("response"), sep};
  }
  frame.before_end = {close, tag("response"), sep, close, tag("message"), sep};
  return frame;
}

}  // namespace sluice::chat
