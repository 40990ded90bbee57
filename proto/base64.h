// proto/base64.h: base64 through nettle, the tree's one codec, for tiktoken
// rank files and data: URLs. The decoder checks every character before nettle
// sees it, so a refusal names the offending byte; whitespace is refused.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace sluice {

struct Base64Rules {
  bool padding_required = true;  // false: a final group may drop its '='
  bool url_safe_too = false;     // also the URL-safe alphabet ('-', '_'), not mixed with '+', '/'
};

// The bytes `text` encodes, or nullopt with the reason in `why` (e.g. "byte 7
// is not base64", "a dangling character").
std::optional<std::string> decode_base64(std::string_view text, Base64Rules rules, std::string* why);

// Standard base64 of `bytes`, padded.
std::string encode_base64(std::span<const uint8_t> bytes);

}  // namespace sluice
