// proto/error.h: the one error type every room throws for logistics
// (bad input, I/O failure, a peer that vanished). The message always names
// the thing that is wrong: the file, tensor, record or flag.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "proto/utf8.h"

namespace sluice {

// Messages quote what came out of files and messages (a tensor name, a
// parser's "last read"), and a damaged file makes those arbitrary bytes. The
// user must still get readable text, so bytes that are not valid UTF-8 and
// control characters are written as \xNN. Newlines stay: a refused budget
// deliberately shows its plan as a table under the message.
inline std::string printable_message(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const auto byte = static_cast<unsigned char>(text[i]);
    const Utf8Step step = next_utf8(text, i);
    if (step.ok && (byte >= 0x20 || byte == '\n') && byte != 0x7f) {
      out.append(text.substr(i, step.length));
      i += step.length;
    } else {
      out += fmt::format("\\x{:02x}", byte);
      ++i;
    }
  }
  return out;
}

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(printable_message(message)) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace sluice
