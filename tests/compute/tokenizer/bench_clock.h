// tests/compute/tokenizer/bench_clock.h: what the tokenizer benchmarks share:
// the process's CPU time (the machine is shared, so wall time overstates)
// and the median of their interleaved runs.
#pragma once

#include <time.h>

#include <algorithm>
#include <vector>

namespace sluice::testing {

inline double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
}

// The upper median of a non-empty set of runs.
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace sluice::testing
