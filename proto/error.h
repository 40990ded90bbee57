// proto/error.h: the one error type every room throws for logistics
// (bad input, I/O failure, a peer that vanished). The message always names
// the thing that is wrong: the file, tensor, record or flag.
#pragma once

#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace sluice {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace sluice
