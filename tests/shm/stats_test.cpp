// tests/shm/stats_test.cpp: latency buckets and percentiles.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "shm/stats.h"

using namespace sluice::shm;

TEST_CASE("latency buckets hold their values and grow by 2^(1/4)") {
  for (uint64_t ns : {1500ull, 80'000ull, 3'000'000ull, 250'000'000ull}) {
    const uint32_t b = latency_bucket(ns);
    const double us = static_cast<double>(ns) / 1000.0;
    CHECK(latency_bucket_upper_us(b) > us);
    CHECK((b == 0 || latency_bucket_upper_us(b - 1) <= us * 1.0000001));
  }
  CHECK(latency_bucket(1) == 0);
  CHECK(latency_bucket(uint64_t{1} << 62) == kLatencyBuckets - 1);
}

TEST_CASE("histogram quantiles pick the bucket holding the quantile") {
  std::vector<uint64_t> counts(kLatencyBuckets, 0);
  CHECK(histogram_quantile_us(counts.data(), kLatencyBuckets, 0.5) == 0);
  counts[latency_bucket(100'000)] = 90;     // 100 µs
  counts[latency_bucket(10'000'000)] = 10;  // 10 ms
  const double p50 = histogram_quantile_us(counts.data(), kLatencyBuckets, 0.5);
  const double p99 = histogram_quantile_us(counts.data(), kLatencyBuckets, 0.99);
  CHECK(p50 > 100);
  CHECK(p50 < 100 * std::exp2(0.25) + 1e-9);
  CHECK(p99 > 10'000);
  CHECK(p99 < 10'000 * std::exp2(0.25) + 1e-9);
}
