// compute/tokenizer/bpe.cpp: rank-ordered BPE over a linked list of symbols
// and a min-heap of candidate pairs, so long pieces cost O(n log n). It never
// looks at characters: pieces arrive as raw bytes.
#include "compute/tokenizer/bpe.h"

#include <algorithm>
#include <functional>

#include "compute/tokenizer/unicode.h"
#include "proto/error.h"

namespace sluice::tokenizer {
namespace {

struct ByteMap {
  std::array<char32_t, 256> to_char{};
  std::unordered_map<char32_t, uint8_t> to_byte;
  ByteMap() {
    // Printable Latin-1 stands for itself; the rest is shifted above U+00FF
    // in byte order.
    char32_t shifted = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_char[b] = printable ? static_cast<char32_t>(b) : shifted++;
      to_byte.emplace(to_char[b], static_cast<uint8_t>(b));
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap map;
  return map;
}

}  // namespace

char32_t byte_to_char(uint8_t byte) { return byte_map().to_char[byte]; }

std::optional<uint8_t> char_to_byte(char32_t c) {
  const auto& to_byte = byte_map().to_byte;
  const auto it = to_byte.find(c);
  if (it == to_byte.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string> byte_level_to_bytes(std::string_view token_utf8) {
  std::u32string chars;
  decode_utf8(token_utf8, chars);
  std::string bytes;
  bytes.reserve(chars.size());
  for (char32_t c : chars) {
    const auto byte = char_to_byte(c);
    if (!byte) return std::nullopt;
    bytes.push_back(static_cast<char>(*byte));
  }
  return bytes;
}

std::string bytes_to_byte_level(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char b : bytes) append_utf8(out, byte_to_char(static_cast<uint8_t>(b)));
  return out;
}

void BpeModel::add_token(std::string bytes, TokenId id) {
  if (bytes.size() == 1) byte_ids_[static_cast<uint8_t>(bytes[0])] = id;
  if (ignore_merges_) ids_[std::move(bytes)] = id;
}

void BpeModel::grow() {
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(old.empty() ? 1024 : old.size() * 2, Slot{});
  const size_t mask = slots_.size() - 1;
  for (const Slot& s : old) {
    if (s.key == kEmpty) continue;
    size_t i = slot_of(s.key, mask);
    while (slots_[i].key != kEmpty) i = (i + 1) & mask;
    slots_[i] = s;
  }
}

void BpeModel::add_merge(TokenId left, TokenId right, TokenId merged) {
  if ((merge_count_ + 1) * 2 > slots_.size()) grow();  // load factor at most 1/2
  const uint64_t key = pair_key(left, right);
  const size_t mask = slots_.size() - 1;
  size_t i = slot_of(key, mask);
  while (slots_[i].key != kEmpty && slots_[i].key != key) i = (i + 1) & mask;
  if (slots_[i].key == kEmpty) ++merge_count_;
  slots_[i] = Slot{key, Merge{next_rank_++, merged}};
}

std::optional<TokenId> BpeModel::find(std::string_view bytes) const {
  const auto it = ids_.find(std::string(bytes));
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

std::vector<std::array<TokenId, 3>> BpeModel::merges() const {
  std::vector<const Slot*> used;
  used.reserve(merge_count_);
  for (const Slot& s : slots_) {
    if (s.key != kEmpty) used.push_back(&s);
  }
  std::sort(used.begin(), used.end(), [](const Slot* a, const Slot* b) { return a->merge.rank < b->merge.rank; });
  std::vector<std::array<TokenId, 3>> out;
  out.reserve(used.size());
  for (const Slot* s : used) {
    out.push_back({static_cast<TokenId>(s->key >> 32), static_cast<TokenId>(s->key & 0xFFFFFFFFu), s->merge.merged});
  }
  return out;
}

const BpeModel::Merge* BpeModel::find_merge(TokenId left, TokenId right) const {
  if (slots_.empty()) return nullptr;
  const uint64_t key = pair_key(left, right);
  const size_t mask = slots_.size() - 1;
  for (size_t i = slot_of(key, mask);; i = (i + 1) & mask) {
    if (slots_[i].key == key) return &slots_[i].merge;
    if (slots_[i].key == kEmpty) return nullptr;
  }
}

void BpeModel::encode(std::string_view piece, std::vector<TokenId>& out) const {
  if (piece.empty()) return;
  if (piece.size() == 1 && byte_ids_[static_cast<uint8_t>(piece[0])] >= 0) {
    out.push_back(byte_ids_[static_cast<uint8_t>(piece[0])]);
    return;
  }
  if (ignore_merges_) {
    if (auto id = find(piece)) {
      out.push_back(*id);
      return;
    }
  }
  const int n = static_cast<int>(piece.size());
  struct Symbol {
    TokenId id;
    int prev;
    int next;
    bool alive;
  };
  // Reused across calls: encoding allocates nothing per piece once warm.
  thread_local std::vector<Symbol> symbols;
  symbols.resize(n);
  for (int i = 0; i < n; ++i) {
    const auto byte = static_cast<uint8_t>(piece[i]);
    if (byte_ids_[byte] < 0) fail("tokenizer: the vocabulary has no token for byte 0x{:02X}", byte);
    symbols[i] = {byte_ids_[byte], i - 1, i + 1 < n ? i + 1 : -1, true};
  }
  // (rank, left position): equal ranks merge leftmost first.
  using Candidate = std::pair<uint32_t, int>;
  thread_local std::vector<Candidate> heap;  // a min-heap under std::greater
  heap.clear();
  auto push = [](Candidate c) {
    heap.push_back(c);
    std::push_heap(heap.begin(), heap.end(), std::greater<>());
  };
  for (int i = 0; i + 1 < n; ++i) {
    if (const Merge* m = find_merge(symbols[i].id, symbols[i + 1].id)) push({m->rank, i});
  }
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    const auto [rank, left] = heap.back();
    heap.pop_back();
    Symbol& a = symbols[left];
    if (!a.alive || a.next < 0) continue;
    const Merge* m = find_merge(a.id, symbols[a.next].id);
    if (m == nullptr || m->rank != rank) continue;  // stale: a neighbour merged first
    Symbol& b = symbols[a.next];
    a.id = m->merged;
    b.alive = false;
    a.next = b.next;
    if (a.next >= 0) symbols[a.next].prev = left;
    if (a.prev >= 0) {
      if (const Merge* pm = find_merge(symbols[a.prev].id, a.id)) push({pm->rank, a.prev});
    }
    if (a.next >= 0) {
      if (const Merge* nm = find_merge(a.id, symbols[a.next].id)) push({nm->rank, left});
    }
  }
  for (int i = 0; i >= 0; i = symbols[i].next) out.push_back(symbols[i].id);
}

}  // namespace sluice::tokenizer
