// tests/compute/tokenizer/reference_inputs.h: the varied strings the
// reference comparisons run on (prose, code, digits, whitespace, CJK, emoji,
// marks, contractions, special-token text, broken UTF-8) and the base64 the
// tests and Node exchange them in. Deterministic for a given seed.
#pragma once

#include <unicode/uchar.h>

#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "compute/tokenizer/unicode.h"

namespace sluice::test_inputs {

class Generator {
 public:
  explicit Generator(uint64_t seed) : rng_(seed) {}

  uint64_t below(uint64_t n) { return rng_() % n; }
  template <typename T>
  const T& pick(const std::vector<T>& v) {
    return v[below(v.size())];
  }

  std::string utf8(char32_t c) {
    std::string s;
    sluice::tokenizer::append_utf8(s, c);
    return s;
  }

  // A code point assigned in the Unicode version of the ICU on this machine;
  // U+FEFF and U+0085 are left out because JavaScript's \s and the White_Space
  // property (Oniguruma, Hugging Face) disagree on exactly those two.
  char32_t random_assigned() {
    for (;;) {
      char32_t c;
      switch (below(4)) {
        case 0:
          c = static_cast<char32_t>(below(0x800));
          break;
        case 1:
        case 2:
          c = static_cast<char32_t>(below(0x10000));
          break;
        default:
          c = static_cast<char32_t>(below(0x30000));
          break;
      }
      if ((c >= 0xD800 && c <= 0xDFFF) || c == 0xFEFF || c == 0x85) continue;
      if (u_charType(static_cast<UChar32>(c)) == U_UNASSIGNED) continue;
      return c;
    }
  }

  std::string broken_utf8() {
    static const std::vector<std::string> kBroken = {"\x80",         "\xBF",
                                                     "\xC0\xAF",     "\xC1\xBF",
                                                     "\xE0\x80\xAF", "\xED\xA0\x80",
                                                     "\xED\xBF\xBF", "\xF4\x90\x80\x80",
                                                     "\xF5",         "\xFF",
                                                     "\xFE",         "\xE2\x82",
                                                     "\xF0\x9F\x98", "\xC3",
                                                     "\xF0\x9F",     "\xE2\x28\xA1",
                                                     "\xC3\x28",     "\xF8\x88\x80\x80\x80"};
    if (below(3) == 0) {
      std::string s;
      const size_t n = 1 + below(6);
      for (size_t i = 0; i < n; ++i) s.push_back(static_cast<char>(below(256)));
      return s;
    }
    return pick(kBroken);
  }

  std::string fragment() {
    static const std::vector<std::string> kProse = {
        "The quick brown fox jumps over the lazy dog.",
        "Ceci n'est pas une pipe, où est-elle ?",
        "Größenordnung und Straße — äöü ÄÖÜ ß",
        "¿Qué tal? ¡Muy bien! Año, niño, acción.",
        "Съешь же ещё этих мягких французских булок, да выпей чаю.",
        "Η γρήγορη καφέ αλεπού πηδάει πάνω από τον σκύλο.",
        "نص عربي مع أرقام ١٢٣٤ وعلامات، وترقيم؟",
        "שלום עולם, זה טקסט בעברית עם ניקוד: שָׁלוֹם",
        "我们在北京的大学学习中文。今天天气很好！",
        "日本語のテキストです。カタカナとひらがな、漢字。",
        "한국어 문장입니다. 안녕하세요!",
        "यह हिंदी में एक वाक्य है। क़िला, ज़रूर",
        "ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ",
        "Tiếng Việt có dấu: Người, được, những.",
        "ქართული ენა",
        "Հայերեն լեզու",
        "ʻŌlelo Hawaiʻi",
        "Ǆemal ǅ ǆ ﬁne ﬂow",
        "İstanbul ıi İI"};
    static const std::vector<std::string> kCode = {
        "int main(int argc, char** argv) {\n    return 0;\n}\n",
        "def f(x):\n\tif x > 0:\n\t\treturn x ** 2  # square\n\treturn -x\n",
        "{\"key\": [1, 2.5, -3e10, null, true], \"nested\": {\"a\": \"b\"}}",
        "for (auto& [k, v] : map_) { std::cout << k << '=' << v << \"\\n\"; }",
        "SELECT * FROM users WHERE id = 42 AND name LIKE '%bob%';",
        "<div class=\"x\">&nbsp;&lt;tag&gt;</div>",
        "x+=1;y-=2;z*=3;w/=4;a%=5;b<<=1;c>>=2;",
        "https://example.com/path?q=1&r=two#frag",
        "#!/bin/sh\nset -eu\necho \"$HOME\" | grep -v '^#'\n",
        "    \n    x = [i for i in range(10)]\n"};
    static const std::vector<std::string> kNumbers = {"0",
                                                      "7",
                                                      "42",
                                                      "1234",
                                                      "12345",
                                                      "3.14159",
                                                      "1,234,567.89",
                                                      "-0.0001",
                                                      "1e-9",
                                                      "99999999999999999999",
                                                      "٣٤٥",
                                                      "१२३",
                                                      "一二三",
                                                      "Ⅻ ⅻ",
                                                      "½ ¾ ⅞",
                                                      "²³¹",
                                                      "①②③",
                                                      "0x7FFFFFFF",
                                                      "2025-11-29T12:00:00Z"};
    static const std::vector<std::string> kSpaces = {
        " ",      "  ",       "   ",          "\t",           "\t\t",        "\n",     "\n\n",
        "\r\n",   "\r\n\r\n", " \n",          "\n ",          "  \n\n  ",    " \t \n", "\r",
        "\u00a0", "\u3000",   "\u2003\u2009", "\u000b\u000c", "   \r\n\t  ", "\u2028", "\u200b"};
    static const std::vector<std::string> kEmoji = {"😀",
                                                    "👍🏽",
                                                    "👋🏿",
                                                    "👨‍👩‍👧‍👦",
                                                    "🏳️‍🌈",
                                                    "🇩🇪🇯🇵",
                                                    "1️⃣",
                                                    "❤️",
                                                    "🧑🏾‍💻",
                                                    "🫠",
                                                    "🐻‍❄️",
                                                    "✊🏻✊🏼✊🏽"};
    static const std::vector<std::string> kMarks = {"e\u0301",
                                                    "a\u0308",
                                                    "A\u030a",
                                                    "\u212b",
                                                    "n\u0303",
                                                    "\u1100\u1161\u11a8",
                                                    "o\u0308\u0304",
                                                    "\u0915\u093c",
                                                    "\u0301\u0301",
                                                    "x\u20dd",
                                                    "\u05e9\u05c1\u05b8",
                                                    "Z\u0335\u0321\u0346",
                                                    "\u0041\u0300\u0316",
                                                    "\ufb01"};
    static const std::vector<std::string> kContractions = {
        "I'm",   "you're", "DON'T", "We'Ll",  "they'RE",   "it's",        "IT'S",
        "she'd", "I've",   "'s",    "'S",     "'ll",       "rock'n'roll", "o'clock",
        "' s",   "''",     "'T",    "can't'", "y'all'd've"};
    static const std::vector<std::string> kSpecials = {"<|im_start|>",
                                                       "<|im_end|>",
                                                       "<|endoftext|>",
                                                       "<think>",
                                                       "</think>",
                                                       "<tool_call>",
                                                       "<｜begin▁of▁sentence｜>",
                                                       "<｜end▁of▁sentence｜>",
                                                       "<｜User｜>",
                                                       "<｜Assistant｜>",
                                                       "<|im_",
                                                       "<<|im_end|>>",
                                                       "<|im_start|>user\nhi<|im_end|>\n",
                                                       "<｜tool▁sep｜>",
                                                       "<|fim_prefix|>",
                                                       "<|vision_pad|>"};

    switch (below(12)) {
      case 0:
      case 1:
        return pick(kProse);
      case 2:
        return pick(kCode);
      case 3:
        return pick(kNumbers);
      case 4:
      case 5:
        return pick(kSpaces);
      case 6:
        return pick(kEmoji);
      case 7:
        return pick(kMarks);
      case 8:
        return pick(kContractions);
      case 9:
        return pick(kSpecials);
      case 10: {
        std::string s;
        const size_t n = 1 + below(8);
        for (size_t i = 0; i < n; ++i) s += utf8(random_assigned());
        return s;
      }
      default:
        return broken_utf8();
    }
  }

  std::string text(bool allow_broken) {
    for (;;) {
      std::string s;
      const size_t n = 1 + below(7);
      for (size_t i = 0; i < n; ++i) {
        s += fragment();
        if (below(3) == 0) s += pick(std::vector<std::string>{" ", "", "\n", "  "});
      }
      if (allow_broken || sluice::tokenizer::is_valid_utf8(s)) return s;
    }
  }

 private:
  std::mt19937_64 rng_;
};

// About 1,100 varied strings (one in ten with broken UTF-8) and a few long
// pieces, the same for every run with the same seed.
inline std::vector<std::string> make_inputs(uint64_t seed) {
  Generator g(seed);
  std::vector<std::string> inputs;
  for (int i = 0; i < 1100; ++i) inputs.push_back(g.text(i % 10 == 0));
  // Long pieces: BPE over thousands of bytes, long digit and space runs.
  inputs.push_back(std::string(3000, 'a'));
  inputs.push_back(std::string(2000, ' ') + "x" + std::string(1000, '\n'));
  std::string digits;
  for (int i = 0; i < 300; ++i) digits += "1234567890";
  inputs.push_back(digits);
  std::string mixed;
  for (int i = 0; i < 200; ++i) mixed += g.fragment();
  inputs.push_back(mixed);
  inputs.push_back("");
  return inputs;
}

inline std::string base64_encode(std::string_view in) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    for (int k = 18; k >= 0; k -= 6) out += kAlphabet[(v >> k) & 63];
  }
  if (i + 1 == in.size()) {
    const uint32_t v = uint8_t(in[i]) << 16;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == in.size()) {
    const uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

inline std::string base64_decode(std::string_view in) {
  std::string out;
  uint32_t v = 0;
  int bits = 0;
  for (char c : in) {
    int d;
    if (c >= 'A' && c <= 'Z')
      d = c - 'A';
    else if (c >= 'a' && c <= 'z')
      d = c - 'a' + 26;
    else if (c >= '0' && c <= '9')
      d = c - '0' + 52;
    else if (c == '+')
      d = 62;
    else if (c == '/')
      d = 63;
    else
      continue;
    v = (v << 6) | d;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((v >> bits) & 0xFF));
    }
  }
  return out;
}

}  // namespace sluice::test_inputs
