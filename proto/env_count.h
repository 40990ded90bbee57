// proto/env_count.h: a count of things read from a SLUICE_* environment
// variable, parsed one way for every program so a bad value fails alike
// ("NAME='VALUE': expected ..."). It never guesses at a malformed value.
#pragma once

#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string_view>

#include "proto/error.h"

namespace sluice {

// Unset or empty: nullopt. Anything but a decimal count from `min` to `max`
// fails, the message ending with `expected`.
inline std::optional<uint32_t> count_from_environment(const char* name, uint32_t min, uint32_t max,
                                                      std::string_view expected) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  uint32_t count = 0;
  const char* end = value + std::strlen(value);
  const auto [ptr, error] = std::from_chars(value, end, count);
  if (error != std::errc() || ptr != end || count < min || count > max) fail("{}='{}': expected {}", name, value, expected);
  return count;
}

}  // namespace sluice
