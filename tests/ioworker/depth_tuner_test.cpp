// tests/ioworker/depth_tuner_test.cpp: the read depth follows what a
// simulated disk rewards: deeper while bytes per second grow, back when they
// stop, unchanged while the queue never keeps it busy. Simulated clock only.
#include "ioworker/depth_tuner.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <map>

using sluice::ioworker::DepthTuner;

namespace {

// Drives `reads` completions of 1 MB against a disk whose throughput grows
// with the reads in flight up to `knee`; returns how often each depth was in use.
std::map<uint32_t, int> drive(DepthTuner& tuner, uint32_t knee, int reads, bool saturated) {
  std::map<uint32_t, int> used;
  uint64_t now = 1;
  for (int i = 0; i < reads; ++i) {
    const uint32_t depth = tuner.depth();
    const double bytes_per_ns = 0.1 * std::min(depth, knee);  // 0.1 GB/s per read in flight
    now += static_cast<uint64_t>(1e6 / bytes_per_ns);
    tuner.completed(1'000'000, now, saturated);
    ++used[depth];
  }
  return used;
}

}  // namespace

TEST_CASE("the depth grows while the disk rewards it and settles at its knee") {
  DepthTuner tuner(4, 32);
  CHECK(tuner.depth() == 4);
  const auto used = drive(tuner, 16, 40000, true);
  // It tried 32, found nothing more there, and spends most reads at 16.
  CHECK(used.count(32) == 1);
  CHECK(used.at(16) > used.at(32));
  CHECK(used.at(16) > 20000);
}

TEST_CASE("a disk that gains nothing from depth keeps the floor most of the time") {
  DepthTuner tuner(4, 32);
  const auto used = drive(tuner, 4, 20000, true);
  CHECK(used.at(4) > 15000);
  CHECK(used.count(16) == 0);
}

TEST_CASE("windows where the queue never waited do not move the depth") {
  DepthTuner tuner(4, 32);
  drive(tuner, 32, 5000, false);
  CHECK(tuner.depth() == 4);
}

TEST_CASE("a ceiling at the floor (reader threads) never moves") {
  DepthTuner tuner(4, 4);
  drive(tuner, 32, 5000, true);
  CHECK(tuner.depth() == 4);
}
