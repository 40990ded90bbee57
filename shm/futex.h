// shm/futex.h: wait and wake on a 32-bit word of shared memory (process-shared
// futexes, so no FUTEX_PRIVATE_FLAG). Waits always carry a timeout: a waiter
// must wake to notice that the process it waits for has died.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace sluice::shm {

// Sleeps while `word` holds `expected`, at most `timeout`. Returns when woken,
// when the value differs, on a signal or on the timeout; callers re-check.
void futex_wait(std::atomic<uint32_t>& word, uint32_t expected, std::chrono::nanoseconds timeout);
void futex_wake_all(std::atomic<uint32_t>& word);
// Bumps `word` and wakes everyone sleeping on it.
void futex_bump(std::atomic<uint32_t>& word);

}  // namespace sluice::shm
