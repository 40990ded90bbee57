// compute/chat/normalize.cpp: OpenAI-shaped messages made safe for real chat
// templates. Only the shape changes; every piece of text a client sent
// arrives in the template unchanged.
#include "compute/chat/normalize.h"

#include <fmt/format.h>

#include "compute/chat/value.h"
#include "proto/error.h"

namespace sluice::chat {
namespace {

using json = nlohmann::ordered_json;

// The text of a content value: a string, or the text parts of a list joined
// by newlines.
std::string content_text(const json& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) {
    fail("{}.content must be a string, an array of parts or null, found {}", where,
         content.type_name());
  }
  std::string out;
  for (size_t j = 0; j < content.size(); ++j) {
    const json& part = content[j];
    const std::string at = fmt::format("{}.content[{}]", where, j);
    if (part.is_string()) {
      if (j) out += '\n';
      out += part.get<std::string>();
      continue;
    }
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
      fail("{} must be an object with a string \"type\"", at);
    }
    const std::string type = part["type"].get<std::string>();
    if (type != "text" && type != "input_text") {
      fail("{}: part type '{}' is not supported (this model reads text only)", at, type);
    }
    if (!part.contains("text") || !part["text"].is_string()) fail("{}.text must be a string", at);
    if (j) out += '\n';
    out += part["text"].get<std::string>();
  }
  return out;
}

json normalize_tool_call(const json& call, const std::string& where,
                         const NormalizeOptions& options) {
  if (!call.is_object()) fail("{} must be an object", where);
  json out = call;
  if (!out.contains("type") || out["type"].is_null()) out["type"] = "function";
  if (!out.contains("function") || !out["function"].is_object())
    fail("{}.function must be an object", where);
  json& function = out["function"];
  if (!function.contains("name") || !function["name"].is_string())
    fail("{}.function.name must be a string", where);
  if (!function.contains("arguments") || function["arguments"].is_null())
    function["arguments"] = json::object();
  json& arguments = function["arguments"];
  if (!arguments.is_string() && !arguments.is_object()) {
    fail("{}.function.arguments must be a JSON string or an object, found {}", where,
         arguments.type_name());
  }
  if (options.arguments == NormalizeOptions::Arguments::kString && arguments.is_object()) {
    // Python's json.dumps layout, so the text matches what tojson would print.
    arguments = to_json(from_json(arguments, false), JsonStyle{}).str();
  } else if (options.arguments == NormalizeOptions::Arguments::kObject && arguments.is_string()) {
    json parsed = json::parse(arguments.get<std::string>(), nullptr, false);
    if (parsed.is_discarded() || !parsed.is_object()) {
      fail(
          "{}.function.arguments is not a JSON object: this template needs the arguments as an "
          "object",
          where);
    }
    arguments = std::move(parsed);
  }
  return out;
}

}  // namespace

NormalizeOptions normalize_options_for(const ChatTemplate& tmpl) {
  NormalizeOptions options;
  options.null_content_with_tool_calls = tmpl.tests_none_on("content");
  if (tmpl.tests_string_on("arguments")) {
    options.arguments = NormalizeOptions::Arguments::kAsGiven;
  } else if (tmpl.filters_attribute("arguments", "tojson")) {
    options.arguments = NormalizeOptions::Arguments::kObject;
  } else {
    options.arguments = NormalizeOptions::Arguments::kString;
  }
  return options;
}

json normalize_messages(const json& messages, const NormalizeOptions& options) {
  if (!messages.is_array()) fail("messages must be a JSON array, found {}", messages.type_name());
  json out = json::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string where = fmt::format("messages[{}]", i);
    const json& in = messages[i];
    if (!in.is_object()) fail("{} must be an object, found {}", where, in.type_name());
    if (!in.contains("role") || !in["role"].is_string()) fail("{}.role must be a string", where);
    json m = in;
    if (m["role"] == "developer") m["role"] = "system";
    json calls = json::array();
    if (m.contains("tool_calls") && !m["tool_calls"].is_null()) {
      if (!m["tool_calls"].is_array()) fail("{}.tool_calls must be an array", where);
      for (size_t j = 0; j < m["tool_calls"].size(); ++j) {
        calls.push_back(normalize_tool_call(m["tool_calls"][j],
                                            fmt::format("{}.tool_calls[{}]", where, j), options));
      }
      if (calls.empty())
        m.erase("tool_calls");
      else
        m["tool_calls"] = calls;
    } else {
      m.erase("tool_calls");
    }
    const bool carries_calls = !calls.empty() && m["role"] == "assistant";
    const json content = m.contains("content") ? m["content"] : json(nullptr);
    std::string text = content.is_null() ? std::string() : content_text(content, where);
    if (carries_calls && options.null_content_with_tool_calls && text.empty()) {
      m["content"] = nullptr;
    } else {
      m["content"] = text;
    }
    if (m.contains("reasoning_content") && m["reasoning_content"].is_null())
      m.erase("reasoning_content");
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace sluice::chat
