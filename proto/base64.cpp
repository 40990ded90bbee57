// proto/base64.cpp: decode_base64 over nettle. The checks here are the rules
// nettle does not enforce (its decoder skips whitespace and takes either
// padding); the decoding itself is nettle's.
#include "proto/base64.h"

#include <nettle/base64.h>

#include <fmt/format.h>

namespace sluice {
namespace {

bool alphanumeric(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

std::optional<std::string> refuse(std::string* why, std::string reason) {
  *why = std::move(reason);
  return std::nullopt;
}

}  // namespace

std::optional<std::string> decode_base64(std::string_view text, Base64Rules rules, std::string* why) {
  if (text.empty()) return std::string();
  size_t digits = text.size();
  while (digits > 0 && text.size() - digits < 2 && text[digits - 1] == '=') --digits;
  bool standard = false, url = false;
  for (size_t i = 0; i < digits; ++i) {
    const char c = text[i];
    if (alphanumeric(c)) continue;
    if (c == '+' || c == '/') {
      standard = true;
    } else if (rules.url_safe_too && (c == '-' || c == '_')) {
      url = true;
    } else {
      return refuse(why, fmt::format("byte {} is not base64", i));
    }
    if (standard && url) return refuse(why, fmt::format("byte {} mixes the URL-safe and standard alphabets", i));
  }
  if (digits == 0) return refuse(why, "padding and no digits");
  if (digits % 4 == 1) return refuse(why, "a dangling character");
  if ((rules.padding_required || digits != text.size()) && text.size() % 4 != 0)
    return refuse(why, fmt::format("{} characters with their padding, not a multiple of 4", text.size()));

  std::string padded(text.substr(0, digits));
  padded.append((4 - digits % 4) % 4, '=');
  base64_decode_ctx ctx;
  if (url) {
    base64url_decode_init(&ctx);
  } else {
    base64_decode_init(&ctx);
  }
  std::string out(BASE64_DECODE_LENGTH(padded.size()), '\0');
  size_t length = out.size();
  if (base64_decode_update(&ctx, &length, reinterpret_cast<uint8_t*>(out.data()), padded.size(), padded.data()) != 1 ||
      base64_decode_final(&ctx) != 1) {
    return refuse(why, "not base64");
  }
  out.resize(length);
  return out;
}

std::string encode_base64(std::span<const uint8_t> bytes) {
  std::string out(BASE64_ENCODE_RAW_LENGTH(bytes.size()), '\0');
  base64_encode_raw(out.data(), bytes.size(), bytes.data());
  return out;
}

}  // namespace sluice
