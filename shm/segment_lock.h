// shm/segment_lock.h: the segment's robust process-shared mutex. A holder
// killed inside the critical section leaves pin counts possibly half-updated;
// the next locker gets EOWNERDEAD, rebuilds every slot's pin count from the
// pin lists (the source of truth) and carries on. Never hold it across I/O.
#pragma once

#include <pthread.h>

namespace sluice::shm {

class Segment;

// Initialises the mutex in a fresh segment (PTHREAD_PROCESS_SHARED, ROBUST).
void init_segment_mutex(pthread_mutex_t& mutex);

// Recomputes slot pin counts from the pin lists of active clients. Caller
// holds the lock.
void rebuild_pin_counts(Segment& segment);

class SegmentLock {
 public:
  explicit SegmentLock(Segment& segment);
  ~SegmentLock();
  SegmentLock(const SegmentLock&) = delete;
  SegmentLock& operator=(const SegmentLock&) = delete;

 private:
  Segment& segment_;
};

}  // namespace sluice::shm
