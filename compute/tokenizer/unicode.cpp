// compute/tokenizer/unicode.cpp: UTF-8 repair and decoding, character classes
// and NFC on top of ICU. Never hands out a code point it did not validate.
#include "compute/tokenizer/unicode.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/uscript.h>

#include <array>
#include <memory>
#include <vector>

#include "proto/error.h"
#include "proto/utf8.h"

namespace sluice::tokenizer {
namespace {

uint16_t classify_with_icu(char32_t c) {
  const auto cp = static_cast<UChar32>(c);
  uint16_t classes = 0;
  switch (u_charType(cp)) {
    case U_UPPERCASE_LETTER:
    case U_TITLECASE_LETTER:
      classes |= kLetter | kUpperLike;
      break;
    case U_LOWERCASE_LETTER:
      classes |= kLetter | kLowerLike;
      break;
    case U_MODIFIER_LETTER:
    case U_OTHER_LETTER:
      classes |= kLetter | kUpperLike | kLowerLike;
      break;
    case U_DECIMAL_DIGIT_NUMBER:
    case U_LETTER_NUMBER:
    case U_OTHER_NUMBER:
      classes |= kNumber;
      break;
    case U_CONNECTOR_PUNCTUATION:
    case U_DASH_PUNCTUATION:
    case U_START_PUNCTUATION:
    case U_END_PUNCTUATION:
    case U_INITIAL_PUNCTUATION:
    case U_FINAL_PUNCTUATION:
    case U_OTHER_PUNCTUATION:
      classes |= kPunctuation;
      break;
    case U_MATH_SYMBOL:
    case U_CURRENCY_SYMBOL:
    case U_MODIFIER_SYMBOL:
    case U_OTHER_SYMBOL:
      classes |= kSymbol;
      break;
    case U_NON_SPACING_MARK:
    case U_ENCLOSING_MARK:
    case U_COMBINING_SPACING_MARK:
      classes |= kMark | kUpperLike | kLowerLike;
      break;
    default:
      break;
  }
  if (u_isUWhiteSpace(cp)) classes |= kSpace;
  UErrorCode status = U_ZERO_ERROR;
  if (uscript_getScript(cp, &status) == USCRIPT_HAN && U_SUCCESS(status)) classes |= kHan;
  if (u_hasBinaryProperty(cp, UCHAR_ALPHABETIC) || (classes & kMark) ||
      u_charType(cp) == U_DECIMAL_DIGIT_NUMBER || u_charType(cp) == U_CONNECTOR_PUNCTUATION ||
      u_hasBinaryProperty(cp, UCHAR_JOIN_CONTROL)) {
    classes |= kWord;
  }
  return classes;
}

// The Basic Multilingual Plane is looked up in a table built once; ICU's own
// trie answers for the rest, which is rare in text.
const std::vector<uint16_t>& bmp_classes() {
  static const std::vector<uint16_t> table = [] {
    std::vector<uint16_t> t(0x10000);
    for (char32_t c = 0; c < 0x10000; ++c) t[c] = classify_with_icu(c);
    return t;
  }();
  return table;
}

}  // namespace

std::string repair_utf8(std::string_view bytes) {
  if (is_valid_utf8(bytes)) return std::string(bytes);
  std::string out;
  out.reserve(bytes.size() + 8);
  for (size_t i = 0; i < bytes.size();) {
    const Utf8Step step = next_utf8(bytes, i);
    if (step.ok) {
      out.append(bytes.substr(i, step.length));
    } else {
      append_utf8(out, kReplacementChar);
    }
    i += step.length;
  }
  return out;
}

bool is_valid_utf8(std::string_view bytes) {
  for (size_t i = 0; i < bytes.size();) {
    if (static_cast<unsigned char>(bytes[i]) < 0x80) {
      ++i;
      continue;
    }
    const Utf8Step step = next_utf8(bytes, i);
    if (!step.ok) return false;
    i += step.length;
  }
  return true;
}

size_t complete_utf8_prefix(std::string_view bytes) {
  for (size_t i = 0; i < bytes.size();) {
    const Utf8Step step = next_utf8(bytes, i);
    if (step.truncated) return i;
    i += step.length;
  }
  return bytes.size();
}

void decode_utf8(std::string_view valid, std::u32string& out) {
  out.clear();
  out.reserve(valid.size());
  for (size_t i = 0; i < valid.size();) {
    const Utf8Step step = next_utf8(valid, i);
    out.push_back(step.code_point);
    i += step.length;
  }
}

char32_t code_point_at(std::string_view valid, size_t at, size_t& length) {
  const Utf8Step step = next_utf8(valid, at);
  length = step.length;
  return step.code_point;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

uint16_t char_classes(char32_t c) {
  if (c < 0x10000) return bmp_classes()[c];
  return classify_with_icu(c);
}

bool is_python_space(char32_t c) {
  // Zs and the bidi classes WS, B, S, as a table: this runs per code point.
  if ((c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20)) return true;
  if (c < 0x85) return false;
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
         c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

std::string nfc(std::string_view valid) {
  bool ascii = true;
  for (char ch : valid) {
    if (static_cast<unsigned char>(ch) >= 0x80) {
      ascii = false;
      break;
    }
  }
  if (ascii) return std::string(valid);  // ASCII never changes under NFC
  if (valid.size() > 0x7FFFFFFF) fail("tokenizer: text of {} bytes is too long to normalize", valid.size());
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* normalizer = icu::Normalizer2::getNFCInstance(status);
  if (U_FAILURE(status)) fail("tokenizer: ICU has no NFC data ({})", u_errorName(status));
  std::string out;
  out.reserve(valid.size());
  icu::StringByteSink<std::string> sink(&out);
  normalizer->normalizeUTF8(0, icu::StringPiece(valid.data(), static_cast<int32_t>(valid.size())), sink,
                            nullptr, status);
  if (U_FAILURE(status)) fail("tokenizer: NFC normalization failed ({})", u_errorName(status));
  return out;
}

}  // namespace sluice::tokenizer
