// compute/tokenizer/pre_tokenizer.h: splits normalized text into the pieces
// BPE runs on, with hand-written matchers for the exact split regexes of the
// supported families (tokenizer.json Split regexes and tiktoken patterns). An unrecognised regex is
// refused, never approximated.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::tokenizer {

enum class SplitPattern {
  kGpt2,            // ByteLevel's own regex (GPT-2, OLMoE)
  kQwen2,           // Qwen2 / Qwen3: case-insensitive contractions, single digits
  kDeepSeekDigits,  // DeepSeek-V3 split 1: \p{N}{1,3}
  kDeepSeekCjk,     // DeepSeek-V3 split 2: runs of CJK ideographs and kana
  kDeepSeekWords,   // DeepSeek-V3 split 3: the word / punctuation / space rules
  kCl100k,          // tiktoken cl100k_base (GPT-4; Llama 3 spells the same rules with (?i:...))
  kO200k,           // tiktoken o200k_base: words split at case changes, digits in threes
  kKimi,            // Kimi K2 / Kimi-Linear: Han runs apart, then o200k's rules without Han
};

// The exact pattern text each tiktoken-style matcher implements (as
// js-tiktoken and tokenization_kimi.py spell it), for messages and tests.
std::string_view tiktoken_pattern_text(SplitPattern pattern);

// Maps a tokenizer.json Split regex to its matcher; nullopt when unknown.
std::optional<SplitPattern> recognise_split_pattern(std::string_view regex);

// Length in code points of the match of `pattern` starting exactly at `at`
// in `text` (the whole piece being split, so lookahead sees its end), or 0.
size_t match_at(SplitPattern pattern, std::u32string_view text, size_t at);

struct PreTokenizerStep {
  enum class Kind { kSplit, kByteLevel };
  Kind kind;
  SplitPattern pattern;   // kSplit, or kByteLevel with use_regex
  bool use_regex;         // kByteLevel: also split with the GPT-2 regex
  bool add_prefix_space;  // kByteLevel: prepend ' ' to pieces not starting with one
};

// A piece is a half-open range of code points of the working buffer.
struct Piece {
  uint32_t begin;
  uint32_t end;
};

class PreTokenizer {
 public:
  PreTokenizer() = default;
  explicit PreTokenizer(std::vector<PreTokenizerStep> steps) : steps_(std::move(steps)) {}

  // Splits `text` into pieces (Isolated behaviour: matches and the gaps
  // between them both become pieces). `text` may be rewritten when a step
  // prepends a space; pieces index the rewritten buffer.
  void split(std::u32string& text, std::vector<Piece>& pieces) const;
  const std::vector<PreTokenizerStep>& steps() const { return steps_; }

 private:
  std::vector<PreTokenizerStep> steps_;
};

}  // namespace sluice::tokenizer
