// tests/proto/base64_test.cpp: proto/base64 against RFC 4648's test vectors,
// and every refusal naming what is wrong.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "proto/base64.h"

using namespace sluice;

namespace {

std::string decoded(std::string_view text, Base64Rules rules = {}) {
  std::string why;
  const std::optional<std::string> bytes = decode_base64(text, rules, &why);
  REQUIRE_MESSAGE(bytes, why);
  return *bytes;
}

std::string refusal(std::string_view text, Base64Rules rules = {}) {
  std::string why;
  const std::optional<std::string> bytes = decode_base64(text, rules, &why);
  CHECK_FALSE(bytes);
  return why;
}

std::string encoded(std::string_view text) {
  return encode_base64(std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
}

}  // namespace

TEST_CASE("RFC 4648's vectors, both ways") {
  const std::vector<std::pair<std::string, std::string>> vectors = {
      {"", ""}, {"f", "Zg=="}, {"fo", "Zm8="}, {"foo", "Zm9v"}, {"foob", "Zm9vYg=="}, {"fooba", "Zm9vYmE="},
      {"foobar", "Zm9vYmFy"}};
  for (const auto& [bytes, text] : vectors) {
    CHECK(encoded(bytes) == text);
    CHECK(decoded(text) == bytes);
  }
  CHECK(decoded(std::string("+/8=")) == "\xfb\xff");
}

TEST_CASE("padding is optional only when the rules say so, and the URL-safe alphabet only when asked") {
  const Base64Rules lenient{.padding_required = false, .url_safe_too = true};
  CHECK(decoded("Zm8", lenient) == "fo");
  CHECK(decoded("Zg", lenient) == "f");
  CHECK(decoded("-_8=", lenient) == "\xfb\xff");
  CHECK(decoded("-_8", lenient) == "\xfb\xff");
  CHECK(refusal("Zm8") == "3 characters with their padding, not a multiple of 4");
  CHECK(refusal("Zg=", lenient) == "3 characters with their padding, not a multiple of 4");
  CHECK(refusal("-_8=") == "byte 0 is not base64");
}

TEST_CASE("anything else is refused, naming the byte") {
  CHECK(refusal("Zm9v Yg==") == "byte 4 is not base64");
  CHECK(refusal("Zm9v\nYg==") == "byte 4 is not base64");
  CHECK(refusal("Z=9v") == "byte 1 is not base64");
  CHECK(refusal("Zg===") == "byte 2 is not base64");
  CHECK(refusal("Zm9vY") == "a dangling character");
  CHECK(refusal("==") == "padding and no digits");
  CHECK(refusal("+/-_", {.url_safe_too = true}) == "byte 2 mixes the URL-safe and standard alphabets");
  // The bits a final group leaves over must be zero: "Zh==" is not the encoding of "f".
  CHECK_FALSE(refusal("Zh==").empty());
}
