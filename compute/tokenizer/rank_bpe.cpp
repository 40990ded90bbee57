// compute/tokenizer/rank_bpe.cpp: tiktoken's merge rule over a min-heap of
// candidate pairs, so long pieces cost O(n log n) rather than the reference's
// O(n^2) rescans while choosing exactly the same pair at every step.
#include "compute/tokenizer/rank_bpe.h"

#include <algorithm>
#include <functional>

#include "proto/error.h"

namespace sluice::tokenizer {

void RankBpe::reserve(size_t count, size_t total_bytes) {
  arena_.reserve(total_bytes);
  offsets_.reserve(count + 1);
  size_t slots = 1024;
  while (slots < count * 2) slots *= 2;  // load factor at most 1/2
  if (slots > slots_.size()) {
    slots_.assign(slots, kEmpty);
    for (size_t r = 0; r < size(); ++r)
      slots_[slot_of(bytes(static_cast<TokenId>(r)))] = static_cast<uint32_t>(r);
  }
}

void RankBpe::grow() {
  reserve(std::max<size_t>(size() * 2, 512), arena_.size());
}

size_t RankBpe::slot_of(std::string_view key) const {
  const size_t mask = slots_.size() - 1;
  for (size_t i = std::hash<std::string_view>{}(key)&mask;; i = (i + 1) & mask) {
    if (slots_[i] == kEmpty || bytes(static_cast<TokenId>(slots_[i])) == key) return i;
  }
}

std::optional<TokenId> RankBpe::add(std::string_view token) {
  if (token.empty()) fail("tokenizer: a tiktoken token cannot be empty");
  if ((size() + 1) * 2 > slots_.size()) grow();
  const size_t slot = slot_of(token);
  if (slots_[slot] != kEmpty) return static_cast<TokenId>(slots_[slot]);
  if (arena_.size() + token.size() > UINT32_MAX)
    fail("tokenizer: tiktoken ranks hold more than 4 GiB of bytes");
  const auto rank = static_cast<TokenId>(size());
  slots_[slot] = static_cast<uint32_t>(rank);
  arena_.append(token);
  offsets_.push_back(static_cast<uint32_t>(arena_.size()));
  if (token.size() == 1) byte_ranks_[static_cast<uint8_t>(token[0])] = rank;
  return std::nullopt;
}

std::optional<TokenId> RankBpe::find(std::string_view key) const {
  if (slots_.empty()) return std::nullopt;
  const uint32_t rank = slots_[slot_of(key)];
  if (rank == kEmpty) return std::nullopt;
  return static_cast<TokenId>(rank);
}

void RankBpe::encode(std::string_view piece, std::vector<TokenId>& out) const {
  if (piece.empty()) return;
  if (const auto whole = find(piece)) {
    out.push_back(*whole);
    return;
  }
  const auto n = static_cast<uint32_t>(piece.size());
  // Parts are named by the byte they start at; part i spans [i, next[i]).
  // Reused across calls: encoding allocates nothing per piece once warm.
  thread_local std::vector<uint32_t> next, prev;
  thread_local std::vector<TokenId> part_rank;
  thread_local std::vector<char> alive;
  next.resize(n);
  prev.resize(n);
  part_rank.resize(n);
  alive.assign(n, 1);
  for (uint32_t i = 0; i < n; ++i) {
    const auto byte = static_cast<uint8_t>(piece[i]);
    if (byte_ranks_[byte] < 0)
      fail("tokenizer: the tiktoken ranks have no token for byte 0x{:02X}", byte);
    part_rank[i] = byte_ranks_[byte];
    next[i] = i + 1;
    prev[i] = i - 1;  // wraps for i == 0; never read there
  }
  auto pair_rank = [&](uint32_t left) -> std::optional<TokenId> {
    const uint32_t right = next[left];
    if (right >= n) return std::nullopt;
    return find(piece.substr(left, next[right] - left));
  };
  // (rank, left part): the lowest rank merges first, the leftmost among
  // equal ranks, as tiktoken's scan for the minimum does.
  using Candidate = std::pair<TokenId, uint32_t>;
  thread_local std::vector<Candidate> heap;  // a min-heap under std::greater
  heap.clear();
  auto push = [](Candidate c) {
    heap.push_back(c);
    std::push_heap(heap.begin(), heap.end(), std::greater<>());
  };
  for (uint32_t i = 0; i + 1 < n; ++i) {
    if (const auto r = pair_rank(i)) push({*r, i});
  }
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    const auto [rank, left] = heap.back();
    heap.pop_back();
    if (!alive[left]) continue;
    const auto current = pair_rank(left);
    if (!current || *current != rank) continue;  // stale: a neighbour merged first
    const uint32_t right = next[left];
    alive[right] = 0;
    next[left] = next[right];
    if (next[left] < n) prev[next[left]] = left;
    part_rank[left] = rank;
    if (left > 0) {
      if (const auto r = pair_rank(prev[left])) push({*r, prev[left]});
    }
    if (const auto r = pair_rank(left)) push({*r, left});
  }
  for (uint32_t i = 0; i < n; i = next[i]) out.push_back(part_rank[i]);
}

}  // namespace sluice::tokenizer
