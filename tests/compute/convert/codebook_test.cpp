// tests/compute/convert/codebook_test.cpp: the nearest-entry search: the
// AVX2 and scalar paths agree bit for bit, ties go to the lowest code, and
// the answer is the true nearest entry (checked in double).
#include "compute/convert/codebook.h"

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include <doctest/doctest.h>

namespace sluice::convert {
namespace {

Codebook random_codebook(uint32_t seed, float spread) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, spread);
  std::vector<float> entries(kRvqEntries * kRvqVecDim);
  for (float& e : entries) e = normal(rng);
  return Codebook(entries.data());
}

double distance2(const float* a, const float* b) {
  double d = 0;
  for (int j = 0; j < kRvqVecDim; ++j) d += (double{a[j]} - b[j]) * (double{a[j]} - b[j]);
  return d;
}

TEST_CASE("the search finds the nearest entry") {
  const Codebook book = random_codebook(1, 0.5f);
  std::mt19937 rng(2);
  std::normal_distribution<float> normal(0.0f, 0.6f);
  for (int trial = 0; trial < 2000; ++trial) {
    float v[kRvqVecDim];
    for (float& x : v) x = normal(rng);
    const int code = nearest_code(book, v);
    const double best = distance2(v, book.entry(code));
    for (int c = 0; c < kRvqEntries; ++c) CHECK(best <= distance2(v, book.entry(c)) + 1e-6);
  }
}

TEST_CASE("AVX2 and scalar searches agree bit for bit") {
  if (!search_uses_avx2()) {
    MESSAGE("no AVX2+FMA on this machine: only the scalar path exists");
    return;
  }
  std::mt19937 rng(3);
  for (uint32_t seed = 0; seed < 8; ++seed) {
    const Codebook book = random_codebook(seed, seed % 2 ? 1e-3f : 1.0f);
    std::normal_distribution<float> normal(0.0f, seed % 2 ? 1e-3f : 1.0f);
    for (int trial = 0; trial < 5000; ++trial) {
      float v[kRvqVecDim];
      for (float& x : v) x = normal(rng);
      if (trial % 97 == 0) std::copy(book.entry(trial % 256), book.entry(trial % 256) + kRvqVecDim, v);
      REQUIRE(nearest_code_avx2(book, v) == nearest_code_scalar(book, v));
    }
  }
  float nan_vector[kRvqVecDim];
  std::fill(nan_vector, nan_vector + kRvqVecDim, std::numeric_limits<float>::quiet_NaN());
  const Codebook book = random_codebook(9, 1.0f);
  CHECK(nearest_code_avx2(book, nan_vector) == 0);
  CHECK(nearest_code_scalar(book, nan_vector) == 0);
}

TEST_CASE("ties take the lowest code") {
  std::vector<float> entries(kRvqEntries * kRvqVecDim, 5.0f);
  // Codes 200 and 9 hold the same point; 3 and 130 sit at equal distance from 0.
  for (int j = 0; j < kRvqVecDim; ++j) entries[200 * kRvqVecDim + j] = entries[9 * kRvqVecDim + j] = 2.0f;
  std::fill(entries.begin() + 3 * kRvqVecDim, entries.begin() + 4 * kRvqVecDim, 0.0f);
  std::fill(entries.begin() + 130 * kRvqVecDim, entries.begin() + 131 * kRvqVecDim, 0.0f);
  entries[3 * kRvqVecDim] = 1.0f;
  entries[130 * kRvqVecDim] = -1.0f;
  const Codebook book(entries.data());
  float on_duplicate[kRvqVecDim];
  std::fill(on_duplicate, on_duplicate + kRvqVecDim, 2.0f);
  float origin[kRvqVecDim] = {};
  for (auto search : {nearest_code_scalar, nearest_code}) {
    CHECK(search(book, on_duplicate) == 9);
    CHECK(search(book, origin) == 3);
  }
  const Codebook flat(std::vector<float>(kRvqEntries * kRvqVecDim, 1.0f).data());
  CHECK(nearest_code(flat, origin) == 0);
}

TEST_CASE("the codebook keeps its entries and search tables in step") {
  const Codebook book = random_codebook(4, 1.0f);
  for (int c = 0; c < kRvqEntries; ++c) {
    double norm = 0;
    for (int j = 0; j < kRvqVecDim; ++j) {
      REQUIRE(book.minus_two_transposed()[j * kRvqEntries + c] == -2.0f * book.entry(c)[j]);
      norm += double{book.entry(c)[j]} * book.entry(c)[j];
    }
    CHECK(book.norms()[c] == doctest::Approx(norm).epsilon(1e-6));
  }
}

TEST_CASE("SplitMix64 is a fixed stream") {
  SplitMix64 a(42), b(42), c(43);
  for (int i = 0; i < 100; ++i) {
    const uint64_t x = a.next();
    CHECK(x == b.next());
    CHECK(x != c.next());
  }
  SplitMix64 r(7);
  for (int i = 0; i < 1000; ++i) {
    const double u = r.uniform();
    CHECK((u >= 0.0 && u < 1.0));
    CHECK(r.below(10) < 10u);
  }
}

}  // namespace
}  // namespace sluice::convert
