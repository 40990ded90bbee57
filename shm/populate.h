// shm/populate.h: making a fresh shared mapping resident before it is used:
// huge pages asked for where the kernel gives them to shmem, then every page
// allocated and zeroed (MADV_POPULATE_WRITE, or one write per page on a
// kernel without it), so no read or compute ever faults on the cache.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace sluice::shm {

struct Residency {
  std::string populate;         // "MADV_POPULATE_WRITE" or "touched" (a write per page)
  std::string shmem_thp;        // shmem_enabled's mode ("advise", "never", ...), "" when unknown
  bool hugepage_advised = false;  // madvise(MADV_HUGEPAGE) accepted
  uint64_t huge_bytes = 0;      // of the range, mapped in 2 MiB pages after populating
  uint64_t bytes = 0;           // the range populated
  double seconds = 0;           // the whole pass
  // "2 MiB pages: 15.9 GiB of 16.0 GiB" or "4 KiB pages (shmem_enabled is never)" and so on.
  std::string huge_pages() const;
};

// The bracketed mode of a transparent_hugepage shmem_enabled file; "" when
// it cannot be read or holds no bracket. `path` is the real file unless a test passes one.
std::string shmem_thp_mode(const std::string& path = "/sys/kernel/mm/transparent_hugepage/shmem_enabled");

// Bytes of [begin, begin + bytes) that /proc/self/smaps shows mapped by PMD
// (ShmemPmdMapped of the mapping that holds `begin`); 0 when unknown.
uint64_t huge_mapped_bytes(const void* begin);

// This process's page faults so far (minor and major, getrusage): what a
// decode that faults on fresh memory shows, without hardware counters.
uint64_t process_page_faults();

// Makes [base, base + bytes) of a shared mapping resident, `threads` threads
// splitting it in pieces of `piece` bytes. `progress(done, total)` runs on the
// calling thread about every `piece` bytes (and once at the end) when set.
// Throws Error naming the range when the kernel cannot supply the memory
// (populating fails with ENOMEM or EFAULT) rather than let a read die on SIGBUS.
Residency make_resident(uint8_t* base, uint64_t bytes, uint32_t threads,
                        const std::function<void(uint64_t done, uint64_t total)>& progress = {},
                        uint64_t piece = uint64_t{256} << 20);

}  // namespace sluice::shm
