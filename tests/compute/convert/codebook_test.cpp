// tests/compute/convert/codebook_test.cpp: the nearest-entry search: every
// instruction set's batched search agrees with the scalar one code for code,
// ties go to the lowest code, and
// the answer is the true nearest entry (checked in double).
#include "compute/convert/codebook.h"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

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
    const int code = nearest_code_scalar(book, v);
    const double best = distance2(v, book.entry(code));
    for (int c = 0; c < kRvqEntries; ++c) CHECK(best <= distance2(v, book.entry(c)) + 1e-6);
  }
}

// Every instruction set against the scalar model, one vector at a time, over
// batch lengths that leave each block size's tail: random vectors, vectors
// on an entry (exact ties of the expanded form), tiny and huge scales.
TEST_CASE("every instruction set's batched search equals the scalar search") {
  std::mt19937 rng(3);
  for (uint32_t seed = 0; seed < 8; ++seed) {
    const float spread = seed % 4 == 1 ? 1e-3f : seed % 4 == 3 ? 3e3f : 1.0f;
    const Codebook book = random_codebook(seed, spread);
    std::normal_distribution<float> normal(0.0f, spread);
    for (size_t count :
         {size_t{1}, size_t{2}, size_t{3}, size_t{5}, size_t{7}, size_t{448}, size_t{1023}}) {
      std::vector<float> vectors(count * kRvqVecDim);
      for (float& x : vectors) x = normal(rng);
      for (size_t i = 0; i < count; i += 5)
        std::copy(book.entry(int(i % kRvqEntries)), book.entry(int(i % kRvqEntries)) + kRvqVecDim,
                  &vectors[i * kRvqVecDim]);
      std::vector<uint8_t> expected(count);
      for (size_t i = 0; i < count; ++i)
        expected[i] = uint8_t(nearest_code_scalar(book, &vectors[i * kRvqVecDim]));
      for (kernels::Isa isa : kernels::supported_isas()) {
        CAPTURE(kernels::isa_name(isa));
        CAPTURE(count);
        std::vector<uint8_t> codes(count, 0xaa);
        nearest_codes(book, vectors.data(), count, codes.data(), isa);
        REQUIRE(codes == expected);
      }
    }
  }
}

TEST_CASE("NaN vectors get code 0 on every instruction set, beside ordinary ones") {
  const Codebook book = random_codebook(9, 1.0f);
  std::vector<float> vectors(5 * kRvqVecDim, 0.25f);
  std::fill(vectors.begin() + 2 * kRvqVecDim, vectors.begin() + 3 * kRvqVecDim,
            std::numeric_limits<float>::quiet_NaN());
  const uint8_t ordinary = uint8_t(nearest_code_scalar(book, vectors.data()));
  CHECK(nearest_code_scalar(book, &vectors[2 * kRvqVecDim]) == 0);
  for (kernels::Isa isa : kernels::supported_isas()) {
    CAPTURE(kernels::isa_name(isa));
    std::vector<uint8_t> codes(5, 0xaa);
    nearest_codes(book, vectors.data(), 5, codes.data(), isa);
    CHECK(codes == std::vector<uint8_t>{ordinary, ordinary, 0, ordinary, ordinary});
  }
}

TEST_CASE("ties take the lowest code") {
  std::vector<float> entries(kRvqEntries * kRvqVecDim, 5.0f);
  // Codes 60 and 9 hold the same point; 3 and 50 sit at equal distance from
  // 0. The later twin of each sits in another 8- and 16-lane group.
  for (int j = 0; j < kRvqVecDim; ++j)
    entries[60 * kRvqVecDim + j] = entries[9 * kRvqVecDim + j] = 2.0f;
  std::fill(entries.begin() + 3 * kRvqVecDim, entries.begin() + 4 * kRvqVecDim, 0.0f);
  std::fill(entries.begin() + 50 * kRvqVecDim, entries.begin() + 51 * kRvqVecDim, 0.0f);
  entries[3 * kRvqVecDim] = 1.0f;
  entries[50 * kRvqVecDim] = -1.0f;
  const Codebook book(entries.data());
  float on_duplicate[kRvqVecDim];
  std::fill(on_duplicate, on_duplicate + kRvqVecDim, 2.0f);
  float origin[kRvqVecDim] = {};
  CHECK(nearest_code_scalar(book, on_duplicate) == 9);
  CHECK(nearest_code_scalar(book, origin) == 3);
  for (kernels::Isa isa : kernels::supported_isas()) {
    CAPTURE(kernels::isa_name(isa));
    // Blocks of 4, 2 and 1 vectors: the same tie in every lane position of a batch.
    std::vector<float> batch;
    for (int i = 0; i < 7; ++i)
      batch.insert(batch.end(), i % 2 ? origin : on_duplicate,
                   (i % 2 ? origin : on_duplicate) + kRvqVecDim);
    std::vector<uint8_t> codes(7);
    nearest_codes(book, batch.data(), 7, codes.data(), isa);
    CHECK(codes == std::vector<uint8_t>{9, 3, 9, 3, 9, 3, 9});
  }
  const Codebook flat(std::vector<float>(kRvqEntries * kRvqVecDim, 1.0f).data());
  CHECK(nearest_code_scalar(flat, origin) == 0);
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
