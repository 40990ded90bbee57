// tests/compute/tokenizer/added_tokens_test.cpp: whole-string matching of
// added tokens: longest first, strip rules and single_word.
#include <doctest/doctest.h>

#include "compute/tokenizer/added_tokens.h"

using namespace sluice::tokenizer;

namespace {

AddedToken token(TokenId id, std::string content) {
  AddedToken t;
  t.id = id;
  t.content = std::move(content);
  return t;
}

// Segments rendered as text, added tokens in brackets with their id.
std::vector<std::string> render(const AddedTokenMatcher& m, std::string_view text) {
  std::vector<Segment> segments;
  m.split(text, segments);
  std::vector<std::string> out;
  for (const Segment& s : segments) {
    const std::string piece(text.substr(s.begin, s.end - s.begin));
    out.push_back(s.token < 0 ? piece : "[" + std::to_string(m.token(s.token).id) + ":" + piece + "]");
  }
  return out;
}
using V = std::vector<std::string>;

}  // namespace

TEST_CASE("the longest token at the leftmost position wins") {
  const AddedTokenMatcher m({token(1, "<a>"), token(2, "<a><b>"), token(3, "<b>")});
  CHECK(render(m, "x<a><b>y") == V{"x", "[2:<a><b>]", "y"});
  CHECK(render(m, "<a><a>") == V{"[1:<a>]", "[1:<a>]"});
  CHECK(render(m, "<a><c>") == V{"[1:<a>]", "<c>"});
  CHECK(render(m, "<a") == V{"<a"});
  CHECK(render(m, "") == V{});
}

TEST_CASE("lstrip and rstrip swallow the neighbouring whitespace") {
  AddedToken mask = token(7, "<m>");
  mask.lstrip = true;
  mask.rstrip = true;
  const AddedTokenMatcher m({mask});
  CHECK(render(m, "a \u3000<m>\t b") == V{"a", "[7: \u3000<m>\t ]", "b"});
  AddedToken left = token(8, "<l>");
  left.lstrip = true;
  CHECK(render(AddedTokenMatcher({left}), "a  <l>  b") == V{"a", "[8:  <l>]", "  b"});
}

TEST_CASE("single_word tokens do not match inside words") {
  AddedToken ony = token(5, "ony");
  ony.single_word = true;
  const AddedTokenMatcher m({ony});
  CHECK(render(m, "Anthony") == V{"Anthony"});
  CHECK(render(m, "an ony here") == V{"an ", "[5:ony]", " here"});
  CHECK(render(m, "ony_") == V{"ony_"});
}
