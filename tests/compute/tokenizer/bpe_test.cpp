// tests/compute/tokenizer/bpe_test.cpp: the byte map and rank-ordered merging
// of compute/tokenizer/bpe.cpp, on vocabularies small enough to reason about.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <set>

#include "compute/tokenizer/bpe.h"
#include "proto/error.h"

using namespace sluice::tokenizer;

namespace {

// Ids: byte b is b; merged tokens continue from 256.
BpeModel model_with(const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges = false,
                    const std::vector<std::string>& extra = {}) {
  BpeModel m(ignore_merges);
  for (int b = 0; b < 256; ++b) m.add_token(std::string(1, static_cast<char>(b)), b);
  std::map<std::string, TokenId> ids;
  for (int b = 0; b < 256; ++b) ids[std::string(1, static_cast<char>(b))] = b;
  TokenId next = 256;
  for (const auto& [a, b] : merges) {
    ids[a + b] = next;
    m.add_token(a + b, next++);
    m.add_merge(ids.at(a), ids.at(b), ids.at(a + b));
  }
  for (const auto& t : extra) m.add_token(t, next++);
  return m;
}

std::vector<TokenId> encode(const BpeModel& m, std::string_view piece) {
  std::vector<TokenId> out;
  m.encode(piece, out);
  return out;
}

}  // namespace

TEST_CASE("the byte map is GPT-2's: printable Latin-1 stands for itself, the rest moves above U+00FF") {
  std::set<char32_t> seen;
  for (int b = 0; b < 256; ++b) {
    const char32_t c = byte_to_char(static_cast<uint8_t>(b));
    seen.insert(c);
    CHECK(char_to_byte(c) == b);
  }
  CHECK(seen.size() == 256);
  CHECK(byte_to_char('A') == U'A');
  CHECK(byte_to_char(' ') == U'\u0120');  // 'Ġ'
  CHECK(byte_to_char('\n') == U'\u010A');  // 'Ċ'
  CHECK(byte_to_char(0) == U'\u0100');
  CHECK(!char_to_byte(U' ').has_value());
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  CHECK(byte_level_to_bytes(bytes_to_byte_level(all)) == all);
  CHECK(!byte_level_to_bytes("a b").has_value());  // a raw space is not a byte-level character
}

TEST_CASE("merges apply lowest rank first, wherever they are in the piece") {
  // rank 0: b+c, rank 1: a+b, rank 2: a+bc. "abc" must take b+c first, then a+bc.
  const auto m = model_with({{"b", "c"}, {"a", "b"}, {"a", "bc"}});
  CHECK(encode(m, "abc") == std::vector<TokenId>{258});
  // Swap the first two ranks: a+b wins and a+bc is never reachable.
  const auto swapped = model_with({{"a", "b"}, {"b", "c"}, {"a", "bc"}});
  CHECK(encode(swapped, "abc") == std::vector<TokenId>{256, 'c'});
}

TEST_CASE("equal pairs merge leftmost first") {
  const auto m = model_with({{"a", "a"}});
  CHECK(encode(m, "aaa") == std::vector<TokenId>{256, 'a'});
  CHECK(encode(m, "aaaa") == std::vector<TokenId>{256, 256});
}

TEST_CASE("a long piece merges completely") {
  const auto m = model_with({{"a", "a"}, {"aa", "aa"}});
  const auto ids = encode(m, std::string(20000, 'a'));
  CHECK(ids.size() == 5000);
  CHECK(std::all_of(ids.begin(), ids.end(), [](TokenId id) { return id == 257; }));
}

TEST_CASE("ignore_merges takes a piece that is already a token whole") {
  // Merges reach "ab"+"c" but the vocabulary also has "abc" (id 258).
  const auto plain = model_with({{"a", "b"}}, false, {"abc"});
  const auto ignoring = model_with({{"a", "b"}}, true, {"abc"});
  CHECK(encode(plain, "abc") == std::vector<TokenId>{256, 'c'});
  CHECK(encode(ignoring, "abc") == std::vector<TokenId>{257});
  CHECK(encode(ignoring, "abx") == std::vector<TokenId>{256, 'x'});
}

TEST_CASE("a byte without a token is an error naming the byte") {
  BpeModel m(false);
  m.add_token("a", 0);
  std::vector<TokenId> out;
  CHECK_THROWS_WITH_AS(m.encode("a\x7f", out), doctest::Contains("0x7F"), sluice::Error);
}
