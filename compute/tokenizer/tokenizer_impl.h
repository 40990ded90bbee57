// compute/tokenizer/tokenizer_impl.h: what a loaded tokenizer holds, shared by
// the loaders (tokenizer_json.cpp, tiktoken.cpp) and the encoder/decoder
// (tokenizer.cpp). Private to this folder; other rooms include tokenizer.h only.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "compute/tokenizer/added_tokens.h"
#include "compute/tokenizer/bpe.h"
#include "compute/tokenizer/pre_tokenizer.h"
#include "compute/tokenizer/rank_bpe.h"
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
  // Hugging Face merges (tokenizer.json) or tiktoken ranks (tiktoken.model).
  std::variant<BpeModel, RankBpe> model{BpeModel(false)};
  AddedTokenMatcher raw_added;         // added tokens matched before normalization
  AddedTokenMatcher normalized_added;  // added tokens matched in normalized text
  std::vector<Entry> entries;          // indexed by id
  // BPE vocabulary text -> id; empty for tiktoken, whose ranks answer instead.
  std::unordered_map<std::string, TokenId> model_vocab;
  std::unordered_map<std::string, TokenId> added_vocab;  // added token content -> id
  std::optional<TokenId> bos;
  std::optional<TokenId> eos;
  bool add_bos = false;
  bool kimi_chunks = false;  // cut long texts and runs as tokenization_kimi.py does
  std::string source;        // the file it was loaded from, for reports

  // token_to_id: an added token's content, or a vocabulary token as
  // tokenizer.json spells it (byte-level characters).
  std::optional<TokenId> find_token(std::string_view token) const;
};

// tokenizer.bin's layout version (proto/FORMAT.md); compile() writes it.
inline constexpr uint32_t kCompiledTokenizerVersion = 1;

// A compiled tokenizer (compiled_tokenizer.cpp), every count, offset and size
// checked; nullptr when the file is of another version. Throws Error naming
// `name` when it is damaged.
std::unique_ptr<Tokenizer::Impl> read_compiled(std::string_view file, std::string_view name);
// The version a file's header claims, or 0 when it is not a compiled tokenizer.
uint32_t compiled_version(std::string_view file);

// Applies tokenizer_config.json's bos_token, eos_token and add_bos_token to
// `impl`, whose tokens must already be loaded. Throws Error naming the file.
void read_token_config(const nlohmann::json& config, std::string_view config_name,
                       Tokenizer::Impl& impl);

}  // namespace sluice::tokenizer
