// tests/compute/tokenizer/unicode_test.cpp: UTF-8 repair (WHATWG maximal
// subparts), streaming completeness, character classes and NFC, checked
// against facts from the Unicode and WHATWG specifications.
#include <doctest/doctest.h>

#include "compute/tokenizer/unicode.h"

using namespace sluice::tokenizer;

namespace {
const std::string kFffd = "\xEF\xBF\xBD";
std::string times(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}
}  // namespace

TEST_CASE("valid UTF-8 passes through repair untouched") {
  const std::string text = "plain ASCII, é, 中文, 😀, \U0010FFFF";
  CHECK(is_valid_utf8(text));
  CHECK(repair_utf8(text) == text);
}

TEST_CASE("each maximal invalid subpart becomes one U+FFFD") {
  CHECK(repair_utf8("\xF0\x9F\x98" "A") == kFffd + "A");      // truncated 4-byte sequence: one
  CHECK(repair_utf8("\xED\xA0\x80") == times(kFffd, 3));     // surrogate: ED is lead of nothing valid
  CHECK(repair_utf8("\xC0\xAF") == times(kFffd, 2));         // overlong: C0 is never a lead
  CHECK(repair_utf8("\xE2\x28\xA1") == kFffd + "(" + kFffd);
  CHECK(repair_utf8("\xF4\x90\x80\x80") == times(kFffd, 4));  // above U+10FFFF
  CHECK(repair_utf8("a\xFF" "b") == "a" + kFffd + "b");
  CHECK(repair_utf8("\xC3") == kFffd);
  CHECK(!is_valid_utf8("\xC3"));
}

TEST_CASE("complete_utf8_prefix holds back only a sequence more bytes could finish") {
  CHECK(complete_utf8_prefix("a\xC3") == 1);
  CHECK(complete_utf8_prefix("a\xC3\xA9") == 3);
  CHECK(complete_utf8_prefix("\xF0\x9F\x98") == 0);
  CHECK(complete_utf8_prefix("\xFF") == 1);         // never valid: nothing to wait for
  CHECK(complete_utf8_prefix("\xE2\x28") == 2);     // already broken
  CHECK(complete_utf8_prefix("") == 0);
}

TEST_CASE("decode and append are inverse on scalar values") {
  std::string s;
  const std::u32string cps = {U'a', 0x7F, 0x80, 0x7FF, 0x800, 0xFFFD, 0x10000, 0x10FFFF};
  for (char32_t c : cps) append_utf8(s, c);
  std::u32string back;
  decode_utf8(s, back);
  CHECK(back == cps);
}

TEST_CASE("character classes follow the general categories") {
  CHECK((char_classes(U'a') & kLetter) != 0);
  CHECK((char_classes(U'\u4E2D') & kLetter) != 0);
  CHECK((char_classes(U'5') & kNumber) != 0);
  CHECK((char_classes(U'\u0663') & kNumber) != 0);   // ARABIC-INDIC DIGIT THREE
  CHECK((char_classes(U'\u2155') & kNumber) != 0);   // VULGAR FRACTION ONE FIFTH (No)
  CHECK((char_classes(U'!') & kPunctuation) != 0);
  CHECK((char_classes(U'_') & kPunctuation) != 0);
  CHECK((char_classes(U'+') & kSymbol) != 0);
  CHECK((char_classes(U'$') & kSymbol) != 0);
  CHECK((char_classes(U'\U0001F600') & kSymbol) != 0);
  CHECK((char_classes(U'\u0301') & kMark) != 0);
  CHECK((char_classes(U'\u093F') & kMark) != 0);     // DEVANAGARI VOWEL SIGN I (Mc)
  CHECK(char_classes(U'\u200D') == kWord);    // ZWJ: Cf, but Join_Control counts as \w
  CHECK((char_classes(U'_') & kWord) != 0);
  CHECK(!(char_classes(U'-') & kWord));
}

TEST_CASE("the case classes of o200k and Kimi, and Han as a script") {
  const uint16_t both = kUpperLike | kLowerLike;
  CHECK((char_classes(U'A') & both) == kUpperLike);       // Lu
  CHECK((char_classes(U'\u01C5') & both) == kUpperLike);  // Lt: LATIN CAPITAL D WITH SMALL Z WITH CARON
  CHECK((char_classes(U'a') & both) == kLowerLike);       // Ll
  CHECK((char_classes(U'\u017F') & both) == kLowerLike);  // Ll: LATIN SMALL LETTER LONG S
  CHECK((char_classes(U'\u02B0') & both) == both);        // Lm: MODIFIER LETTER SMALL H
  CHECK((char_classes(U'\u3042') & both) == both);        // Lo: HIRAGANA LETTER A
  CHECK((char_classes(U'\u0301') & both) == both);        // Mn
  CHECK((char_classes(U'5') & both) == 0);
  CHECK((char_classes(U'!') & both) == 0);
  // Script=Han, whatever the category: ideographs (Lo), 々 (Lm), 〇 (Nl),
  // a Kangxi radical (So); not kana, not the ideographic full stop (Common).
  for (char32_t c : {U'\u4E2D', U'\u3005', U'\u3007', U'\u2F00', U'\U00020000'}) {
    CAPTURE(static_cast<uint32_t>(c));
    CHECK((char_classes(c) & kHan) != 0);
  }
  for (char32_t c : {U'\u3042', U'\u30A2', U'\u3002', U'a', U'\u0301'}) {
    CAPTURE(static_cast<uint32_t>(c));
    CHECK((char_classes(c) & kHan) == 0);
  }
}

TEST_CASE("whitespace is the White_Space property") {
  for (char32_t c : {U' ', U'\t', U'\n', U'\r', U'\v', U'\f', U'\u0085', U'\u00A0', U'\u2028', U'\u3000'}) {
    CHECK((char_classes(c) & kSpace) != 0);
  }
  // JavaScript's \s counts U+FEFF; the White_Space property (and so Hugging
  // Face's Oniguruma) does not.
  CHECK(!(char_classes(U'\uFEFF') & kSpace));
  CHECK(!(char_classes(U'\u200B') & kSpace));
  CHECK(!(char_classes(U'\u001F') & kSpace));
}

TEST_CASE("Python's str.isspace is wider than White_Space") {
  for (char32_t c :
       {U' ', U'\t', U'\n', U'\x1C', U'\x1F', U'\u0085', U'\u00A0', U'\u2028', U'\u3000'}) {
    CAPTURE(static_cast<uint32_t>(c));
    CHECK(is_python_space(c));
  }
  for (char32_t c : {U'a', U'\u200B', U'\uFEFF', U'\x1B', U'_'}) {
    CAPTURE(static_cast<uint32_t>(c));
    CHECK(!is_python_space(c));
  }
}

TEST_CASE("NFC composes canonical sequences") {
  CHECK(nfc("e\u0301") == "\u00E9");
  CHECK(nfc("\u212B") == "\u00C5");             // ANGSTROM SIGN -> A WITH RING
  CHECK(nfc("\u1100\u1161\u11A8") == "\uAC01");  // Hangul jamo -> syllable
  CHECK(nfc("a\u0323\u0302") == "\u1EAD");       // reordered marks compose
  CHECK(nfc("\uFB01") == "\uFB01");              // compatibility ligature stays (NFC, not NFKC)
  CHECK(nfc("ascii only") == "ascii only");
}
