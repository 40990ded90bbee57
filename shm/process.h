// shm/process.h: telling a live process from a dead one whose pid was reused:
// a pid plus its start time (field 22 of /proc/<pid>/stat). Reads /proc only.
#pragma once

#include <cstdint>
#include <sys/types.h>

namespace sluice::shm {

// The start time of `pid` in clock ticks since boot, or 0 when it is gone.
uint64_t process_start_time(pid_t pid);
// True while `pid` runs and is the process that started at `start_time`.
bool process_alive(pid_t pid, uint64_t start_time);
uint64_t monotonic_ns();

}  // namespace sluice::shm
