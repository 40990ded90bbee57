// compute/tokenizer/bpe.h: the byte-level BPE model — the GPT-2 byte<->char
// map, the vocabulary over raw bytes and merges applied by rank. It sees one
// pre-tokenized piece at a time and never splits text itself.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace sluice::tokenizer {

using TokenId = int32_t;

// GPT-2's reversible map from bytes to printable characters (the vocabulary
// spells tokens with these), and its inverse.
char32_t byte_to_char(uint8_t byte);
std::optional<uint8_t> char_to_byte(char32_t c);

// The raw bytes a vocabulary string spells, or nullopt when some character
// is outside the byte map (such a token can be decoded but never encoded).
std::optional<std::string> byte_level_to_bytes(std::string_view token_utf8);
std::string bytes_to_byte_level(std::string_view bytes);

class BpeModel {
 public:
  explicit BpeModel(bool ignore_merges) : ignore_merges_(ignore_merges) { byte_ids_.fill(-1); }

  // `bytes` is the token's raw byte string; a later token with the same
  // bytes replaces the earlier one.
  void add_token(std::string bytes, TokenId id);
  // Merges are added in rank order; re-adding a pair keeps the later rank,
  // as the reference loaders do.
  void add_merge(TokenId left, TokenId right, TokenId merged);
  std::optional<TokenId> find(std::string_view bytes) const;
  bool has_byte(uint8_t byte) const { return byte_ids_[byte] >= 0; }
  bool ignore_merges() const { return ignore_merges_; }
  // Every pair that has a merge, as {left, right, merged}, lowest rank first:
  // adding them again in this order gives a model that encodes the same.
  std::vector<std::array<TokenId, 3>> merges() const;

  // Appends the ids of one pre-tokenized piece. Throws Error when a byte of
  // the piece has no token of its own (a vocabulary without all 256 bytes).
  void encode(std::string_view piece, std::vector<TokenId>& out) const;

 private:
  struct Merge {
    uint32_t rank;
    TokenId merged;
  };
  // Open addressing over (left, right) pairs: the merge lookup is the inner
  // loop of encoding, and std::unordered_map's node chasing dominated it.
  struct Slot {
    uint64_t key = kEmpty;
    Merge merge{};
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  static uint64_t pair_key(TokenId left, TokenId right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }
  static size_t slot_of(uint64_t key, size_t mask) { return (key * 0x9E3779B97F4A7C15ull) >> 20 & mask; }
  const Merge* find_merge(TokenId left, TokenId right) const;
  void grow();

  bool ignore_merges_;
  std::array<TokenId, 256> byte_ids_;
  std::unordered_map<std::string, TokenId> ids_;  // only kept for ignore_merges
  std::vector<Slot> slots_;
  size_t merge_count_ = 0;
  uint32_t next_rank_ = 0;
};

}  // namespace sluice::tokenizer
