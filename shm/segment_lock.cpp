// shm/segment_lock.cpp: the robust mutex and its repair after a holder died.
#include "shm/segment_lock.h"

#include <cerrno>
#include <cstring>
#include <ctime>
#include <vector>

#include "proto/error.h"
#include "shm/segment.h"

namespace sluice::shm {

void init_segment_mutex(pthread_mutex_t& mutex) {
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  const int err = pthread_mutex_init(&mutex, &attr);
  pthread_mutexattr_destroy(&attr);
  if (err != 0) fail("cache segment: cannot initialise its lock: {}", std::strerror(err));
}

void rebuild_pin_counts(Segment& segment) {
  const Geometry& g = segment.geometry();
  std::vector<uint32_t> counts(g.slot_count, 0);
  for (uint32_t c = 0; c < g.max_clients; ++c) {
    if (segment.client(c).state.load(std::memory_order_relaxed) != static_cast<uint32_t>(ClientState::kActive)) continue;
    for (uint32_t& pin : segment.client_pins(c)) {
      if (pin == kNoSlot) continue;
      if (pin - 1 >= g.slot_count) {
        pin = kNoSlot;  // scribbled: drop it rather than count a slot that does not exist
        continue;
      }
      ++counts[pin - 1];
    }
  }
  for (uint32_t s = 0; s < g.slot_count; ++s) segment.slot(s).pins = counts[s];
}

namespace {

// EOWNERDEAD: a holder died mid-update and pins may be half-counted. Pin lists
// are the truth (a pin is listed before it is counted), so recount from them.
void took_lock(Segment& segment, int err) {
  pthread_mutex_t& mutex = segment.header().lock;
  if (err == EOWNERDEAD) {
    rebuild_pin_counts(segment);
    pthread_mutex_consistent(&mutex);
  } else if (err != 0) {
    fail("cache segment {}: cannot take its lock: {}", segment.name(), std::strerror(err));
  }
}

timespec monotonic_after(std::chrono::nanoseconds delay) {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  const long long ns = now.tv_nsec + delay.count();
  return timespec{now.tv_sec + static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
}

}  // namespace

SegmentLock::SegmentLock(Segment& segment) : segment_(segment) {
  took_lock(segment, pthread_mutex_lock(&segment.header().lock));
}

SegmentLock::SegmentLock(Segment& segment, const WaitCheck& check) : segment_(segment) {
  pthread_mutex_t& mutex = segment.header().lock;
  std::chrono::nanoseconds waited{0};
  for (;;) {
    const timespec until = monotonic_after(kWaitSlice);
    const int err = pthread_mutex_clocklock(&mutex, CLOCK_MONOTONIC, &until);
    if (err != ETIMEDOUT) {
      took_lock(segment, err);
      return;
    }
    waited += kWaitSlice;
    check(waited);
  }
}

SegmentLock::~SegmentLock() { pthread_mutex_unlock(&segment_.header().lock); }

}  // namespace sluice::shm
