// compute/serve/request.cpp: field-by-field checks of the OpenAI request
// bodies. Ranges follow OpenAI's documented ones; a field this server cannot
// honour (n > 1, logprobs) is refused by name rather than silently dropped.
#include "compute/serve/request.h"

#include <charconv>
#include <cmath>
#include <limits>

#include "compute/serve/api_error.h"
#include "compute/serve/body_fields.h"

namespace sluice::serve {
namespace {

constexpr size_t kMaxStopStrings = 4;

bool boolean(const json& body, const char* key) {
  const json& value = body[key];
  if (!value.is_boolean()) bad_param(key, "expected true or false, got {}", value.type_name());
  return value.get<bool>();
}

uint64_t whole_number(const json& value, const std::string& param, uint64_t low, uint64_t high) {
  if (!value.is_number_integer()) {
    if (value.is_number_float()) {
      const double x = value.get<double>();
      if (x == std::floor(x) && x >= static_cast<double>(low) && x <= static_cast<double>(high))
        return static_cast<uint64_t>(x);
    }
    bad_param(param, "expected an integer, got {}", value.dump());
  }
  if (value.is_number_unsigned()) {
    const uint64_t x = value.get<uint64_t>();
    if (x < low || x > high) bad_param(param, "{} is out of range [{}, {}]", x, low, high);
    return x;
  }
  const int64_t x = value.get<int64_t>();
  if (x < 0 || static_cast<uint64_t>(x) < low || static_cast<uint64_t>(x) > high)
    bad_param(param, "{} is out of range [{}, {}]", x, low, high);
  return static_cast<uint64_t>(x);
}

GenerationSettings parse_settings(const json& body, uint64_t default_seed, bool chat) {
  GenerationSettings s;
  s.sampling.temperature = 1.0f;  // OpenAI's default
  if (present(body, "n") &&
      whole_number(body["n"], "n", 0, std::numeric_limits<uint32_t>::max()) != 1)
    bad_param("n", "only n=1 is supported (one choice per request)");
  if (present(body, "temperature"))
    s.sampling.temperature = static_cast<float>(number_in(body, "temperature", 0, 2));
  if (present(body, "top_p")) {
    s.sampling.top_p = static_cast<float>(number_in(body, "top_p", 0, 1));
    if (s.sampling.top_p <= 0.0f) bad_param("top_p", "must be above 0");
  }
  if (present(body, "top_k"))  // not OpenAI's, but llama.cpp's and vLLM's clients send it
    s.sampling.top_k = static_cast<int>(whole_number(body["top_k"], "top_k", 0, 1u << 20));
  if (present(body, "presence_penalty"))
    s.presence_penalty = static_cast<float>(number_in(body, "presence_penalty", -2, 2));
  if (present(body, "frequency_penalty"))
    s.frequency_penalty = static_cast<float>(number_in(body, "frequency_penalty", -2, 2));
  s.sampling.seed = present(body, "seed") ? whole_number(body["seed"], "seed", 0,
                                                         std::numeric_limits<uint64_t>::max())
                                          : default_seed;
  // max_completion_tokens is the newer name and wins when both are given.
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    if (present(body, key))
      s.max_tokens = static_cast<uint32_t>(
          whole_number(body[key], key, 1, std::numeric_limits<uint32_t>::max()));
  }
  if (present(body, "stop")) {
    const json& stop = body["stop"];
    if (stop.is_string()) {
      s.stop.push_back(stop.get<std::string>());
    } else if (stop.is_array()) {
      if (stop.size() > kMaxStopStrings)
        bad_param("stop", "at most {} stop strings, got {}", kMaxStopStrings, stop.size());
      for (size_t i = 0; i < stop.size(); ++i) {
        if (!stop[i].is_string())
          bad_param(fmt::format("stop[{}]", i), "expected a string, got {}", stop[i].type_name());
        s.stop.push_back(stop[i].get<std::string>());
      }
    } else {
      bad_param("stop", "expected a string or a list of strings, got {}", stop.type_name());
    }
    for (size_t i = 0; i < s.stop.size(); ++i)
      if (s.stop[i].empty()) bad_param(fmt::format("stop[{}]", i), "an empty stop string");
  }
  if (present(body, "stream")) s.stream = boolean(body, "stream");
  if (present(body, "stream_options")) {
    const json& options = body["stream_options"];
    if (!options.is_object())
      bad_param("stream_options", "expected an object, got {}", options.type_name());
    if (present(options, "include_usage")) {
      if (!options["include_usage"].is_boolean())
        bad_param("stream_options.include_usage", "expected true or false");
      s.include_usage = options["include_usage"].get<bool>();
    }
  }
  // Log probabilities are not computed; refusing says so instead of
  // answering without them.
  if (chat && present(body, "logprobs") && boolean(body, "logprobs"))
    bad_param("logprobs", "log probabilities are not supported by this server");
  if (!chat && present(body, "logprobs") && whole_number(body["logprobs"], "logprobs", 0, 5) > 0)
    bad_param("logprobs", "log probabilities are not supported by this server");
  if (present(body, "logit_bias")) {
    const json& bias = body["logit_bias"];
    if (!bias.is_object()) bad_param("logit_bias", "expected an object of token id: bias");
    for (const auto& [key, value] : bias.items()) {
      const std::string where = "logit_bias." + key;
      int32_t id = 0;
      const auto [end, error] = std::from_chars(key.data(), key.data() + key.size(), id);
      if (error != std::errc() || end != key.data() + key.size() || id < 0)
        bad_param(where, "'{}' is not a token id", key);
      if (!value.is_number()) bad_param(where, "expected a number");
      const double b = value.get<double>();
      if (!std::isfinite(b) || b < -100 || b > 100)
        bad_param(where, "{} is out of range [-100, 100]", b);
      s.logit_bias.emplace_back(id, static_cast<float>(b));
    }
  }
  return s;
}

void check_messages(const json& messages) {
  if (!messages.is_array()) bad_param("messages", "expected a list of messages");
  if (messages.empty()) bad_param("messages", "the list is empty");
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string where = fmt::format("messages[{}]", i);
    const json& m = messages[i];
    if (!m.is_object()) bad_param(where, "expected an object, got {}", m.type_name());
    if (!m.contains("role") || !m["role"].is_string())
      bad_param(where + ".role", "missing or not a string");
    const std::string role = m["role"].get<std::string>();
    if (role != "system" && role != "developer" && role != "user" && role != "assistant" &&
        role != "tool")
      bad_param(where + ".role", "'{}' is not one of system, developer, user, assistant, tool",
                role);
  }
}

void check_tools(const json& body, ChatRequest& request) {
  if (present(body, "tools")) {
    const json& tools = body["tools"];
    if (!tools.is_array()) bad_param("tools", "expected a list of tools");
    for (size_t i = 0; i < tools.size(); ++i) {
      const std::string where = fmt::format("tools[{}]", i);
      if (!tools[i].is_object() || tools[i].value("type", "") != "function")
        bad_param(where + ".type", "only tools of type \"function\" are supported");
      const json& function = tools[i].value("function", json());
      if (!function.is_object() || !function.contains("name") || !function["name"].is_string())
        bad_param(where + ".function.name", "missing or not a string");
    }
    if (!tools.empty()) request.tools = tools;
  }
  if (present(body, "tool_choice")) {
    const json& choice = body["tool_choice"];
    const bool named = choice.is_object() && choice.value("type", "") == "function" &&
                       choice.contains("function") && choice["function"].is_object() &&
                       choice["function"].contains("name") &&
                       choice["function"]["name"].is_string();
    const bool keyword =
        choice.is_string() && (choice == "none" || choice == "auto" || choice == "required");
    if (!named && !keyword)
      bad_param(
          "tool_choice",
          "expected \"none\", \"auto\", \"required\" or {{\"type\": \"function\", \"function\": "
          "{{\"name\": ...}}}}");
    if (!keyword && request.tools.is_null())
      bad_param("tool_choice", "names a function but the request has no tools");
    request.tool_choice = choice;
  }
  if (present(body, "parallel_tool_calls"))
    request.parallel_tool_calls = boolean(body, "parallel_tool_calls");
  if (present(body, "response_format")) {
    const json& format = body["response_format"];
    const std::string type = format.is_object() ? format.value("type", "") : "";
    if (type != "text" && type != "json_object" && type != "json_schema")
      bad_param("response_format.type", "expected \"text\", \"json_object\" or \"json_schema\"");
    if (type == "json_schema" &&
        !(format.contains("json_schema") && format["json_schema"].is_object()))
      bad_param("response_format.json_schema", "missing or not an object");
    request.response_format = format;
  }
}

}  // namespace

json parse_body(const std::string& text) {
  json body = json::parse(text, nullptr, false);
  if (body.is_discarded())
    throw ApiError(400, "invalid_request_error", "the request body is not valid JSON");
  if (!body.is_object())
    throw ApiError(400, "invalid_request_error", "the request body must be a JSON object");
  return body;
}

ChatRequest parse_chat_request(const json& body, uint64_t default_seed) {
  ChatRequest request;
  if (!body.contains("messages")) bad_param("messages", "missing");
  check_messages(body["messages"]);
  request.messages = body["messages"];
  check_tools(body, request);
  if (present(body, "chat_template_kwargs")) {
    if (!body["chat_template_kwargs"].is_object())
      bad_param("chat_template_kwargs", "expected an object");
    request.template_kwargs = body["chat_template_kwargs"];
  }
  request.settings = parse_settings(body, default_seed, true);
  return request;
}

CompletionRequest parse_completion_request(const json& body, uint64_t default_seed) {
  CompletionRequest request;
  if (!present(body, "prompt")) bad_param("prompt", "missing");
  json prompt = body["prompt"];
  // A list of one prompt is the same as the prompt; several would be n > 1.
  if (prompt.is_array() && !prompt.empty() && (prompt[0].is_string() || prompt[0].is_array())) {
    if (prompt.size() != 1) bad_param("prompt", "only one prompt per request is supported");
    prompt = json(prompt[0]);
  }
  if (prompt.is_string()) {
    request.prompt_text = prompt.get<std::string>();
  } else if (prompt.is_array()) {
    for (size_t i = 0; i < prompt.size(); ++i)
      request.prompt_ids.push_back(static_cast<int32_t>(whole_number(
          prompt[i], fmt::format("prompt[{}]", i), 0, std::numeric_limits<int32_t>::max())));
  } else {
    bad_param("prompt", "expected a string or a list of token ids");
  }
  if (request.prompt_text && request.prompt_text->empty())
    bad_param("prompt", "the prompt is empty");
  if (!request.prompt_text && request.prompt_ids.empty())
    bad_param("prompt", "the prompt is empty");
  if (present(body, "echo")) request.echo = boolean(body, "echo");
  if (present(body, "suffix")) bad_param("suffix", "insertion (suffix) is not supported");
  request.settings = parse_settings(body, default_seed, false);
  if (!request.settings.max_tokens) request.settings.max_tokens = 16;  // OpenAI's default here
  return request;
}

}  // namespace sluice::serve
