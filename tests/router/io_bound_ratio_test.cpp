// tests/router/io_bound_ratio_test.cpp: bench decode's io_bound_ratio and
// mean read depth (compute/cli/io_bound.h) on figures worked out by hand.
#include <doctest/doctest.h>

#include "compute/cli/io_bound.h"

using sluice::cli::io_bound_ratio;
using sluice::cli::mean_read_depth;

TEST_CASE("io_bound_ratio takes the longer of a token's reads and its compute") {
  // Reads dominate: 100 MB at 1 GB/s is 0.1 s, compute 0.05 s; 10 tok/s allowed, 5 achieved.
  CHECK(io_bound_ratio(5.0, 100e6, 1e9, 0.05) == doctest::Approx(0.5));
  // Compute dominates: 10 MB at 1 GB/s is 0.01 s, compute 0.2 s; 5 tok/s allowed, 4 achieved.
  CHECK(io_bound_ratio(4.0, 10e6, 1e9, 0.2) == doctest::Approx(0.8));
  // Reads and compute overlap fully: 0.1 s each, a step of 0.125 s (8 tok/s) is 0.8 of
  // the 10 tok/s allowed. Adding the two (the former formula) made this 1.6.
  CHECK(io_bound_ratio(8.0, 200e6, 2e9, 0.1) == doctest::Approx(0.8));
  // At the limit: 50 MB at 0.5 GB/s is 0.1 s, compute 0.02 s, 10 tok/s achieved.
  CHECK(io_bound_ratio(10.0, 50e6, 0.5e9, 0.02) == doctest::Approx(1.0));
  // Nothing read: compute alone is the bound.
  CHECK(io_bound_ratio(20.0, 0.0, 1e9, 0.04) == doctest::Approx(0.8));
  // No bandwidth measured: no ratio.
  CHECK(io_bound_ratio(5.0, 100e6, 0.0, 0.05) == 0.0);
}

TEST_CASE("the mean read depth is the reads' total latency over the time any was in flight") {
  // Four reads of 2 ms each, two at a time, over 4 ms busy: 8 ms / 4 ms.
  CHECK(mean_read_depth(0.008, 0.004) == doctest::Approx(2.0));
  CHECK(mean_read_depth(0.003, 0.003) == doctest::Approx(1.0));
  CHECK(mean_read_depth(0.0, 0.0) == 0.0);
}
