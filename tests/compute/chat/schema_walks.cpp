// tests/compute/chat/schema_walks.cpp: the C++ side of the python3-jsonschema
// oracle test. Reads one {"schema": ..., "seed": N, "walks": K} per line on
// stdin and prints one line per case: {"outputs": [completed texts]} or
// {"refused": "the compiler's message"}.
#include <iostream>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "proto/error.h"
#include "tests/compute/chat/constrained_walk.h"

int main() {
  std::string line;
  while (std::getline(std::cin, line)) {
    const nlohmann::json c = nlohmann::json::parse(line);
    nlohmann::json result = nlohmann::json::object();
    try {
      const auto grammar = sluice::chat::JsonGrammar::from_schema(c.at("schema"));
      std::mt19937_64 rng(c.at("seed").get<uint64_t>());
      nlohmann::json outputs = nlohmann::json::array();
      for (int walk = 0; walk < c.at("walks").get<int>(); ++walk) {
        const auto [text, complete] = sluice::testing::constrained_walk(grammar, rng);
        if (complete) outputs.push_back(text);
      }
      result["outputs"] = outputs;
    } catch (const sluice::Error& e) {
      result["refused"] = e.what();
    }
    std::cout << result.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n" << std::flush;
  }
}
