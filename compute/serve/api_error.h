// compute/serve/api_error.h: an error as the OpenAI API shapes it
// ({"error": {message, type, param, code}} with an HTTP status). Thrown by
// request parsing and the server's checks; never carries engine internals
// beyond the message.
#pragma once

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

namespace sluice::serve {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string type, std::string message, std::optional<std::string> param = {},
           std::optional<std::string> code = {})
      : std::runtime_error(message),
        status(status),
        type(std::move(type)),
        param(std::move(param)),
        code(std::move(code)) {}

  nlohmann::ordered_json body() const {
    nlohmann::ordered_json error = {{"message", what()},
                                    {"type", type},
                                    {"param", param ? nlohmann::ordered_json(*param) : nullptr},
                                    {"code", code ? nlohmann::ordered_json(*code) : nullptr}};
    return {{"error", error}};
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
