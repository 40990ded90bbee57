// tests/compute/tokenizer/pre_tokenizer_test.cpp: the split matchers against
// splits worked out by hand from the regexes of architectures.md §9 (the
// reference tests cover the same code on real vocabularies at scale; Kimi's
// pattern has no reference implementation here, so its cases are many).
#include <doctest/doctest.h>

#include <fmt/format.h>

#include "compute/tokenizer/pre_tokenizer.h"
#include "compute/tokenizer/unicode.h"

using namespace sluice::tokenizer;

namespace {

constexpr const char* kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::vector<std::string> split(const std::vector<PreTokenizerStep>& steps, const std::string& text) {
  std::u32string buffer;
  decode_utf8(text, buffer);
  std::vector<Piece> pieces;
  PreTokenizer(steps).split(buffer, pieces);
  std::vector<std::string> out;
  for (const Piece& p : pieces) {
    std::string s;
    for (uint32_t i = p.begin; i < p.end; ++i) append_utf8(s, buffer[i]);
    out.push_back(s);
  }
  return out;
}

PreTokenizerStep split_step(SplitPattern p) { return {PreTokenizerStep::Kind::kSplit, p, false, false}; }
PreTokenizerStep byte_level(bool use_regex, bool prefix) {
  return {PreTokenizerStep::Kind::kByteLevel, SplitPattern::kGpt2, use_regex, prefix};
}
using V = std::vector<std::string>;

const std::vector<PreTokenizerStep> kGpt2 = {byte_level(true, false)};
const std::vector<PreTokenizerStep> kQwen = {split_step(SplitPattern::kQwen2), byte_level(false, false)};
const std::vector<PreTokenizerStep> kDeepSeek = {split_step(SplitPattern::kDeepSeekDigits),
                                                 split_step(SplitPattern::kDeepSeekCjk),
                                                 split_step(SplitPattern::kDeepSeekWords), byte_level(false, false)};
const std::vector<PreTokenizerStep> kKimi = {split_step(SplitPattern::kKimi)};
const std::vector<PreTokenizerStep> kO200k = {split_step(SplitPattern::kO200k)};

}  // namespace

TEST_CASE("only the exact known regexes are recognised") {
  CHECK(recognise_split_pattern(kQwen2) == SplitPattern::kQwen2);
  CHECK(recognise_split_pattern(R"(\p{N}{1,3})") == SplitPattern::kDeepSeekDigits);
  // The DeepSeek file spells CR/LF as raw characters inside the classes.
  std::string raw = R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^)";
  raw += "\r\n";
  raw += R"(\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[)";
  raw += "\r\n";
  raw += R"(]*|\s*[)";
  raw += "\r\n";
  raw += R"(]+|\s+(?!\S)|\s+)";
  CHECK(recognise_split_pattern(raw) == SplitPattern::kDeepSeekWords);
  // Llama-3's regex differs from Qwen2's only in \p{N}{1,3}: it must not pass as Qwen2.
  std::string llama3 = kQwen2;
  llama3.replace(llama3.find(R"(|\p{N}|)"), 7, R"(|\p{N}{1,3}|)");
  CHECK(!recognise_split_pattern(llama3).has_value());
  CHECK(!recognise_split_pattern(R"(\s+)").has_value());
}

TEST_CASE("GPT-2 / OLMoE split") {
  CHECK(split(kGpt2, "Hello world") == V{"Hello", " world"});
  CHECK(split(kGpt2, "I'm  fine\n") == V{"I", "'m", " ", " fine", "\n"});
  CHECK(split(kGpt2, "DON'T") == V{"DON", "'", "T"});  // contractions are case-sensitive here
  CHECK(split(kGpt2, "x=12345!!") == V{"x", "=", "12345", "!!"});
  CHECK(split(kGpt2, "a   ") == V{"a", "   "});
}

TEST_CASE("Qwen2/3 split") {
  CHECK(split(kQwen, "don'T 123") == V{"don", "'T", " ", "1", "2", "3"});
  CHECK(split(kQwen, "a\r\n\r\nb") == V{"a", "\r\n\r\n", "b"});
  CHECK(split(kQwen, "x  \n  y") == V{"x", "  \n", " ", " y"});
  CHECK(split(kQwen, "!!!\n\nabc") == V{"!!!\n\n", "abc"});
  CHECK(split(kQwen, "(hello)") == V{"(hello", ")"});
  CHECK(split(kQwen, "\tword") == V{"\tword"});
  CHECK(split(kQwen, "a \u0085b") == V{"a", " ", "\u0085b"});  // U+0085 is whitespace, not a line break
}

TEST_CASE("DeepSeek-V3 split: digits in threes, CJK runs, then words") {
  CHECK(split(kDeepSeek, "abc12345你好x") == V{"abc", "123", "45", "你好", "x"});
  CHECK(split(kDeepSeek, ".Net (x)") == V{".Net", " (", "x", ")"});
  CHECK(split(kDeepSeek, "cafe\u0301 ok") == V{"cafe\u0301", " ok"});
  CHECK(split(kDeepSeek, "a!?\n\nb") == V{"a", "!?\n\n", "b"});
  // A ZWJ between emoji matches nothing and stays a piece of its own.
  CHECK(split(kDeepSeek, "\U0001F468\u200D\U0001F469") == V{"\U0001F468", "\u200D", "\U0001F469"});
}

TEST_CASE("ByteLevel add_prefix_space prepends a space to each piece that lacks one") {
  CHECK(split({byte_level(true, true)}, "Hello world") == V{" Hello", " world"});
  CHECK(split({byte_level(true, true)}, " Hi") == V{" Hi"});
  CHECK(split({byte_level(false, true)}, "ab cd") == V{" ab cd"});
}

TEST_CASE("Kimi split: Han runs are pieces of their own; o200k keeps them inside words") {
  CHECK(split(kKimi, "中文ABC测试abc") == V{"中文", "ABC", "测试", "abc"});
  CHECK(split(kO200k, "中文ABC测试abc") == V{"中文ABC测试abc"});
  // No space, tab or newline joins a Han run as the optional first character.
  CHECK(split(kKimi, " 中\t中\n中") == V{" ", "中", "\t", "中", "\n", "中"});
  CHECK(split(kO200k, " 中\t中\n中") == V{" 中", "\t中", "\n", "中"});
  // \p{Han} is the script, so the ideographic zero (Nl) and the iteration
  // mark 々 (Lm) are Han too; o200k reads 〇 as a number.
  CHECK(split(kKimi, "〇一二 人々") == V{"〇一二", " ", "人々"});
  CHECK(split(kO200k, "〇一二 人々") == V{"〇", "一二", " 人々"});
  // A combining mark is not Han: it does not extend the run before it.
  CHECK(split(kKimi, "中\u0301") == V{"中", "\u0301"});
  // Kana is Lo but not Han: it stays in the word classes.
  CHECK(split(kKimi, "漢字かなカナ") == V{"漢字", "かなカナ"});
}

TEST_CASE("Kimi split: words break where lowercase turns to uppercase") {
  CHECK(split(kKimi, "HelloWorld getHTTP HTTPServer") ==
        V{"Hello", "World", " get", "HTTP", " HTTPServer"});
  // Lt heads a word; Lm and marks count as both cases; a word may end on them.
  CHECK(split(kKimi, "ǅemal Aʰ e\u0301 \u0301A") == V{"ǅemal", " Aʰ", " e\u0301", " \u0301", "A"});
  // The optional first character is anything but CR, LF, a letter or a number.
  CHECK(split(kKimi, "(abc) \"Hello\"") == V{"(abc", ")", " \"", "Hello", "\""});
  CHECK(split(kKimi, "\nabc\r\nDEF") == V{"\n", "abc", "\r\n", "DEF"});
}

TEST_CASE("Kimi split: contractions in any case, with Unicode case folding") {
  CHECK(split(kKimi, "I'M we'LL don'T they'Re") == V{"I'M", " we'LL", " don'T", " they'Re"});
  // (?i:'s) in Rust's regex also matches the long s; o200k lists ASCII only.
  CHECK(split(kKimi, "it'\u017F") == V{"it'\u017F"});
  CHECK(split(kO200k, "it'\u017F") == V{"it", "'\u017F"});
  CHECK(split(kKimi, "rock'n'roll") == V{"rock", "'n", "'roll"});
}

TEST_CASE("Kimi split: digits in runs of at most three") {
  CHECK(split(kKimi, "12345 ab1234") == V{"123", "45", " ab", "123", "4"});
  CHECK(split(kKimi, "٣٤٥٦") == V{"٣٤٥", "٦"});
  CHECK(split(kKimi, "x²³¹⁴") == V{"x", "²³¹", "⁴"});
}

TEST_CASE("Kimi split: punctuation takes the line breaks after it, not o200k's slashes") {
  CHECK(split(kKimi, "Hi!!\n\nx ...\r\n!\n/") == V{"Hi", "!!\n\n", "x", " ...\r\n", "!\n", "/"});
  CHECK(split(kO200k, "Hi!!\n\nx ...\r\n!\n/") == V{"Hi", "!!\n\n", "x", " ...\r\n", "!\n/"});
  CHECK(split(kKimi, "a+=b") == V{"a", "+=", "b"});
}

TEST_CASE("Kimi split: a run of spaces gives its last one to the word after it") {
  CHECK(split(kKimi, "a   b\n\n  c  ") == V{"a", "  ", " b", "\n\n", " ", " c", "  "});
  CHECK(split(kKimi, "x \t\n\n y") == V{"x", " \t\n\n", " y"});
  CHECK(split(kKimi, "\u3000\u3000中") == V{"\u3000", "\u3000", "中"});
}
