// tests/router/rank1_routing.h: the real routing a lookahead test publishes
// after its guesses, built so that each row's rank-1 guess is among its
// experts and every other expert is the lowest id not yet taken. Test-only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace sluice::testing {

// rows × top_k expert ids; row r holds guesses[r][0] first.
inline std::vector<uint32_t> routing_holding_rank1(const std::vector<std::vector<uint32_t>>& guesses,
                                                   uint32_t top_k) {
  std::vector<uint32_t> real;
  for (size_t r = 0; r < guesses.size(); ++r) {
    real.push_back(guesses[r][0]);
    for (uint32_t e = 0; real.size() < (r + 1) * top_k; ++e) {
      if (e != guesses[r][0]) real.push_back(e);
    }
  }
  return real;
}

}  // namespace sluice::testing
