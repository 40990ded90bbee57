// compute/tokenizer/tokenizer_impl.h: what a loaded tokenizer holds, shared by
// the loader (tokenizer_json.cpp) and the encoder/decoder (tokenizer.cpp).
// Private to this folder; other rooms include tokenizer.h only.
#pragma once

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "compute/tokenizer/added_tokens.h"
#include "compute/tokenizer/bpe.h"
#include "compute/tokenizer/pre_tokenizer.h"
#include "compute/tokenizer/tokenizer.h"

namespace sluice::tokenizer {

struct Tokenizer::Impl {
  struct Entry {
    std::string text;   // as tokenizer.json spells it
    std::string bytes;  // what it decodes to
    bool present = false;
    bool special = false;
  };

  bool nfc = false;
  PreTokenizer pre_tokenizer;
  BpeModel model{false};
  AddedTokenMatcher raw_added;         // added tokens matched before normalization
  AddedTokenMatcher normalized_added;  // added tokens matched in normalized text
  std::vector<Entry> entries;          // indexed by id
  std::unordered_map<std::string, TokenId> model_vocab;  // BPE vocabulary text -> id
  std::unordered_map<std::string, TokenId> added_vocab;  // added token content -> id
  std::optional<TokenId> bos;
  std::optional<TokenId> eos;
  bool add_bos = false;
};

}  // namespace sluice::tokenizer
