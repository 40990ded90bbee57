// compute/serve/api_error.h: an error with its HTTP status, shaped as the API
// of the route it answers: OpenAI's {"error": {message, type, param, code}}
// or Anthropic's {"type": "error", "error": {type, message}}. Thrown by
// request parsing and the server's checks; never carries engine internals
// beyond the message.
#pragma once

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace sluice::serve {

enum class Api { kOpenAi, kAnthropic };

// The API a path belongs to: /v1/messages and below are Anthropic's.
inline Api api_of(std::string_view path) {
  return path == "/v1/messages" || path.starts_with("/v1/messages/") ? Api::kAnthropic
                                                                     : Api::kOpenAi;
}

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string type, std::string message, std::optional<std::string> param = {},
           std::optional<std::string> code = {})
      : std::runtime_error(message),
        status(status),
        type(std::move(type)),
        param(std::move(param)),
        code(std::move(code)) {}

  nlohmann::ordered_json body(Api api = Api::kOpenAi) const {
    if (api == Api::kAnthropic)
      return {{"type", "error"}, {"error", {{"type", anthropic_type()}, {"message", what()}}}};
    nlohmann::ordered_json error = {{"message", what()},
                                    {"type", type},
                                    {"param", param ? nlohmann::ordered_json(*param) : nullptr},
                                    {"code", code ? nlohmann::ordered_json(*code) : nullptr}};
    return {{"error", error}};
  }

  // Anthropic names its error types by status alone.
  std::string anthropic_type() const {
    switch (status) {
      case 401:
        return "authentication_error";
      case 403:
        return "permission_error";
      case 404:
        return "not_found_error";
      case 413:
        return "request_too_large";
      case 429:
        return "rate_limit_error";
      case 503:
        return "overloaded_error";
      default:
        return status < 500 ? "invalid_request_error" : "api_error";
    }
  }

  int status;
  std::string type;
  std::optional<std::string> param;
  std::optional<std::string> code;
};

// A 400 invalid_request_error naming the request field `param`.
template <typename... Args>
[[noreturn]] void bad_param(const std::string& param, fmt::format_string<Args...> format,
                            Args&&... args) {
  throw ApiError(400, "invalid_request_error",
                 fmt::format("{}: {}", param, fmt::format(format, std::forward<Args>(args)...)),
                 param);
}

}  // namespace sluice::serve
