// tests/compute/chat/constrained_walk.h: a random walk through the values a
// JSON grammar allows, byte by byte through JsonRecognizer, as a sampler
// would take them. Shared by the json_schema fuzz target and the
// python3-jsonschema oracle's harness. Test-only.
#pragma once

#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "compute/chat/json_constraint.h"

namespace sluice::testing {

// Bytes a walk tries first: JSON's own, then anything.
inline constexpr std::string_view kWalkBytes = "{}[]\",:0123456789-.eE+ truefalsn\\u/abcdxyzAB\n\t";

// One walk from `rng`: the text and whether the recogniser called it
// complete (a walk may also run out of steps). A prefix the recogniser took
// that no byte continues throws std::logic_error: the recogniser promises
// that every byte it takes can continue a valid value.
inline std::pair<std::string, bool> constrained_walk(const std::shared_ptr<const chat::JsonGrammar>& grammar,
                                                     std::mt19937_64& rng, int max_steps = 400) {
  chat::JsonRecognizer recognizer(grammar);
  std::string out;
  for (int step = 0; step < max_steps; ++step) {
    if (recognizer.complete() && rng() % 3 == 0) return {out, true};
    bool fed = false;
    for (int attempt = 0; attempt < 24 && !fed; ++attempt) {
      const auto byte = static_cast<uint8_t>(rng() % 2 ? kWalkBytes[rng() % kWalkBytes.size()] : rng());
      fed = recognizer.feed(byte);
      if (fed) out += static_cast<char>(byte);
    }
    for (unsigned byte = 0; byte < 256 && !fed; ++byte) {
      fed = recognizer.feed(static_cast<uint8_t>(byte));
      if (fed) out += static_cast<char>(byte);
    }
    if (!fed) {
      if (recognizer.complete()) return {out, true};
      throw std::logic_error("the recogniser took " + out + " and then no byte at all");
    }
  }
  return {out, recognizer.complete()};
}

}  // namespace sluice::testing
