// tests/compute/serve/anthropic_test.cpp: the Messages API's edges. A body
// becomes the chat request it means (system, blocks, tool use and results,
// images, tool_choice, sampling, thinking), each refusal names its Messages
// field, and job events become the API's content blocks, stop reasons,
// usage and named SSE events in order.
#include "compute/serve/anthropic.h"

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "compute/serve/api_error.h"

using sluice::serve::ApiError;
using sluice::serve::Job;
using sluice::serve::JobResult;
using sluice::serve::json;
using sluice::serve::MessageBuilder;
using sluice::serve::parse_messages_request;

namespace {

json minimal() {
  return {{"model", "m"},
          {"max_tokens", 64},
          {"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}};
}

json with(const char* key, json value) {
  json body = minimal();
  body[key] = std::move(value);
  return body;
}

// The message of the 400 `body` gets (it starts with the field), or "accepted".
std::string refusal(const json& body, bool count_only = false) {
  try {
    parse_messages_request(body, 7, count_only);
  } catch (const ApiError& e) {
    CHECK(e.status == 400);
    CHECK(e.body(sluice::serve::Api::kAnthropic)["type"] == "error");
    return e.what();
  }
  return "accepted";
}

bool starts(const std::string& text, const std::string& prefix) {
  return text.rfind(prefix, 0) == 0;
}

// The names of the SSE events in `stream`, in order.
std::vector<std::string> event_names(const std::string& stream) {
  std::vector<std::string> names;
  for (size_t at = stream.find("event: "); at != std::string::npos;
       at = stream.find("event: ", at + 1))
    names.push_back(stream.substr(at + 7, stream.find('\n', at) - at - 7));
  return names;
}

}  // namespace

TEST_CASE("a conversation with tool use becomes the chat messages it means") {
  json body = minimal();
  body["system"] = json::array(
      {{{"type", "text"}, {"text", "Be brief."}}, {{"type", "text"}, {"text", "Be kind."}}});
  body["messages"] = json::array({
      {{"role", "user"}, {"content", json::array({{{"type", "text"}, {"text", "Weather?"}}})}},
      {{"role", "assistant"},
       {"content", json::array({{{"type", "thinking"}, {"thinking", "call it"}, {"signature", ""}},
                                {{"type", "text"}, {"text", "Checking."}},
                                {{"type", "tool_use"},
                                 {"id", "toolu_1"},
                                 {"name", "weather"},
                                 {"input", {{"city", "Paris"}}}}})}},
      {{"role", "user"},
       {"content", json::array({{{"type", "tool_result"},
                                 {"tool_use_id", "toolu_1"},
                                 {"content", json::array({{{"type", "text"}, {"text", "sunny"}}})}},
                                {{"type", "text"}, {"text", "Thanks"}}})}},
  });
  body["tools"] = json::array({{{"name", "weather"},
                                {"description", "Looks it up"},
                                {"input_schema", {{"type", "object"}}}}});
  body["tool_choice"] = {{"type", "any"}, {"disable_parallel_tool_use", true}};
  body["stop_sequences"] = json::array({"END", "STOP", "a", "b", "c"});
  body["temperature"] = 0.25;
  body["top_k"] = 5;
  const auto request = parse_messages_request(body, 7, false);
  const json& m = request.chat.messages;
  REQUIRE(m.size() == 5);
  CHECK(m[0] == json{{"role", "system"}, {"content", "Be brief.\nBe kind."}});
  CHECK(m[1]["role"] == "user");
  CHECK(m[1]["content"][0]["text"] == "Weather?");
  CHECK(m[2]["content"] == "Checking.");
  CHECK(m[2]["reasoning_content"] == "call it");
  CHECK(m[2]["tool_calls"][0]["id"] == "toolu_1");
  CHECK(m[2]["tool_calls"][0]["function"]["name"] == "weather");
  CHECK(m[2]["tool_calls"][0]["function"]["arguments"] == json{{"city", "Paris"}});
  CHECK(m[3] == json{{"role", "tool"}, {"tool_call_id", "toolu_1"}, {"content", "sunny"}});
  CHECK(m[4]["content"][0]["text"] == "Thanks");
  CHECK(request.chat.tools[0]["function"]["parameters"] == json{{"type", "object"}});
  CHECK(request.chat.tools[0]["function"]["description"] == "Looks it up");
  CHECK(request.chat.tool_choice == "required");
  CHECK_FALSE(request.chat.parallel_tool_calls);
  // More than OpenAI's four stop strings: the Messages API allows them.
  CHECK(request.chat.settings.stop.size() == 5);
  CHECK(request.chat.settings.sampling.temperature == doctest::Approx(0.25));
  CHECK(request.chat.settings.sampling.top_k == 5);
  CHECK(request.chat.settings.max_tokens == 64u);
  CHECK(request.chat.template_kwargs["enable_thinking"] == false);
  CHECK_FALSE(request.thinking);
}

TEST_CASE("images, tool choices and thinking map to their chat forms") {
  json body = minimal();
  body["messages"][0]["content"] = json::array(
      {{{"type", "image"},
        {"source", {{"type", "base64"}, {"media_type", "image/png"}, {"data", "QUJD"}}}}});
  auto request = parse_messages_request(body, 7, false);
  CHECK(request.chat.messages[0]["content"][0] ==
        json{{"type", "image_url"}, {"image_url", {{"url", "data:image/png;base64,QUJD"}}}});
  json tools = json::array({{{"name", "f"}, {"input_schema", {{"type", "object"}}}}});
  body = with("tools", tools);
  body["tool_choice"] = {{"type", "tool"}, {"name", "f"}};
  CHECK(parse_messages_request(body, 7, false).chat.tool_choice ==
        json{{"type", "function"}, {"function", {{"name", "f"}}}});
  body["tool_choice"] = {{"type", "none"}};
  CHECK(parse_messages_request(body, 7, false).chat.tool_choice == "none");
  body["tool_choice"] = {{"type", "auto"}};
  CHECK(parse_messages_request(body, 7, false).chat.tool_choice == "auto");
  body = with("thinking", {{"type", "enabled"}, {"budget_tokens", 1024}});
  body["max_tokens"] = 2048;
  request = parse_messages_request(body, 7, false);
  CHECK(request.thinking);
  CHECK(request.chat.template_kwargs["enable_thinking"] == true);
  // count_tokens needs no max_tokens.
  json count = minimal();
  count.erase("max_tokens");
  CHECK(refusal(count, true) == "accepted");
}

TEST_CASE("each malformed field is refused by its Messages name") {
  json no_max = minimal();
  no_max.erase("max_tokens");
  CHECK(starts(refusal(no_max), "max_tokens: missing"));
  CHECK(starts(refusal(with("max_tokens", 0)), "max_tokens:"));
  CHECK(starts(refusal(with("max_tokens", 1.5)), "max_tokens:"));
  CHECK(starts(refusal(with("temperature", 1.5)), "temperature:"));
  CHECK(starts(refusal(with("top_p", 0)), "top_p:"));
  CHECK(starts(refusal(with("top_k", -1)), "top_k:"));
  CHECK(starts(refusal(with("stop_sequences", "END")), "stop_sequences:"));
  CHECK(starts(refusal(with("stop_sequences", json::array({""}))), "stop_sequences[0]:"));
  CHECK(starts(refusal(with("system", 5)), "system:"));
  CHECK(starts(refusal(with("metadata", "x")), "metadata:"));
  CHECK(starts(refusal(with("metadata", {{"user_id", 3}})), "metadata.user_id:"));
  CHECK(starts(refusal(with("messages", json::array())), "messages:"));
  CHECK(starts(refusal(with("messages", json::array({{{"role", "system"}, {"content", "x"}}}))),
               "messages[0].role:"));
  CHECK(starts(refusal(with("messages", json::array({{{"role", "user"}, {"content", 3}}}))),
               "messages[0].content:"));
  CHECK(starts(refusal(with("messages",
                            json::array({{{"role", "user"},
                                          {"content", json::array({{{"type", "document"}}})}}}))),
               "messages[0].content[0].type:"));
  CHECK(starts(
      refusal(with(
          "messages",
          json::array({{{"role", "user"},
                        {"content",
                         json::array({{{"type", "image"},
                                       {"source", {{"type", "url"}, {"url", "http://x"}}}}})}}}))),
      "messages[0].content[0].source.type:"));
  CHECK(starts(refusal(with("messages", json::array({{{"role", "user"}, {"content", "a"}},
                                                     {{"role", "assistant"}, {"content", "b"}}}))),
               "messages[1]:"));
  CHECK(starts(refusal(with("tools", json::array({{{"name", "f"}}}))), "tools[0].input_schema:"));
  CHECK(starts(
      refusal(with("tools", json::array({{{"type", "web_search_20250305"}, {"name", "s"}}}))),
      "tools[0].type:"));
  CHECK(starts(refusal(with("tool_choice", {{"type", "any"}})), "tool_choice:"));
  CHECK(starts(refusal(with("tool_choice", {{"type", "sometimes"}})), "tool_choice.type:"));
  CHECK(starts(refusal(with("thinking", {{"type", "enabled"}})), "thinking.budget_tokens:"));
  CHECK(starts(refusal(with("thinking", {{"type", "enabled"}, {"budget_tokens", 2000}})),
               "thinking.budget_tokens:"));  // not below max_tokens (64)
  CHECK(starts(refusal(with("thinking", {{"type", "maybe"}})), "thinking.type:"));
  CHECK(refusal(minimal()) == "accepted");
}

TEST_CASE("an unknown anthropic-version is refused, an absent one taken as 2023-06-01") {
  const std::string good = "2023-06-01", bad = "2026-10-21";
  sluice::serve::check_anthropic_version(nullptr);
  sluice::serve::check_anthropic_version(&good);
  CHECK_THROWS_AS(sluice::serve::check_anthropic_version(&bad), ApiError);
}

TEST_CASE("job events become content blocks and named events in order") {
  using Kind = Job::Event::Kind;
  int ids = 0;
  MessageBuilder builder("msg_1", "tiny", [&] { return "toolu_" + std::to_string(++ids); });
  JobResult result;
  result.prompt_tokens = 30;
  result.cached_tokens = 12;
  std::string stream = builder.start(result);
  stream += builder.push({Kind::kReasoning, "hm"});
  stream += builder.push({Kind::kReasoning, "m"});
  stream += builder.push({Kind::kText, "Let me"});
  stream += builder.push({Kind::kText, " look."});
  stream += builder.push({Kind::kToolCall, {}, 0, "call_x", "weather"});
  stream += builder.push({Kind::kToolArguments, "{\"city\":", 0});
  stream += builder.push({Kind::kToolArguments, "\"Paris\"}", 0});
  result.finish_reason = "tool_calls";
  result.completion_tokens = 9;
  stream += builder.finish(result);
  CHECK(event_names(stream) ==
        std::vector<std::string>{"message_start", "ping", "content_block_start",
                                 "content_block_delta", "content_block_delta", "content_block_stop",
                                 "content_block_start", "content_block_delta",
                                 "content_block_delta", "content_block_stop", "content_block_start",
                                 "content_block_delta", "content_block_delta", "content_block_stop",
                                 "message_delta", "message_stop"});
  CHECK(stream.find(R"("delta":{"type":"thinking_delta","thinking":"hm"})") != std::string::npos);
  CHECK(stream.find(R"("delta":{"type":"input_json_delta","partial_json":"\"Paris\"}"})") !=
        std::string::npos);
  CHECK(stream.find(R"("stop_reason":"tool_use")") != std::string::npos);
  const json message = builder.message(result);
  REQUIRE(message["content"].size() == 3);
  CHECK(message["content"][0] ==
        json{{"type", "thinking"}, {"thinking", "hmm"}, {"signature", ""}});
  CHECK(message["content"][1] == json{{"type", "text"}, {"text", "Let me look."}});
  CHECK(message["content"][2]["id"] == "toolu_1");  // fresh, not the parser's id
  CHECK(message["content"][2]["input"] == json{{"city", "Paris"}});
  CHECK(message["stop_reason"] == "tool_use");
  CHECK(message["usage"]["input_tokens"] == 18);
  CHECK(message["usage"]["cache_read_input_tokens"] == 12);
  CHECK(message["usage"]["output_tokens"] == 9);
}

TEST_CASE("stop reasons: end_turn, stop_sequence, max_tokens, and a cut-off call") {
  using Kind = Job::Event::Kind;
  const auto reason = [](const std::vector<Job::Event>& events, JobResult result) {
    MessageBuilder builder("msg", "m", [] { return std::string("toolu_x"); });
    for (const auto& e : events) builder.push(e);
    return builder.message(result);
  };
  JobResult r;
  r.finish_reason = "stop";
  CHECK(reason({{Kind::kText, "a"}}, r)["stop_reason"] == "end_turn");
  CHECK(reason({{Kind::kText, "a"}}, r)["stop_sequence"].is_null());
  r.stop_sequence = "END";
  CHECK(reason({{Kind::kText, "a"}}, r)["stop_reason"] == "stop_sequence");
  CHECK(reason({{Kind::kText, "a"}}, r)["stop_sequence"] == "END");
  r = {};
  r.finish_reason = "length";
  CHECK(reason({{Kind::kText, "a"}}, r)["stop_reason"] == "max_tokens");
  r.finish_reason = "tool_calls";
  const json cut =
      reason({{Kind::kToolCall, {}, 0, "i", "f"}, {Kind::kToolArguments, "{\"a\":", 0}}, r);
  CHECK(cut["stop_reason"] == "max_tokens");
  CHECK(cut["content"][0]["input"] == json::object());
}
