// shm/segment_lock.h: the segment's robust process-shared mutex. A holder
// killed inside the critical section leaves pin counts possibly half-updated;
// the next locker gets EOWNERDEAD, rebuilds every slot's pin count from the
// pin lists (the source of truth) and carries on. Never hold it across I/O.
// A holder that is stopped (SIGSTOP, a debugger) is not dead, so clients wait
// for it in slices and may give up; only the owner waits without a limit.
#pragma once

#include <pthread.h>

#include <chrono>
#include <functional>

namespace sluice::shm {

class Segment;

// Initialises the mutex in a fresh segment (PTHREAD_PROCESS_SHARED, ROBUST).
void init_segment_mutex(pthread_mutex_t& mutex);

// Recomputes slot pin counts from the pin lists of active clients. Caller
// holds the lock.
void rebuild_pin_counts(Segment& segment);

class SegmentLock {
 public:
  // Called between slices of a wait with the time waited so far; it throws
  // to give up (an owner gone or stopped too long).
  using WaitCheck = std::function<void(std::chrono::nanoseconds waited)>;
  static constexpr std::chrono::milliseconds kWaitSlice{100};

  explicit SegmentLock(Segment& segment);
  SegmentLock(Segment& segment, const WaitCheck& check);
  ~SegmentLock();
  SegmentLock(const SegmentLock&) = delete;
  SegmentLock& operator=(const SegmentLock&) = delete;

 private:
  Segment& segment_;
};

}  // namespace sluice::shm
