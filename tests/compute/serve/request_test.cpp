// tests/compute/serve/request_test.cpp: request bodies checked field by
// field: what OpenAI's API accepts is taken with its defaults, and each
// refusal is a 400 naming the field (n > 1, out-of-range sampling values,
// stop lists, malformed messages, tools and response formats).
#include "compute/serve/request.h"

#include <doctest/doctest.h>

#include <string>

#include "compute/serve/api_error.h"

using sluice::serve::ApiError;
using sluice::serve::json;
using sluice::serve::parse_body;
using sluice::serve::parse_chat_request;
using sluice::serve::parse_completion_request;

namespace {

const json kMessages = json::array({{{"role", "user"}, {"content", "hi"}}});

json chat_with(const char* key, json value) {
  json body = {{"model", "m"}, {"messages", kMessages}};
  body[key] = std::move(value);
  return body;
}

// The param of the ApiError `body` gets, or "accepted".
std::string refusal(const json& body) {
  try {
    parse_chat_request(body, 7);
  } catch (const ApiError& e) {
    CHECK(e.status == 400);
    CHECK(e.type == "invalid_request_error");
    return e.param.value_or("(no param)");
  }
  return "accepted";
}

}  // namespace

TEST_CASE("a minimal chat request gets OpenAI's defaults") {
  const auto r = parse_chat_request({{"messages", kMessages}}, 7);
  CHECK(r.settings.sampling.temperature == doctest::Approx(1.0));
  CHECK(r.settings.sampling.top_p == doctest::Approx(1.0));
  CHECK(r.settings.sampling.seed == 7);
  CHECK_FALSE(r.settings.max_tokens.has_value());
  CHECK_FALSE(r.settings.stream);
  CHECK(r.tools.is_null());
}

TEST_CASE("sampling fields are read, and max_completion_tokens wins over max_tokens") {
  json body = chat_with("temperature", 0);
  body["top_p"] = 0.5;
  body["seed"] = 42;
  body["max_tokens"] = 10;
  body["max_completion_tokens"] = 20;
  body["presence_penalty"] = 1.5;
  body["frequency_penalty"] = -0.5;
  body["stop"] = "\n\n";
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  body["n"] = 1;
  const auto r = parse_chat_request(body, 7);
  CHECK(r.settings.sampling.temperature == 0.0f);
  CHECK(r.settings.sampling.top_p == doctest::Approx(0.5));
  CHECK(r.settings.sampling.seed == 42);
  CHECK(r.settings.max_tokens == 20u);
  CHECK(r.settings.presence_penalty == doctest::Approx(1.5));
  CHECK(r.settings.frequency_penalty == doctest::Approx(-0.5));
  CHECK(r.settings.stop == std::vector<std::string>{"\n\n"});
  CHECK(r.settings.stream);
  CHECK(r.settings.include_usage);
  const auto biased = parse_chat_request(chat_with("logit_bias", {{"5", -100}, {"7", 2.5}}), 0);
  CHECK(biased.settings.logit_bias ==
        std::vector<std::pair<int32_t, float>>{{5, -100.0f}, {7, 2.5f}});
}

TEST_CASE("each bad field is refused by name") {
  CHECK(refusal(chat_with("n", 2)) == "n");
  CHECK(refusal(chat_with("temperature", 2.5)) == "temperature");
  CHECK(refusal(chat_with("temperature", "hot")) == "temperature");
  CHECK(refusal(chat_with("top_p", 0)) == "top_p");
  CHECK(refusal(chat_with("presence_penalty", -3)) == "presence_penalty");
  CHECK(refusal(chat_with("frequency_penalty", 2.1)) == "frequency_penalty");
  CHECK(refusal(chat_with("max_tokens", 0)) == "max_tokens");
  CHECK(refusal(chat_with("max_tokens", 1.5)) == "max_tokens");
  CHECK(refusal(chat_with("seed", -1)) == "seed");
  CHECK(refusal(chat_with("stop", json::array({"a", "b", "c", "d", "e"}))) == "stop");
  CHECK(refusal(chat_with("stop", json::array({"a", 3}))) == "stop[1]");
  CHECK(refusal(chat_with("stop", "")) == "stop[0]");
  CHECK(refusal(chat_with("stream", "yes")) == "stream");
  CHECK(refusal(chat_with("stream_options", {{"include_usage", 1}})) ==
        "stream_options.include_usage");
  CHECK(refusal(chat_with("logprobs", true)) == "logprobs");
  CHECK(refusal(chat_with("logit_bias", {{"12", 101}})) == "logit_bias.12");
  CHECK(refusal(chat_with("logit_bias", {{"x1", 1}})) == "logit_bias.x1");
  CHECK(refusal(chat_with("logit_bias", json::array())) == "logit_bias");
  CHECK(refusal(chat_with("messages", json::array())) == "messages");
  CHECK(refusal(chat_with("messages", json::array({{{"content", "x"}}}))) == "messages[0].role");
  CHECK(refusal(chat_with("messages", json::array({{{"role", "robot"}, {"content", "x"}}}))) ==
        "messages[0].role");
  CHECK(refusal(chat_with("tools", json::array({{{"type", "retrieval"}}}))) == "tools[0].type");
  CHECK(refusal(chat_with("tool_choice", "sometimes")) == "tool_choice");
  CHECK(refusal(chat_with("response_format", {{"type", "yaml"}})) == "response_format.type");
  CHECK(refusal(chat_with("response_format", {{"type", "json_schema"}})) ==
        "response_format.json_schema");
  CHECK(refusal(json{{"model", "m"}}) == "messages");
}

TEST_CASE("tools, tool_choice and response_format are kept for the template") {
  const json tools =
      json::array({{{"type", "function"},
                    {"function", {{"name", "weather"}, {"parameters", json::object()}}}}});
  json body = chat_with("tools", tools);
  body["tool_choice"] = {{"type", "function"}, {"function", {{"name", "weather"}}}};
  body["response_format"] = {{"type", "json_object"}};
  body["logprobs"] = false;
  const auto r = parse_chat_request(body, 0);
  CHECK(r.tools == tools);
  CHECK(r.tool_choice["function"]["name"] == "weather");
  CHECK(r.response_format["type"] == "json_object");
  CHECK(refusal(chat_with("tool_choice", {{"type", "function"}, {"function", {{"name", "f"}}}})) ==
        "tool_choice");  // a named function with no tools
}

TEST_CASE("completion prompts: a string, token ids, or a list of one of either") {
  CHECK(*parse_completion_request({{"prompt", "Once"}}, 0).prompt_text == "Once");
  CHECK(*parse_completion_request({{"prompt", json::array({"Once"})}}, 0).prompt_text == "Once");
  CHECK(parse_completion_request({{"prompt", json::array({1, 2, 3})}}, 0).prompt_ids ==
        std::vector<int32_t>{1, 2, 3});
  CHECK(parse_completion_request({{"prompt", json::array({json::array({4, 5})})}}, 0).prompt_ids ==
        std::vector<int32_t>{4, 5});
  CHECK(parse_completion_request({{"prompt", "x"}}, 0).settings.max_tokens == 16u);
  for (const json& bad :
       {json{{"prompt", json::array({"a", "b"})}}, json{{"prompt", ""}},
        json{{"prompt", json::array({1, -2})}}, json{{"prompt", 5}}, json::object()}) {
    CHECK_THROWS_AS(parse_completion_request(bad, 0), ApiError);
  }
}

TEST_CASE("a body that is not a JSON object is a 400") {
  CHECK_THROWS_AS(parse_body("{\"messages\": ["), ApiError);
  CHECK_THROWS_AS(parse_body("[1, 2]"), ApiError);
  CHECK(parse_body("{\"a\": 1}")["a"] == 1);
}
