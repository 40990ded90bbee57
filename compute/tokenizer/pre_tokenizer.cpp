// compute/tokenizer/pre_tokenizer.cpp: hand-written matchers equivalent to the
// split regexes of GPT-2/OLMoE, Qwen2/3, DeepSeek-V3 and the tiktoken patterns
// (cl100k, o200k, Kimi) under backtracking leftmost-first alternation; it must
// never accept a regex it has no exact matcher for.
#include "compute/tokenizer/pre_tokenizer.h"

#include <array>
#include <utility>

#include "compute/tokenizer/unicode.h"

namespace sluice::tokenizer {
namespace {

// Exact tokenizer.json texts, with raw CR/LF written as the escapes \r \n
// (files carry either form; both mean the same to the regex engine).
constexpr std::string_view kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kDeepSeekDigitsRegex = R"(\p{N}{1,3})";
constexpr std::string_view kDeepSeekCjkRegex = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+";
constexpr std::string_view kDeepSeekWordsRegex =
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

constexpr std::string_view kCl100kPattern =
    R"(('s|'S|'t|'T|'re|'rE|'Re|'RE|'ve|'vE|'Ve|'VE|'m|'M|'ll|'lL|'Ll|'LL|'d|'D)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kO200kPattern =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+('s|'S|'t|'T|'re|'rE|'Re|'RE|'ve|'vE|'Ve|'VE|'m|'M|'ll|'lL|'Ll|'LL|'d|'D)?|)"
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*('s|'S|'t|'T|'re|'rE|'Re|'RE|'ve|'vE|'Ve|'VE|'m|'M|'ll|'lL|'Ll|'LL|'d|'D)?|)"
    R"(\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kKimiPattern =
    R"([\p{Han}]+|)"
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|)"
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|)"
    R"(\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Case folding for the contractions: kAscii is what explicit 's|'S|... lists
// spell; kUnicode is (?i:...) in Rust's regex, where s also matches U+017F ſ.
enum class Fold { kNone, kAscii, kUnicode };

std::string escape_line_breaks(std::string_view regex) {
  std::string out;
  out.reserve(regex.size());
  for (char c : regex) {
    if (c == '\r') {
      out += "\\r";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

class Matcher {
 public:
  explicit Matcher(std::u32string_view text) : t_(text), n_(text.size()) {}

  uint16_t cls(size_t i) const { return i < n_ ? char_classes(t_[i]) : 0; }
  bool is(size_t i, uint16_t mask) const { return (cls(i) & mask) != 0; }
  bool is_char(size_t i, char32_t c) const { return i < n_ && t_[i] == c; }
  bool is_line_break(size_t i) const { return is_char(i, U'\r') || is_char(i, U'\n'); }
  // Not whitespace, not a letter, not a number: [^\s\p{L}\p{N}].
  bool is_other(size_t i) const { return i < n_ && (cls(i) & (kSpace | kLetter | kNumber)) == 0; }

  size_t run(size_t i, uint16_t mask) const {
    while (i < n_ && (cls(i) & mask)) ++i;
    return i;
  }
  size_t run_other(size_t i) const {
    while (is_other(i)) ++i;
    return i;
  }
  size_t run_line_breaks(size_t i) const {
    while (is_line_break(i)) ++i;
    return i;
  }

  // 's 't 're 've 'm 'll 'd, case folded as `fold` says.
  size_t contraction(size_t i, Fold fold) const {
    if (!is_char(i, U'\'') || i + 1 >= n_) return 0;
    auto lower = [&](size_t k) -> char32_t {
      const char32_t c = k < n_ ? t_[k] : 0;
      if (fold == Fold::kNone) return c;
      if (fold == Fold::kUnicode && c == U'\u017F') return U's';
      return (c >= U'A' && c <= U'Z') ? c + 32 : c;
    };
    const char32_t a = lower(i + 1);
    if (a == U's' || a == U't' || a == U'm' || a == U'd') return 2;
    const char32_t b = lower(i + 2);
    if ((a == U'r' && b == U'e') || (a == U'v' && b == U'e') || (a == U'l' && b == U'l')) return 3;
    return 0;
  }

  // \s+(?!\S)|\s+ at a whitespace character: a run of spaces gives its last
  // one to the word after it.
  size_t trailing_spaces(size_t i) const {
    const size_t e = run(i, kSpace);
    if (e == n_ || e - i == 1) return e - i;
    return e - i - 1;
  }

  // \s*[\r\n]+|\s+(?!\S)|\s+ at a whitespace character.
  size_t spaces_with_line_breaks(size_t i) const {
    const size_t e = run(i, kSpace);
    for (size_t k = e; k > i; --k) {
      if (is_line_break(k - 1)) return k - i;
    }
    return trailing_spaces(i);
  }

  size_t gpt2(size_t i) const {
    if (size_t m = contraction(i, Fold::kNone)) return m;
    const size_t j = is_char(i, U' ') ? i + 1 : i;
    if (is(j, kLetter)) return run(j, kLetter) - i;
    if (is(j, kNumber)) return run(j, kNumber) - i;
    if (is_other(j)) return run_other(j) - i;
    if (is(i, kSpace)) return trailing_spaces(i);
    return 0;
  }

  size_t qwen2(size_t i) const {
    if (size_t m = contraction(i, Fold::kAscii)) return m;
    if (is(i, kLetter)) return run(i, kLetter) - i;
    if (!is_line_break(i) && !is(i, kLetter | kNumber) && is(i + 1, kLetter)) return run(i + 1, kLetter) - i;
    if (is(i, kNumber)) return 1;
    const size_t j = is_char(i, U' ') ? i + 1 : i;
    if (is_other(j)) return run_line_breaks(run_other(j)) - i;
    if (is(i, kSpace)) return spaces_with_line_breaks(i);
    return 0;
  }

  // \p{N}{1,3}
  size_t deepseek_digits(size_t i) const {
    size_t e = i;
    while (e < n_ && e - i < 3 && is(e, kNumber)) ++e;
    return e - i;
  }

  static bool is_cjk(char32_t c) {
    return (c >= 0x4E00 && c <= 0x9FA5) || (c >= 0x3040 && c <= 0x309F) || (c >= 0x30A0 && c <= 0x30FF);
  }
  size_t deepseek_cjk(size_t i) const {
    size_t e = i;
    while (e < n_ && is_cjk(t_[e])) ++e;
    return e - i;
  }

  static bool is_ascii_punct(char32_t c) {
    return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
           (c >= 0x7B && c <= 0x7E);
  }
  static bool is_ascii_letter(char32_t c) { return (c >= U'a' && c <= U'z') || (c >= U'A' && c <= U'Z'); }
  size_t deepseek_words(size_t i) const {
    if (is_ascii_punct(t_[i]) && i + 1 < n_ && is_ascii_letter(t_[i + 1])) {
      size_t e = i + 1;
      while (e < n_ && is_ascii_letter(t_[e])) ++e;
      return e - i;
    }
    if (!is_line_break(i) && !is(i, kLetter | kPunctuation | kSymbol) && is(i + 1, kLetter | kMark)) {
      return run(i + 1, kLetter | kMark) - i;
    }
    if (is(i, kLetter | kMark)) return run(i, kLetter | kMark) - i;
    const size_t j = is_char(i, U' ') ? i + 1 : i;
    if (is(j, kPunctuation | kSymbol)) return run_line_breaks(run(j, kPunctuation | kSymbol)) - i;
    if (is(i, kSpace)) return spaces_with_line_breaks(i);
    return 0;
  }

  size_t cl100k(size_t i) const {
    if (size_t m = contraction(i, Fold::kAscii)) return m;
    if (is(i, kLetter)) return run(i, kLetter) - i;
    if (is_word_prefix(i) && is(i + 1, kLetter)) return run(i + 1, kLetter) - i;
    if (is(i, kNumber)) return deepseek_digits(i);
    return punctuation_or_spaces(i, false);
  }

  // o200k_base, and Kimi's pattern when `kimi` is set: the same word rules
  // with Han taken out of both classes, after a rule of its own for Han runs.
  size_t o200k(size_t i, bool kimi) const {
    if (kimi && is(i, kHan)) return run(i, kHan) - i;
    const uint16_t excluded = kimi ? kHan : 0;
    const Fold fold = kimi ? Fold::kUnicode : Fold::kAscii;
    const bool prefix = is_word_prefix(i);
    if (prefix) {
      if (size_t e = word_ending_lower(i + 1, excluded, fold)) return e - i;
    }
    if (size_t e = word_ending_lower(i, excluded, fold)) return e - i;
    if (prefix) {
      if (size_t e = word_starting_upper(i + 1, excluded, fold)) return e - i;
    }
    if (size_t e = word_starting_upper(i, excluded, fold)) return e - i;
    if (is(i, kNumber)) return deepseek_digits(i);
    return punctuation_or_spaces(i, !kimi);
  }

 private:
  // [^\r\n\p{L}\p{N}], the optional character before a word.
  bool is_word_prefix(size_t i) const {
    return i < n_ && !is_line_break(i) && !is(i, kLetter | kNumber);
  }
  bool in(size_t i, uint16_t mask, uint16_t excluded) const {
    return is(i, mask) && !is(i, excluded);
  }

  // [Upper]*[Lower]+(contraction)? from `j`: one past its end, or 0. The
  // greedy [Upper]* gives back characters until a [Lower] follows it, so
  // [Lower]+ starts at the last position of the upper run (or just past it)
  // that is in [Lower].
  size_t word_ending_lower(size_t j, uint16_t excluded, Fold fold) const {
    size_t upper_end = j;
    while (in(upper_end, kUpperLike, excluded)) ++upper_end;
    size_t lower_end = 0;
    if (in(upper_end, kLowerLike, excluded)) {
      lower_end = upper_end;
      while (in(lower_end, kLowerLike, excluded)) ++lower_end;
    } else {
      for (size_t k = upper_end; k > j && lower_end == 0; --k) {
        if (in(k - 1, kLowerLike, excluded)) lower_end = k;
      }
      if (lower_end == 0) return 0;
    }
    return lower_end + contraction(lower_end, fold);
  }

  // [Upper]+[Lower]*(contraction)? from `j`: one past its end, or 0.
  size_t word_starting_upper(size_t j, uint16_t excluded, Fold fold) const {
    size_t e = j;
    while (in(e, kUpperLike, excluded)) ++e;
    if (e == j) return 0;
    while (in(e, kLowerLike, excluded)) ++e;
    return e + contraction(e, fold);
  }

  // ` ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`, with '/' in the
  // tail class when `slash_tail` is set (o200k's [\r\n/]*).
  size_t punctuation_or_spaces(size_t i, bool slash_tail) const {
    const size_t j = is_char(i, U' ') ? i + 1 : i;
    if (is_other(j)) {
      size_t e = run_other(j);
      while (is_line_break(e) || (slash_tail && is_char(e, U'/'))) ++e;
      return e - i;
    }
    if (is(i, kSpace)) return spaces_with_line_breaks(i);
    return 0;
  }

  std::u32string_view t_;
  size_t n_;
};

void split_isolated(SplitPattern pattern, std::u32string_view text, Piece piece, std::vector<Piece>& out) {
  const std::u32string_view view = text.substr(piece.begin, piece.end - piece.begin);
  size_t gap = 0;
  for (size_t pos = 0; pos < view.size();) {
    const size_t length = match_at(pattern, view, pos);
    if (length == 0) {
      ++pos;
      continue;
    }
    if (gap < pos) out.push_back({piece.begin + static_cast<uint32_t>(gap), piece.begin + static_cast<uint32_t>(pos)});
    out.push_back({piece.begin + static_cast<uint32_t>(pos), piece.begin + static_cast<uint32_t>(pos + length)});
    pos += length;
    gap = pos;
  }
  if (gap < view.size()) out.push_back({piece.begin + static_cast<uint32_t>(gap), piece.end});
}

// Rebuilds the buffer so every piece that does not start with a space gets
// one, as ByteLevel(add_prefix_space) does to each piece it is handed.
void prepend_spaces(std::u32string& text, std::vector<Piece>& pieces) {
  std::u32string rebuilt;
  rebuilt.reserve(text.size() + pieces.size());
  for (Piece& piece : pieces) {
    const auto begin = static_cast<uint32_t>(rebuilt.size());
    if (piece.begin == piece.end || text[piece.begin] != U' ') rebuilt.push_back(U' ');
    rebuilt.append(text, piece.begin, piece.end - piece.begin);
    piece = {begin, static_cast<uint32_t>(rebuilt.size())};
  }
  text = std::move(rebuilt);
}

}  // namespace

std::optional<SplitPattern> recognise_split_pattern(std::string_view regex) {
  const std::string canonical = escape_line_breaks(regex);
  static constexpr std::array<std::pair<std::string_view, SplitPattern>, 5> kKnown{{
      {kGpt2Regex, SplitPattern::kGpt2},
      {kQwen2Regex, SplitPattern::kQwen2},
      {kDeepSeekDigitsRegex, SplitPattern::kDeepSeekDigits},
      {kDeepSeekCjkRegex, SplitPattern::kDeepSeekCjk},
      {kDeepSeekWordsRegex, SplitPattern::kDeepSeekWords},
  }};
  for (const auto& [text, pattern] : kKnown) {
    if (canonical == text) return pattern;
  }
  return std::nullopt;
}

size_t match_at(SplitPattern pattern, std::u32string_view text, size_t at) {
  if (at >= text.size()) return 0;
  const Matcher m(text);
  switch (pattern) {
    case SplitPattern::kGpt2:
      return m.gpt2(at);
    case SplitPattern::kQwen2:
      return m.qwen2(at);
    case SplitPattern::kDeepSeekDigits:
      return m.deepseek_digits(at);
    case SplitPattern::kDeepSeekCjk:
      return m.deepseek_cjk(at);
    case SplitPattern::kDeepSeekWords:
      return m.deepseek_words(at);
    case SplitPattern::kCl100k:
      return m.cl100k(at);
    case SplitPattern::kO200k:
      return m.o200k(at, false);
    case SplitPattern::kKimi:
      return m.o200k(at, true);
  }
  return 0;
}

std::string_view tiktoken_pattern_text(SplitPattern pattern) {
  switch (pattern) {
    case SplitPattern::kCl100k:
      return kCl100kPattern;
    case SplitPattern::kO200k:
      return kO200kPattern;
    case SplitPattern::kKimi:
      return kKimiPattern;
    default:
      return {};
  }
}

void PreTokenizer::split(std::u32string& text, std::vector<Piece>& pieces) const {
  pieces.clear();
  if (text.empty()) return;
  pieces.push_back({0, static_cast<uint32_t>(text.size())});
  std::vector<Piece> next;
  for (const PreTokenizerStep& step : steps_) {
    if (step.kind == PreTokenizerStep::Kind::kByteLevel) {
      if (step.add_prefix_space) prepend_spaces(text, pieces);
      if (!step.use_regex) continue;
    }
    next.clear();
    for (const Piece& piece : pieces) split_isolated(step.pattern, text, piece, next);
    pieces.swap(next);
  }
}

}  // namespace sluice::tokenizer
