// tests/shm/index_test.cpp: the open-addressing index against std::map under
// random inserts and erases, and its bounds on a scribbled table.
#include <doctest/doctest.h>

#include <map>
#include <random>
#include <vector>

#include "shm/index.h"

using namespace sluice::shm;

TEST_CASE("index agrees with a map through inserts, lookups and evictions") {
  constexpr uint32_t kSlots = 64;
  std::vector<IndexEntry> table(128);
  IndexView index(table.data(), 128, kSlots);
  std::map<uint64_t, uint32_t> truth;
  std::mt19937 rng(3);
  for (int step = 0; step < 20000; ++step) {
    const uint64_t key = make_key(rng() % 4, rng() % 40);
    if (rng() % 3 != 0 && truth.size() < kSlots) {
      const uint32_t slot = rng() % kSlots;
      index.insert(key, slot);
      truth[key] = slot;
    } else {
      CHECK(index.erase(key) == (truth.erase(key) == 1));
    }
    if (step % 97 == 0) {
      for (uint32_t l = 0; l < 4; ++l) {
        for (uint32_t e = 0; e < 40; ++e) {
          const auto it = truth.find(make_key(l, e));
          const auto found = index.find(make_key(l, e));
          REQUIRE(found.has_value() == (it != truth.end()));
          if (found) CHECK(*found == it->second);
        }
      }
      CHECK(index.size() == truth.size());
    }
  }
}

TEST_CASE("a scribbled index cannot loop or hand out a slot out of range") {
  std::vector<IndexEntry> table(16);
  IndexView index(table.data(), 16, 8);
  for (IndexEntry& e : table) e = IndexEntry{make_key(9, 9), 1000, 0};  // full, every slot bogus
  CHECK_FALSE(index.find(make_key(1, 1)).has_value());
  CHECK_FALSE(index.find(make_key(9, 9)).has_value());
  CHECK_THROWS(index.insert(make_key(1, 1), 0));
  index.clear();
  CHECK(index.size() == 0);
  index.insert(make_key(1, 1), 7);
  CHECK(index.find(make_key(1, 1)) == 7u);
}
