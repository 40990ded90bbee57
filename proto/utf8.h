// proto/utf8.h: one step of a UTF-8 decoder, shared by the tokenizer (which
// repairs text the way reference tokenizers do) and error messages (which
// must stay readable when they quote bytes from a damaged file).
#pragma once

#include <cstddef>
#include <string_view>

namespace sluice {

inline constexpr char32_t kReplacementChar = 0xFFFD;

struct Utf8Step {
  char32_t code_point;
  size_t length;
  bool ok;
  bool truncated;  // ran out of input while the sequence was still valid
};

// WHATWG-conformant: an invalid sequence consumes exactly its maximal
// subpart, so a count of U+FFFD matches TextDecoder's. No overlong forms,
// surrogates or code points past U+10FFFF are ok.
inline Utf8Step next_utf8(std::string_view s, size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) return {b0, 1, true, false};
  size_t need = 0;
  unsigned lo = 0x80, hi = 0xBF;
  char32_t cp = 0;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
    cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;  // surrogates are not scalar values
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {kReplacementChar, 1, false, false};
  }
  size_t j = i + 1;
  for (size_t k = 0; k < need; ++k, ++j) {
    if (j >= s.size()) return {kReplacementChar, j - i, false, true};
    const auto b = static_cast<unsigned char>(s[j]);
    if (b < lo || b > hi) return {kReplacementChar, j - i, false, false};
    cp = (cp << 6) | (b & 0x3F);
    lo = 0x80;
    hi = 0xBF;
  }
  return {cp, j - i, true, false};
}

}  // namespace sluice
