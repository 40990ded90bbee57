// compute/cli/bench_disk.h: the disk's raw O_DIRECT bandwidth at a
// container's record size, shared by `bench io` and `bench decode` (which
// measures it in the same run as its decode). Reads only; never writes.
#pragma once

#include <cstdint>

namespace sluice {
class Container;
}

namespace sluice::cli {

struct RawResult {
  uint32_t threads = 0;
  uint64_t reads = 0;
  double seconds = 0;
  double gbps = 0;
};

// Random whole-record reads over the banks from `threads` threads for about
// `seconds`; `all_direct` is cleared when a bank refused O_DIRECT.
RawResult raw_reads(const Container& container, uint32_t threads, double seconds, bool& all_direct);

}  // namespace sluice::cli
