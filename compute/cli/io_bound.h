// compute/cli/io_bound.h: io_bound_ratio, how close a decode came to the
// limit that its reads and its compute set when the two overlap. Arithmetic
// on figures measured elsewhere; it measures nothing itself.
#pragma once

#include <algorithm>

namespace sluice::cli {

// Reads overlap compute (lookahead, the held next batch), so a token takes
// at least the longer of: its bytes read at the disk's bandwidth, and its
// compute. Achieved tok/s over the tok/s that bound allows: 1 means the
// longer side is the only limit. 0 without a bandwidth or a bound.
inline double io_bound_ratio(double tok_per_s, double bytes_read_per_token, double disk_bytes_per_s,
                             double compute_seconds_per_token) {
  if (disk_bytes_per_s <= 0) return 0.0;
  const double bound_seconds =
      std::max(bytes_read_per_token / disk_bytes_per_s, compute_seconds_per_token);
  return tok_per_s * bound_seconds;
}

// Mean reads in flight while any was: total read latency over the time the
// disk was busy (Little's law). 0 when nothing was read.
inline double mean_read_depth(double read_seconds_total, double read_busy_seconds) {
  return read_busy_seconds > 0 ? read_seconds_total / read_busy_seconds : 0.0;
}

}  // namespace sluice::cli
