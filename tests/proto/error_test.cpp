// An error message quoting bytes from a damaged file stays readable text:
// well-formed UTF-8 and newlines pass, everything else becomes \xNN.
#include <doctest/doctest.h>

#include <string>

#include "proto/error.h"

using sluice::Error;

std::string message_of(const std::string& text) {
  try {
    sluice::fail("{}", text);
  } catch (const Error& e) {
    return e.what();
  }
  return "not thrown";
}

TEST_CASE("well-formed UTF-8 and newlines pass unchanged") {
  const std::string text = "tensor 'model.layers.0.mlp' \xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\nplan";
  CHECK(message_of(text) == text);
}

TEST_CASE("a byte outside UTF-8 is escaped, and only that byte") {
  CHECK(message_of("last read: '\"__metadata__\xa2'") == "last read: '\"__metadata__\\xa2'");
  CHECK(message_of("name \xe1" "d") == "name \\xe1d");  // a lead byte whose continuation is ASCII
  CHECK(message_of("cut \xe2\x82") == "cut \\xe2\\x82");  // a sequence the end cut short
}

TEST_CASE("overlong forms, surrogates and code points past U+10FFFF are escaped") {
  CHECK(message_of("\xc0\xaf") == "\\xc0\\xaf");
  CHECK(message_of("\xed\xa0\x80") == "\\xed\\xa0\\x80");
  CHECK(message_of("\xf4\x90\x80\x80") == "\\xf4\\x90\\x80\\x80");
}

TEST_CASE("control characters other than the newline are escaped") {
  CHECK(message_of(std::string("a\0b", 3)) == "a\\x00b");
  CHECK(message_of("bell\a tab\t esc\x1b[2J del\x7f") == "bell\\x07 tab\\x09 esc\\x1b[2J del\\x7f");
}
