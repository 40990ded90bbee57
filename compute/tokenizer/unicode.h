// compute/tokenizer/unicode.h: the Unicode facts the tokenizer needs — UTF-8
// repair and decoding, general-category classes, NFC. It never decides where
// tokens split; it only answers questions about characters.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "proto/utf8.h"

namespace sluice::tokenizer {

using sluice::kReplacementChar;

// Returns `bytes` with every maximal invalid subpart replaced by U+FFFD, the
// same substitution WHATWG's TextDecoder and Node's Buffer.toString make, so
// a broken input tokenizes the way the reference tokenizers see it.
std::string repair_utf8(std::string_view bytes);

// True when `bytes` is well-formed UTF-8 (no surrogates, overlongs or
// truncated sequences).
bool is_valid_utf8(std::string_view bytes);

// Length of the longest prefix of `bytes` that does not end inside a
// multi-byte sequence that could still be completed by more bytes. Invalid
// bytes count as complete (they will become U+FFFD, more bytes cannot fix
// them).
size_t complete_utf8_prefix(std::string_view bytes);

// Decodes well-formed UTF-8 (callers repair first) into code points.
void decode_utf8(std::string_view valid, std::u32string& out);
void append_utf8(std::string& out, char32_t code_point);
// The code point of well-formed UTF-8 starting at byte `at`, and its length.
char32_t code_point_at(std::string_view valid, size_t at, size_t& length);

// Character classes the recognised pre-tokenizer patterns are made of.
enum CharClass : uint16_t {
  kLetter = 1 << 0,       // \p{L}
  kNumber = 1 << 1,       // \p{N}
  kPunctuation = 1 << 2,  // \p{P}
  kSymbol = 1 << 3,       // \p{S}
  kMark = 1 << 4,         // \p{M}
  kSpace = 1 << 5,        // \s: the White_Space property (as Oniguruma and Rust's regex use it)
  kWord = 1 << 6,         // \w as Rust's regex defines it (Alphabetic, M, Nd, Pc, Join_Control)
  kUpperLike = 1 << 7,    // [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] (o200k and Kimi word heads)
  kLowerLike = 1 << 8,    // [\p{Ll}\p{Lm}\p{Lo}\p{M}] (o200k and Kimi word tails)
  kHan = 1 << 9,          // \p{Han}: Script=Han, as Rust's regex reads a bare script name
};
uint16_t char_classes(char32_t c);

// Python's str.isspace(): general category Zs or bidirectional class WS, B or
// S. Wider than White_Space (it counts U+001C..U+001F); tokenization_kimi.py
// cuts long runs by it.
bool is_python_space(char32_t c);

// Canonical composition (NFC) of well-formed UTF-8.
std::string nfc(std::string_view valid);

}  // namespace sluice::tokenizer
