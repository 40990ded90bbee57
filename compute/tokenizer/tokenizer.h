// compute/tokenizer/tokenizer.h: the public face of the tokenizer room — a
// Hugging Face byte-level BPE tokenizer.json, or a tiktoken rank file, turned
// into ids and back.
// Ordinary content can never produce a control token; only encode_with_specials
// recognises special-token text.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "proto/file_io.h"

namespace sluice::tokenizer {

using TokenId = int32_t;

// The split pattern a tiktoken rank file goes with; the file does not say.
enum class TiktokenPattern {
  kKimi,    // Kimi K2 / Kimi-Linear, with tokenization_kimi.py's cuts of long texts and runs
  kCl100k,  // OpenAI cl100k_base
  kO200k,   // OpenAI o200k_base
};

class Tokenizer {
 public:
  // Loads tokenizer.json and, when `config_path` is not empty,
  // tokenizer_config.json (bos/eos tokens, add_bos_token). A file whose name
  // does not end in .json and whose text does not open with '{' is read as a
  // tiktoken rank file with Kimi's pattern. Throws Error naming the file and
  // what in it is wrong.
  static Tokenizer load(const std::string& tokenizer_path, const std::string& config_path = "",
                        FileSystem& fs = posix_file_system());
  // Loads MODEL/tokenizer.bin, the compiled form the converter writes; or,
  // in a container without one (or with one of another version),
  // MODEL/tokenizer.json, or MODEL/tiktoken.model when there is no
  // tokenizer.json (and tokenizer_config.json if present). Refuses a
  // directory without manifest.json and a damaged tokenizer.bin.
  static Tokenizer load_from_container(const std::string& model_dir, FileSystem& fs = posix_file_system());
  // Same as load() on text already in memory; the names only label errors.
  static Tokenizer from_json(std::string_view tokenizer_json, std::string_view tokenizer_name,
                             std::string_view config_json = {}, std::string_view config_name = {});

  // A tiktoken rank file (one `base64(bytes) rank` line per token, ranks
  // 0..n-1 are the ids) split with `pattern`. Ids n..n+255 are special: named
  // by tokenizer_config.json's added_tokens_decoder, the rest
  // <|reserved_token_{id}|>. Every line is checked; an error names the file
  // and line.
  static Tokenizer load_tiktoken(const std::string& ranks_path, const std::string& config_path = "",
                                 TiktokenPattern pattern = TiktokenPattern::kKimi,
                                 FileSystem& fs = posix_file_system());
  static Tokenizer from_tiktoken(std::string_view ranks, std::string_view ranks_name,
                                 std::string_view config_json = {},
                                 std::string_view config_name = {},
                                 TiktokenPattern pattern = TiktokenPattern::kKimi);

  // The compiled form (tokenizer.bin, proto/FORMAT.md): this tokenizer's
  // tokens, merges or ranks and added tokens as flat arrays, which load in
  // milliseconds where a large tokenizer.json takes a second. from_compiled
  // checks every count, offset and size and refuses a damaged file or
  // another version with an Error naming `name`. load() also takes one.
  std::string compile() const;
  static Tokenizer from_compiled(std::string_view file, std::string_view name);
  // The file this tokenizer was read from (the name given to from_*).
  const std::string& loaded_from() const;

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Text as content: every added token's text stays ordinary text. Bytes that
  // are not valid UTF-8 are read as U+FFFD per maximal invalid subpart. No
  // BOS is added (see add_bos()).
  std::vector<TokenId> encode(std::string_view text) const;
  // Text as markup: added tokens (special or not) are recognised as whole
  // strings before normalization and pre-tokenization.
  std::vector<TokenId> encode_with_specials(std::string_view text) const;

  // The bytes the ids stand for, concatenated; may end inside a character.
  std::string decode_bytes(std::span<const TokenId> ids, bool skip_special = false) const;
  // decode_bytes made valid UTF-8 (U+FFFD per maximal invalid subpart).
  std::string decode(std::span<const TokenId> ids, bool skip_special = false) const;
  // The raw bytes of one id; throws Error for an id outside the vocabulary.
  const std::string& token_bytes(TokenId id) const;

  // Token strings as tokenizer.json spells them (byte-level characters for
  // the BPE vocabulary, tiktoken ranks included; literal text for added and
  // special tokens).
  std::optional<TokenId> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(TokenId id) const;
  // One past the highest id (BPE vocabulary and added or special tokens).
  size_t vocab_size() const;
  bool is_special(TokenId id) const;
  // An added token (tokenizer.json added_tokens, or a tiktoken special),
  // special or not: a control token when read as markup.
  bool is_added(TokenId id) const;

  // From tokenizer_config.json when given (nullopt when absent or null).
  std::optional<TokenId> bos_id() const;
  std::optional<TokenId> eos_id() const;
  bool add_bos() const;

  struct Impl;

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Turns ids into text as they are generated, holding back the bytes of a
// character that is not complete yet. The concatenation of every push() and
// finish() equals Tokenizer::decode of all ids. Not thread-safe.
class StreamingDecoder {
 public:
  explicit StreamingDecoder(const Tokenizer& tokenizer, bool skip_special = false)
      : tokenizer_(tokenizer), skip_special_(skip_special) {}
  // Valid UTF-8 text that became complete with this id (possibly empty).
  std::string push(TokenId id);
  // Whatever is still held back, as U+FFFD, and a fresh start.
  std::string finish();

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace sluice::tokenizer
