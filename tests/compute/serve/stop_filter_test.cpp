// tests/compute/serve/stop_filter_test.cpp: the hold-back rule of stop
// strings: no byte of a stop string is ever released, text that only looked
// like a stop's start is released once it cannot be one, and however the text
// is split the released concatenation is the same.
#include "compute/serve/stop_filter.h"

#include <doctest/doctest.h>

#include <string>
#include <vector>

using sluice::serve::StopFilter;

namespace {

// Feeds `pieces` and returns everything released, finish() included.
std::string run(const std::vector<std::string>& stops, const std::vector<std::string>& pieces,
                bool* stopped = nullptr) {
  StopFilter filter(stops);
  std::string out;
  for (const auto& piece : pieces) out += filter.push(piece);
  out += filter.finish();
  if (stopped) *stopped = filter.stopped();
  return out;
}

}  // namespace

TEST_CASE("a stop string split across pieces is cut and never released") {
  StopFilter filter({"END"});
  CHECK(filter.push("abc E") == "abc ");  // "E" could begin END
  CHECK(filter.push("N") == "");
  CHECK(filter.push("D and more") == "");
  CHECK(filter.stopped());
  CHECK(filter.matched() == "END");
  CHECK(filter.finish() == "");
}

TEST_CASE("a false start is released once it cannot be a stop string") {
  StopFilter filter({"END"});
  CHECK(filter.push("E") == "");
  CHECK(filter.push("NX") == "ENX");
  CHECK_FALSE(filter.stopped());
}

TEST_CASE("held-back text comes out at the end when no stop string completes") {
  bool stopped = true;
  CHECK(run({"</answer>"}, {"x </ans"}, &stopped) == "x </ans");
  CHECK_FALSE(stopped);
}

TEST_CASE("the earliest of several stop strings wins, and is the one it names") {
  bool stopped = false;
  CHECK(run({"world", "lo w"}, {"hello world"}, &stopped) == "hel");
  CHECK(stopped);
  StopFilter filter({"world", "lo w"});
  CHECK(filter.matched().empty());
  CHECK(filter.push("hello world") == "hel");
  CHECK(filter.matched() == "lo w");
}

TEST_CASE("every split of the text gives the same released text") {
  const std::string text = "one two\xe2\x82\xac thr STOP-ee four";
  const std::vector<std::string> stops = {"STOP", "\xe2\x82\xac th"};
  const std::string whole = run(stops, {text});
  CHECK(whole == "one two");
  for (size_t a = 0; a <= text.size(); ++a) {
    for (size_t b = a; b <= text.size(); ++b) {
      CHECK(run(stops, {text.substr(0, a), text.substr(a, b - a), text.substr(b)}) == whole);
    }
  }
}

TEST_CASE("without stop strings everything is released at once") {
  StopFilter filter({});
  CHECK(filter.push("abc") == "abc");
  CHECK(filter.finish() == "");
}
