// compute/chat/pystr.cpp: Python str operations over UTF-8 with provenance.
// Case mapping and character classes come from ICU; indices are code points,
// as Python counts them, never bytes.
#include "compute/chat/pystr.h"

#include <unicode/uchar.h>
#include <unicode/ustring.h>

#include <algorithm>

#include "compute/tokenizer/unicode.h"

namespace sluice::chat {

size_t utf8_length_at(std::string_view s, size_t i) {
  const auto b = static_cast<unsigned char>(s[i]);
  size_t n = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 1;
  if (i + n > s.size()) return 1;
  for (size_t k = 1; k < n; ++k) {
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 1;
  }
  return n;
}

char32_t decode_at(std::string_view s, size_t i) {
  const size_t n = utf8_length_at(s, i);
  const auto b = static_cast<unsigned char>(s[i]);
  if (n == 1) return b < 0x80 ? b : tokenizer::kReplacementChar;
  char32_t c = b & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) c = (c << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  return c;
}

size_t code_point_count(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); i += utf8_length_at(s, i)) ++n;
  return n;
}

std::vector<size_t> code_point_offsets(std::string_view s) {
  std::vector<size_t> out;
  for (size_t i = 0; i < s.size(); i += utf8_length_at(s, i)) out.push_back(i);
  out.push_back(s.size());
  return out;
}

bool is_printable(char32_t c) {
  if (c == ' ') return true;
  switch (u_charType(static_cast<UChar32>(c))) {
    case U_CONTROL_CHAR:
    case U_FORMAT_CHAR:
    case U_SURROGATE:
    case U_PRIVATE_USE_CHAR:
    case U_UNASSIGNED:
    case U_LINE_SEPARATOR:
    case U_PARAGRAPH_SEPARATOR:
    case U_SPACE_SEPARATOR:
      return false;
    default:
      return true;
  }
}

std::vector<size_t> slice_indices(size_t n, std::optional<int64_t> start,
                                  std::optional<int64_t> stop, std::optional<int64_t> step) {
  const int64_t st = step.value_or(1);
  if (st == 0) throw EvalError("slice step cannot be zero");
  const auto len = static_cast<int64_t>(n);
  auto clamp = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t x = *v < 0 ? *v + len : *v;
    if (st > 0) return std::clamp<int64_t>(x, 0, len);
    return std::clamp<int64_t>(x, -1, len - 1);
  };
  std::vector<size_t> out;
  if (st > 0) {
    for (int64_t i = clamp(start, 0), e = clamp(stop, len); i < e; i += st)
      out.push_back(static_cast<size_t>(i));
  } else {
    for (int64_t i = clamp(start, len - 1), e = clamp(stop, -1); i > e; i += st)
      out.push_back(static_cast<size_t>(i));
  }
  return out;
}

Text strip(const Text& s, const std::optional<std::string>& chars, StripSide side) {
  const std::string& b = s.str();
  std::u32string set;
  if (chars) tokenizer::decode_utf8(tokenizer::repair_utf8(*chars), set);
  auto strippable = [&](char32_t c) {
    return chars ? set.find(c) != std::u32string::npos : tokenizer::is_python_space(c);
  };
  const std::vector<size_t> at = code_point_offsets(b);
  size_t first = 0;
  size_t last = at.size() - 1;  // code point index one past the kept range
  if (side != StripSide::kRight) {
    while (first < last && strippable(decode_at(b, at[first]))) ++first;
  }
  if (side != StripSide::kLeft) {
    while (last > first && strippable(decode_at(b, at[last - 1]))) --last;
  }
  return s.substr(at[first], at[last] - at[first]);
}

std::vector<Text> split(const Text& s, const std::optional<std::string>& sep, int64_t maxsplit) {
  const std::string& b = s.str();
  std::vector<Text> out;
  if (sep) {
    if (sep->empty()) throw EvalError("empty separator");
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      const size_t hit = b.find(*sep, pos);
      if (hit == std::string::npos) break;
      out.push_back(s.substr(pos, hit - pos));
      pos = hit + sep->size();
    }
    out.push_back(s.substr(pos));
    return out;
  }
  size_t i = 0;
  auto skip_space = [&] {
    while (i < b.size() && tokenizer::is_python_space(decode_at(b, i))) i += utf8_length_at(b, i);
  };
  skip_space();
  while (i < b.size()) {
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
      out.push_back(s.substr(i));  // Python keeps the remainder's trailing whitespace
      return out;
    }
    const size_t begin = i;
    while (i < b.size() && !tokenizer::is_python_space(decode_at(b, i))) i += utf8_length_at(b, i);
    out.push_back(s.substr(begin, i - begin));
    skip_space();
  }
  return out;
}

std::vector<Text> rsplit(const Text& s, const std::optional<std::string>& sep, int64_t maxsplit) {
  if (maxsplit < 0) return split(s, sep, maxsplit);
  const std::string& b = s.str();
  std::vector<Text> out;
  if (!sep) {
    const std::vector<size_t> at = code_point_offsets(b);
    auto space = [&](size_t k) { return tokenizer::is_python_space(decode_at(b, at[k])); };
    size_t k = at.size() - 1;
    while (k > 0 && space(k - 1)) --k;
    while (k > 0) {
      if (static_cast<int64_t>(out.size()) == maxsplit) {
        out.push_back(s.substr(0, at[k]));  // and rsplit its leading whitespace
        break;
      }
      const size_t end = k;
      while (k > 0 && !space(k - 1)) --k;
      out.push_back(s.substr(at[k], at[end] - at[k]));
      while (k > 0 && space(k - 1)) --k;
    }
    std::reverse(out.begin(), out.end());
    return out;
  }
  if (sep->empty()) throw EvalError("empty separator");
  size_t end = b.size();
  while (static_cast<int64_t>(out.size()) < maxsplit) {
    if (end < sep->size()) break;
    const size_t hit = b.rfind(*sep, end - sep->size());
    if (hit == std::string::npos) break;
    out.push_back(s.substr(hit + sep->size(), end - hit - sep->size()));
    end = hit;
  }
  out.push_back(s.substr(0, end));
  std::reverse(out.begin(), out.end());
  return out;
}

Text replace(const Text& s, const std::string& old, const Text& replacement, int64_t count) {
  const std::string& b = s.str();
  // Bounded before building: a short pattern and a long replacement could
  // otherwise ask for terabytes.
  uint64_t hits = 0;
  if (old.empty()) {
    hits = code_point_count(b) + 1;
  } else {
    for (size_t at = b.find(old); at != std::string::npos; at = b.find(old, at + old.size()))
      ++hits;
  }
  if (count >= 0) hits = std::min<uint64_t>(hits, static_cast<uint64_t>(count));
  check_built_size(b.size() + hits * replacement.size(), "replace");
  Text out;
  if (old.empty()) {
    // Python inserts the replacement before every code point and at the end.
    const std::vector<size_t> at = code_point_offsets(b);
    int64_t done = 0;
    for (size_t k = 0; k < at.size(); ++k) {
      if (count < 0 || done < count) {
        out.append(replacement);
        ++done;
      }
      if (k + 1 < at.size()) out.append(s.substr(at[k], at[k + 1] - at[k]));
    }
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t hit = b.find(old, pos);
    if (hit == std::string::npos) break;
    out.append(s.substr(pos, hit - pos));
    out.append(replacement);
    pos = hit + old.size();
    ++done;
  }
  out.append(s.substr(pos));
  return out;
}

namespace {

std::string map_code_point(char32_t c, Case to) {
  if (c < 0x80) {
    char a = static_cast<char>(c);
    if (to == Case::kUpper && a >= 'a' && a <= 'z') a = static_cast<char>(a - 32);
    if (to == Case::kLower && a >= 'A' && a <= 'Z') a = static_cast<char>(a + 32);
    return std::string(1, a);
  }
  UChar src[2];
  int32_t src_len = 0;
  U16_APPEND_UNSAFE(src, src_len, static_cast<UChar32>(c));
  UChar dst[8];
  UErrorCode status = U_ZERO_ERROR;
  const int32_t n = to == Case::kUpper ? u_strToUpper(dst, 8, src, src_len, "", &status)
                                       : u_strToLower(dst, 8, src, src_len, "", &status);
  std::string out;
  if (U_FAILURE(status)) {
    tokenizer::append_utf8(out, c);
    return out;
  }
  for (int32_t i = 0; i < n;) {
    UChar32 cp;
    U16_NEXT(dst, i, n, cp);
    tokenizer::append_utf8(out, static_cast<char32_t>(cp));
  }
  return out;
}

std::string title_code_point(char32_t c) {
  if (c < 0x80) return map_code_point(c, Case::kUpper);
  std::string out;
  tokenizer::append_utf8(out, static_cast<char32_t>(u_totitle(static_cast<UChar32>(c))));
  return out;
}

bool is_cased(char32_t c) {
  const int8_t t = u_charType(static_cast<UChar32>(c));
  return t == U_UPPERCASE_LETTER || t == U_LOWERCASE_LETTER || t == U_TITLECASE_LETTER;
}

// Rebuilds `s` one code point at a time; `map(index, c)` gives the new text.
template <typename Map>
Text remap(const Text& s, Map map) {
  const std::string& b = s.str();
  Text out;
  size_t index = 0;
  for (size_t i = 0; i < b.size(); ++index) {
    const size_t len = utf8_length_at(b, i);
    out.append(map(index, decode_at(b, i)), s.tainted_at(i));
    i += len;
  }
  return out;
}

}  // namespace

Text change_case(const Text& s, Case to) {
  return remap(s, [&](size_t, char32_t c) { return map_code_point(c, to); });
}

Text capitalize(const Text& s) {
  return remap(s, [](size_t index, char32_t c) {
    return index == 0 ? title_code_point(c) : map_code_point(c, Case::kLower);
  });
}

Text python_title(const Text& s) {
  bool previous_cased = false;
  return remap(s, [&](size_t, char32_t c) {
    std::string out = previous_cased ? map_code_point(c, Case::kLower) : title_code_point(c);
    previous_cased = is_cased(c);
    return out;
  });
}

// jinja2's do_title: each word (split at runs of -, whitespace, ( { [ <)
// gets its first character upper-cased and the rest lower-cased.
Text jinja_title(const Text& s) {
  bool word_start = true;
  return remap(s, [&](size_t, char32_t c) {
    const bool separator = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || tokenizer::is_python_space(c);
    std::string out = separator    ? map_code_point(c, Case::kLower)
                      : word_start ? map_code_point(c, Case::kUpper)
                                   : map_code_point(c, Case::kLower);
    if (separator) {
      out.clear();
      tokenizer::append_utf8(out, c);
    }
    word_start = separator;
    return out;
  });
}

int64_t find(const std::string& s, const std::string& needle) {
  const size_t hit = s.find(needle);
  if (hit == std::string::npos) return -1;
  return static_cast<int64_t>(code_point_count(std::string_view(s).substr(0, hit)));
}

}  // namespace sluice::chat
