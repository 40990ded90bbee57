// tests/compute/convert/kmeans_test.cpp: codebook training: identical
// codebooks for any thread count, Lloyd lowers the distortion of the
// k-means++ seeding, each RVQ stage removes error, sampling is exact.
#include "compute/convert/kmeans.h"

#include <cstring>
#include <random>
#include <set>
#include <vector>

#include <doctest/doctest.h>

#include "compute/convert/convert_steps.h"

namespace sluice::convert {
namespace {

std::vector<float> gaussian_vectors(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  std::vector<float> v(count * kRvqVecDim);
  for (float& x : v) x = normal(rng);
  return v;
}

double distortion(const Codebook& book, const std::vector<float>& v) {
  double total = 0.0;
  for (size_t i = 0; i < v.size() / kRvqVecDim; ++i) {
    const float* x = v.data() + i * kRvqVecDim;
    const float* e = book.entry(nearest_code_scalar(book, x));
    for (int j = 0; j < kRvqVecDim; ++j) total += (double{x[j]} - e[j]) * (double{x[j]} - e[j]);
  }
  return total;
}

bool same_bytes(const Codebook& a, const Codebook& b) {
  return std::memcmp(a.entries(), b.entries(), kCodebookBytes) == 0;
}

TEST_CASE("training gives the same codebook bytes for 1, 2 and 3 threads") {
  const auto v = gaussian_vectors(5000, 1);  // not a multiple of the chunk size
  const Codebook one = train_codebook(v.data(), 5000, {77, 6, 1});
  CHECK(same_bytes(one, train_codebook(v.data(), 5000, {77, 6, 2})));
  CHECK(same_bytes(one, train_codebook(v.data(), 5000, {77, 6, 3})));
  CHECK_FALSE(same_bytes(one, train_codebook(v.data(), 5000, {78, 6, 1})));
  auto a = v, b = v;
  const auto stages_1 = train_rvq(a, {5, 4, 1});
  const auto stages_2 = train_rvq(b, {5, 4, 2});
  for (int s = 0; s < kRvqStages; ++s) CHECK(same_bytes(stages_1[s], stages_2[s]));
  CHECK(a == b);
}

TEST_CASE("Lloyd iterations lower the distortion of the seeding") {
  const auto v = gaussian_vectors(8192, 2);
  const double seeded = distortion(train_codebook(v.data(), 8192, {9, 0, 2}), v);
  const double trained = distortion(train_codebook(v.data(), 8192, {9, 12, 2}), v);
  MESSAGE("distortion after k-means++: " << seeded << ", after 12 Lloyd iterations: " << trained);
  CHECK(trained < 0.9 * seeded);
}

TEST_CASE("each RVQ stage removes a large part of what remains") {
  auto v = gaussian_vectors(16384, 3);
  double energy = 0.0;
  for (float x : v) energy += double{x} * x;
  std::vector<float> residual = v;
  const auto stages = train_rvq(residual, {11, 10, 2});
  std::vector<float> check = v;
  double previous = energy;
  for (int s = 0; s < kRvqStages; ++s) {
    subtract_nearest(stages[s], check, 1);
    double left = 0.0;
    for (float x : check) left += double{x} * x;
    MESSAGE("stage " << s << " leaves " << std::sqrt(left / energy) << " of the norm");
    CHECK(left < 0.75 * previous);
    previous = left;
  }
  CHECK(check == residual);
}

TEST_CASE("fewer distinct vectors than entries are all reproduced exactly") {
  std::vector<float> v;
  for (int rep = 0; rep < 50; ++rep) {
    for (int p = 0; p < 10; ++p) {
      for (int j = 0; j < kRvqVecDim; ++j) v.push_back(static_cast<float>(p * 8 + j) * 0.01f);
    }
  }
  const Codebook book = train_codebook(v.data(), v.size() / kRvqVecDim, {1, 5, 2});
  CHECK(distortion(book, v) == 0.0);
}

TEST_CASE("sample positions are sorted, distinct, in range and fixed by the seed") {
  const auto p = sample_positions(1000000, 4096, 99);
  REQUIRE(p.size() == 4096);
  CHECK(std::set<uint64_t>(p.begin(), p.end()).size() == 4096);
  CHECK(std::is_sorted(p.begin(), p.end()));
  CHECK(p.back() < 1000000);
  CHECK(p == sample_positions(1000000, 4096, 99));
  CHECK(p != sample_positions(1000000, 4096, 100));
  // Roughly uniform: about half the draws fall in the lower half.
  const auto lower = std::count_if(p.begin(), p.end(), [](uint64_t x) { return x < 500000; });
  CHECK(lower > 1800);
  CHECK(lower < 2300);
  const auto all = sample_positions(300, 4096, 1);
  REQUIRE(all.size() == 300);
  for (uint64_t i = 0; i < 300; ++i) CHECK(all[i] == i);
}

TEST_CASE("derived seeds differ for different parts") {
  CHECK(derive_seed(1, 0, 0) != derive_seed(1, 0, 1));
  CHECK(derive_seed(1, 0, 1) != derive_seed(1, 1, 0));
  CHECK(derive_seed(1, 2, 3) == derive_seed(1, 2, 3));
  CHECK(derive_seed(1, 2, 3) != derive_seed(2, 2, 3));
}

}  // namespace
}  // namespace sluice::convert
