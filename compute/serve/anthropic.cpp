// compute/serve/anthropic.cpp: Messages bodies to chat requests, and job
// events to Messages replies. The conversion keeps every piece of text as
// sent; what has no chat-completions meaning (URL images, server tools, a
// prefilled assistant turn) is refused by name, never dropped.
#include "compute/serve/anthropic.h"

#include <cmath>
#include <limits>

#include "compute/serve/api_error.h"
#include "compute/serve/body_fields.h"

namespace sluice::serve {
namespace {

constexpr size_t kMaxStopSequences = 64;
constexpr uint64_t kMinThinkingBudget = 1024;  // as the API asks

const json& string_field(const json& object, const char* key, const std::string& where) {
  if (!object.contains(key) || !object[key].is_string())
    bad_param(where + "." + key, "missing or not a string");
  return object[key];
}

uint64_t whole_number(const json& value, const std::string& param, uint64_t low, uint64_t high) {
  if (!value.is_number_integer() || (!value.is_number_unsigned() && value.get<int64_t>() < 0))
    bad_param(param, "expected a whole number, got {}", value.dump());
  const uint64_t x = value.get<uint64_t>();
  if (x < low || x > high) bad_param(param, "{} is out of range [{}, {}]", x, low, high);
  return x;
}

// The text of `system`: a string or a list of text blocks.
std::string system_text(const json& system) {
  if (system.is_string()) return system.get<std::string>();
  if (!system.is_array()) bad_param("system", "expected a string or a list of text blocks");
  std::string out;
  for (size_t i = 0; i < system.size(); ++i) {
    const std::string where = fmt::format("system[{}]", i);
    if (!system[i].is_object() || system[i].value("type", "") != "text")
      bad_param(where + ".type", "expected a text block");
    if (i) out += "\n";
    out += string_field(system[i], "text", where).get<std::string>();
  }
  return out;
}

// An image block as the chat path's image part (a data: URL).
json image_part(const json& block, const std::string& where) {
  if (!block.contains("source") || !block["source"].is_object())
    bad_param(where + ".source", "missing or not an object");
  const json& source = block["source"];
  if (source.value("type", "") != "base64")
    bad_param(where + ".source.type",
              "only base64 image sources are read (this server fetches no URLs and keeps no "
              "files)");
  const std::string media = string_field(source, "media_type", where + ".source");
  const std::string data = string_field(source, "data", where + ".source");
  return {{"type", "image_url"}, {"image_url", {{"url", "data:" + media + ";base64," + data}}}};
}

// A tool_result's content as a tool message's: its text.
std::string tool_result_text(const json& block, const std::string& where) {
  if (!present(block, "content")) return "";
  const json& content = block["content"];
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) bad_param(where + ".content", "expected a string or a list of blocks");
  std::string out;
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string at = fmt::format("{}.content[{}]", where, i);
    if (!content[i].is_object() || content[i].value("type", "") != "text")
      bad_param(at + ".type", "a tool result holds text blocks only here");
    if (i) out += "\n";
    out += string_field(content[i], "text", at).get<std::string>();
  }
  return out;
}

// The blocks of one user turn: tool results become tool messages, in order;
// text and images between them become user messages.
void add_user_turn(const json& content, const std::string& where, json& out) {
  if (content.is_string()) {
    out.push_back({{"role", "user"}, {"content", content}});
    return;
  }
  json parts = json::array();
  const auto flush = [&] {
    if (!parts.empty()) out.push_back({{"role", "user"}, {"content", parts}});
    parts = json::array();
  };
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string at = fmt::format("{}.content[{}]", where, i);
    const json& block = content[i];
    const std::string type = block["type"];
    if (type == "text") {
      parts.push_back({{"type", "text"}, {"text", string_field(block, "text", at)}});
    } else if (type == "image") {
      parts.push_back(image_part(block, at));
    } else if (type == "tool_result") {
      flush();
      const std::string id = string_field(block, "tool_use_id", at);
      if (present(block, "is_error") && !block["is_error"].is_boolean())
        bad_param(at + ".is_error", "expected true or false");
      out.push_back(
          {{"role", "tool"}, {"tool_call_id", id}, {"content", tool_result_text(block, at)}});
    } else {
      bad_param(at + ".type",
                "'{}' is not a block a user turn can hold here (text, image, "
                "tool_result)",
                type);
    }
  }
  flush();
}

// An assistant turn: text as content, thinking as reasoning_content,
// tool_use blocks as tool calls.
void add_assistant_turn(const json& content, const std::string& where, json& out) {
  json message = {{"role", "assistant"}};
  if (content.is_string()) {
    message["content"] = content;
    out.push_back(std::move(message));
    return;
  }
  std::string text, reasoning;
  json calls = json::array();
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string at = fmt::format("{}.content[{}]", where, i);
    const json& block = content[i];
    const std::string type = block["type"];
    if (type == "text") {
      text += string_field(block, "text", at).get<std::string>();
    } else if (type == "thinking") {
      reasoning += string_field(block, "thinking", at).get<std::string>();
    } else if (type == "redacted_thinking") {
      continue;  // opaque to any model but the one that wrote it
    } else if (type == "tool_use") {
      const std::string id = string_field(block, "id", at);
      const std::string name = string_field(block, "name", at);
      if (!block.contains("input") || !block["input"].is_object())
        bad_param(at + ".input", "missing or not an object");
      calls.push_back({{"id", id},
                       {"type", "function"},
                       {"function", {{"name", name}, {"arguments", block["input"]}}}});
    } else {
      bad_param(at + ".type",
                "'{}' is not a block an assistant turn can hold here (text, thinking, tool_use)",
                type);
    }
  }
  message["content"] = text;
  if (!reasoning.empty()) message["reasoning_content"] = reasoning;
  if (!calls.empty()) message["tool_calls"] = calls;
  out.push_back(std::move(message));
}

json chat_messages(const json& body) {
  json out = json::array();
  if (present(body, "system"))
    out.push_back({{"role", "system"}, {"content", system_text(body["system"])}});
  if (!body.contains("messages")) bad_param("messages", "missing");
  const json& messages = body["messages"];
  if (!messages.is_array() || messages.empty()) bad_param("messages", "expected a non-empty list");
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string where = fmt::format("messages[{}]", i);
    const json& m = messages[i];
    if (!m.is_object()) bad_param(where, "expected an object, got {}", m.type_name());
    const std::string role = string_field(m, "role", where);
    if (role != "user" && role != "assistant")
      bad_param(where + ".role", "'{}' is not user or assistant (system goes in \"system\")", role);
    if (!m.contains("content") || !(m["content"].is_string() || m["content"].is_array()))
      bad_param(where + ".content", "expected a string or a list of blocks");
    const json& content = m["content"];
    if (content.is_array()) {
      for (size_t j = 0; j < content.size(); ++j)
        if (!content[j].is_object() || !content[j].contains("type") ||
            !content[j]["type"].is_string())
          bad_param(fmt::format("{}.content[{}].type", where, j), "missing or not a string");
    }
    if (role == "user") {
      add_user_turn(content, where, out);
    } else {
      // The chat path opens a fresh assistant turn after the messages; it
      // cannot continue one.
      if (i + 1 == messages.size())
        bad_param(where, "a final assistant turn (a prefilled reply) is not supported");
      add_assistant_turn(content, where, out);
    }
  }
  return out;
}

void add_tools(const json& body, json& chat) {
  if (present(body, "tools")) {
    const json& tools = body["tools"];
    if (!tools.is_array()) bad_param("tools", "expected a list of tools");
    json out = json::array();
    for (size_t i = 0; i < tools.size(); ++i) {
      const std::string where = fmt::format("tools[{}]", i);
      const json& tool = tools[i];
      if (!tool.is_object()) bad_param(where, "expected an object");
      if (present(tool, "type") && tool["type"] != "custom")
        bad_param(where + ".type", "{} is a server tool, which this server does not run",
                  tool["type"].dump());
      const std::string name = string_field(tool, "name", where);
      if (!tool.contains("input_schema") || !tool["input_schema"].is_object())
        bad_param(where + ".input_schema", "missing or not an object");
      json function = {{"name", name}, {"parameters", tool["input_schema"]}};
      if (present(tool, "description"))
        function["description"] = string_field(tool, "description", where);
      out.push_back({{"type", "function"}, {"function", function}});
    }
    if (!out.empty()) chat["tools"] = out;
  }
  if (!present(body, "tool_choice")) return;
  const json& choice = body["tool_choice"];
  const std::string type = choice.is_object() ? choice.value("type", "") : "";
  if (type == "auto") {
    chat["tool_choice"] = "auto";
  } else if (type == "any") {
    chat["tool_choice"] = "required";
  } else if (type == "none") {
    chat["tool_choice"] = "none";
  } else if (type == "tool") {
    const std::string name = string_field(choice, "name", "tool_choice");
    chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", name}}}};
  } else {
    bad_param("tool_choice.type", "expected \"auto\", \"any\", \"tool\" or \"none\"");
  }
  if (type != "none" && !chat.contains("tools"))
    bad_param("tool_choice", "the request has no tools");
  if (present(choice, "disable_parallel_tool_use")) {
    if (!choice["disable_parallel_tool_use"].is_boolean())
      bad_param("tool_choice.disable_parallel_tool_use", "expected true or false");
    chat["parallel_tool_calls"] = !choice["disable_parallel_tool_use"].get<bool>();
  }
}

std::vector<std::string> stop_sequences(const json& body) {
  std::vector<std::string> out;
  if (!present(body, "stop_sequences")) return out;
  const json& stops = body["stop_sequences"];
  if (!stops.is_array()) bad_param("stop_sequences", "expected a list of strings");
  if (stops.size() > kMaxStopSequences)
    bad_param("stop_sequences", "at most {} stop sequences, got {}", kMaxStopSequences,
              stops.size());
  for (size_t i = 0; i < stops.size(); ++i) {
    const std::string where = fmt::format("stop_sequences[{}]", i);
    if (!stops[i].is_string() || stops[i].get<std::string>().empty())
      bad_param(where, "expected a non-empty string");
    out.push_back(stops[i].get<std::string>());
  }
  return out;
}

}  // namespace

MessagesRequest parse_messages_request(const json& body, uint64_t default_seed, bool count_only) {
  if (present(body, "model") && !body["model"].is_string()) bad_param("model", "expected a string");
  json chat = {{"messages", chat_messages(body)}};
  add_tools(body, chat);
  MessagesRequest out;
  uint64_t max_tokens = 0;
  if (!count_only) {
    if (!present(body, "max_tokens"))
      bad_param("max_tokens", "missing (the Messages API asks for it)");
    max_tokens =
        whole_number(body["max_tokens"], "max_tokens", 1, std::numeric_limits<uint32_t>::max());
    chat["max_tokens"] = max_tokens;
    if (present(body, "temperature")) chat["temperature"] = number_in(body, "temperature", 0, 1);
    if (present(body, "top_p")) {
      if (number_in(body, "top_p", 0, 1) <= 0) bad_param("top_p", "must be above 0");
      chat["top_p"] = body["top_p"];
    }
    if (present(body, "top_k")) chat["top_k"] = whole_number(body["top_k"], "top_k", 0, 1u << 20);
    if (present(body, "stream")) {
      if (!body["stream"].is_boolean()) bad_param("stream", "expected true or false");
      chat["stream"] = body["stream"];
    }
  }
  if (present(body, "metadata")) {
    const json& metadata = body["metadata"];
    if (!metadata.is_object()) bad_param("metadata", "expected an object");
    if (present(metadata, "user_id") && !metadata["user_id"].is_string())
      bad_param("metadata.user_id", "expected a string");
  }
  bool thinking = false;
  if (present(body, "thinking")) {
    const json& t = body["thinking"];
    const std::string type = t.is_object() ? t.value("type", "") : "";
    if (type != "enabled" && type != "disabled")
      bad_param("thinking.type", "expected \"enabled\" or \"disabled\"");
    thinking = type == "enabled";
    if (thinking) {
      if (!present(t, "budget_tokens")) bad_param("thinking.budget_tokens", "missing");
      const uint64_t budget =
          whole_number(t["budget_tokens"], "thinking.budget_tokens", kMinThinkingBudget,
                       std::numeric_limits<uint32_t>::max());
      if (!count_only && budget >= max_tokens)
        bad_param("thinking.budget_tokens", "{} must be less than max_tokens ({})", budget,
                  max_tokens);
    }
  }
  // The Messages API thinks only when asked; templates that can think
  // without being asked are told not to.
  chat["chat_template_kwargs"] = {{"enable_thinking", thinking}};
  out.chat = parse_chat_request(chat, default_seed);
  out.chat.settings.stop = stop_sequences(body);
  out.thinking = thinking;
  return out;
}

void check_anthropic_version(const std::string* version) {
  if (version && *version != kAnthropicVersion)
    throw ApiError(400, "invalid_request_error",
                   fmt::format("anthropic-version: '{}' is not a version this server speaks ({})",
                               *version, kAnthropicVersion));
}

std::string sse_event(const char* name, const json& data) {
  return fmt::format("event: {}\ndata: {}\n\n", name,
                     data.dump(-1, ' ', false, json::error_handler_t::replace));
}

MessageBuilder::MessageBuilder(std::string id, std::string model,
                               std::function<std::string()> tool_id)
    : id_(std::move(id)), model_(std::move(model)), tool_id_(std::move(tool_id)) {}

json MessageBuilder::usage(const JobResult& r) const {
  return {{"input_tokens", r.prompt_tokens - r.cached_tokens},
          {"cache_creation_input_tokens", 0},
          {"cache_read_input_tokens", r.cached_tokens},
          {"output_tokens", r.completion_tokens}};
}

std::string MessageBuilder::stop_reason(const JobResult& r) const {
  if (r.finish_reason == "tool_calls") {
    // A call cut off by max_tokens is announced but not whole.
    for (const std::string& input : tool_inputs_) {
      const json parsed = json::parse(input, nullptr, false);
      if (parsed.is_discarded() || !parsed.is_object()) return "max_tokens";
    }
    return "tool_use";
  }
  if (r.finish_reason == "length") return "max_tokens";
  return r.stop_sequence.empty() ? "end_turn" : "stop_sequence";
}

std::string MessageBuilder::start(const JobResult& r) const {
  json u = usage(r);
  u["output_tokens"] = 0;
  const json message = {{"id", id_},
                        {"type", "message"},
                        {"role", "assistant"},
                        {"model", model_},
                        {"content", json::array()},
                        {"stop_reason", nullptr},
                        {"stop_sequence", nullptr},
                        {"usage", u}};
  return sse_event("message_start", {{"type", "message_start"}, {"message", message}}) +
         sse_event("ping", {{"type", "ping"}});
}

std::string MessageBuilder::open(Block kind, json content_block) {
  std::string out = close();
  open_ = kind;
  blocks_.push_back(content_block);
  return out + sse_event("content_block_start", {{"type", "content_block_start"},
                                                 {"index", blocks_.size() - 1},
                                                 {"content_block", std::move(content_block)}});
}

std::string MessageBuilder::close() {
  if (open_ == Block::kNone) return "";
  open_ = Block::kNone;
  return sse_event("content_block_stop",
                   {{"type", "content_block_stop"}, {"index", blocks_.size() - 1}});
}

std::string MessageBuilder::push(const Job::Event& event) {
  using Kind = Job::Event::Kind;
  std::string out;
  json delta;
  switch (event.kind) {
    case Kind::kReasoning:
      if (open_ != Block::kThinking)
        out += open(Block::kThinking, {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}});
      blocks_.back()["thinking"] = blocks_.back()["thinking"].get<std::string>() + event.text;
      delta = {{"type", "thinking_delta"}, {"thinking", event.text}};
      break;
    case Kind::kText:
      if (open_ != Block::kText) out += open(Block::kText, {{"type", "text"}, {"text", ""}});
      blocks_.back()["text"] = blocks_.back()["text"].get<std::string>() + event.text;
      delta = {{"type", "text_delta"}, {"text", event.text}};
      break;
    case Kind::kToolCall:
      tool_inputs_.emplace_back();
      return out + open(Block::kToolUse, {{"type", "tool_use"},
                                          {"id", tool_id_()},
                                          {"name", event.name},
                                          {"input", json::object()}});
    case Kind::kToolArguments:
      // Arguments follow their call's announcement, which opened this block.
      if (open_ != Block::kToolUse) return out;
      tool_inputs_.back() += event.text;
      delta = {{"type", "input_json_delta"}, {"partial_json", event.text}};
      break;
    default:
      return out;
  }
  return out + sse_event("content_block_delta", {{"type", "content_block_delta"},
                                                 {"index", blocks_.size() - 1},
                                                 {"delta", std::move(delta)}});
}

std::string MessageBuilder::finish(const JobResult& r) {
  std::string out = close();
  const std::string reason = stop_reason(r);
  const json stop_sequence = reason == "stop_sequence" ? json(r.stop_sequence) : json(nullptr);
  out += sse_event("message_delta",
                   {{"type", "message_delta"},
                    {"delta", {{"stop_reason", reason}, {"stop_sequence", stop_sequence}}},
                    {"usage", usage(r)}});
  return out + sse_event("message_stop", {{"type", "message_stop"}});
}

json MessageBuilder::message(const JobResult& r) const {
  json content = blocks_;
  size_t tool = 0;
  for (json& block : content) {
    if (block["type"] != "tool_use") continue;
    json input = json::parse(tool_inputs_[tool++], nullptr, false);
    // A call cut off by max_tokens (stop_reason says so) keeps no partial input.
    block["input"] = input.is_object() ? input : json::object();
  }
  const std::string reason = stop_reason(r);
  return {{"id", id_},
          {"type", "message"},
          {"role", "assistant"},
          {"model", model_},
          {"content", content},
          {"stop_reason", reason},
          {"stop_sequence", reason == "stop_sequence" ? json(r.stop_sequence) : json(nullptr)},
          {"usage", usage(r)}};
}

}  // namespace sluice::serve
