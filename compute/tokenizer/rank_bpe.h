// compute/tokenizer/rank_bpe.h: tiktoken's BPE — a table from raw byte
// strings to ranks (the ranks are the ids), merging the adjacent pair whose
// concatenation has the lowest rank. It sees one piece at a time, never text.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::tokenizer {

using TokenId = int32_t;

class RankBpe {
 public:
  // Room for `count` tokens of `total_bytes` bytes in all, so loading a
  // large rank file rehashes nothing.
  void reserve(size_t count, size_t total_bytes);
  // Gives non-empty `bytes` the next rank (size() before the call), or
  // returns the rank that already has these bytes and adds nothing.
  std::optional<TokenId> add(std::string_view bytes);

  size_t size() const { return offsets_.size() - 1; }
  std::string_view bytes(TokenId rank) const {
    return std::string_view(arena_).substr(offsets_[rank], offsets_[rank + 1] - offsets_[rank]);
  }
  std::optional<TokenId> find(std::string_view bytes) const;
  bool has_byte(uint8_t byte) const { return byte_ranks_[byte] >= 0; }

  // Appends the ranks of one piece: the whole piece when it is a token,
  // otherwise the merges, lowest rank first and leftmost among equals.
  // Throws Error when a byte of the piece has no token of its own.
  void encode(std::string_view piece, std::vector<TokenId>& out) const;

 private:
  static constexpr uint32_t kEmpty = UINT32_MAX;
  // The slot holding `bytes`, or the empty slot where they would go.
  size_t slot_of(std::string_view bytes) const;
  void grow();

  std::string arena_;                 // every token's bytes, in rank order
  std::vector<uint32_t> offsets_{0};  // rank r spans arena_[offsets_[r], offsets_[r + 1])
  std::vector<uint32_t> slots_;       // open addressing over byte strings: rank or kEmpty
  std::array<TokenId, 256> byte_ranks_ = [] {
    std::array<TokenId, 256> a{};
    a.fill(-1);
    return a;
  }();
};

}  // namespace sluice::tokenizer
