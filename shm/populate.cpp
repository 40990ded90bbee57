// shm/populate.cpp: huge-page advice, populating a range in pieces on a few
// threads, and what the kernel made of it (smaps), for stats and bench.
#include "shm/populate.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "proto/error.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older C libraries lack the name
#endif

namespace sluice::shm {
namespace {

constexpr uint64_t kPage = 4096;

// How a piece was populated: by the kernel, or (it lacks the call) by hand.
enum class Method { kPopulate, kTouch };

// Populates one piece; returns the method that worked. Throws on a real failure.
Method populate_piece(uint8_t* begin, uint64_t bytes, Method method) {
  if (method == Method::kPopulate) {
    for (;;) {
      if (::madvise(begin, bytes, MADV_POPULATE_WRITE) == 0) return Method::kPopulate;
      if (errno == EINTR) continue;
      if (errno == EINVAL) break;  // a kernel older than 5.14
      fail("cache memory: cannot make {} bytes at {} resident: {} (is RAM or /dev/shm too small for the budget?)",
           bytes, static_cast<const void*>(begin), std::strerror(errno));
    }
  }
  // A write per page allocates it; the page is zero already, so is its content.
  for (uint64_t at = 0; at < bytes; at += kPage) {
    auto* word = reinterpret_cast<volatile uint8_t*>(begin + at);
    *word = *word;
  }
  return Method::kTouch;
}

std::string gib(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GiB", static_cast<double>(bytes) / double(uint64_t{1} << 30));
  return text;
}

}  // namespace

std::string Residency::huge_pages() const {
  if (huge_bytes > 0) return "2 MiB pages: " + gib(huge_bytes) + " of " + gib(bytes);
  if (!hugepage_advised) return "4 KiB pages (MADV_HUGEPAGE refused)";
  if (shmem_thp.empty()) return "4 KiB pages (shmem huge pages unknown here)";
  return "4 KiB pages (shmem_enabled is " + shmem_thp + ")";
}

std::string shmem_thp_mode(const std::string& path) {
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t open = text.find('[');
  const size_t close = text.find(']', open);
  if (open == std::string::npos || close == std::string::npos) return "";
  return text.substr(open + 1, close - open - 1);
}

uint64_t huge_mapped_bytes(const void* begin) {
  std::ifstream in("/proc/self/smaps");
  const auto target = reinterpret_cast<uintptr_t>(begin);
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    unsigned long long low = 0, high = 0;
    char dash = 0;
    std::istringstream head(line);
    // A mapping's first line: "low-high perms offset dev inode path".
    if (head >> std::hex >> low >> dash >> high && dash == '-' && line.find(':') > line.find(' ')) {
      inside = target >= low && target < high;
      continue;
    }
    if (inside && line.starts_with("ShmemPmdMapped:")) {
      return std::strtoull(line.c_str() + std::strlen("ShmemPmdMapped:"), nullptr, 10) * 1024;
    }
  }
  return 0;
}

uint64_t process_page_faults() {
  rusage usage {};
  ::getrusage(RUSAGE_SELF, &usage);
  return static_cast<uint64_t>(usage.ru_minflt) + static_cast<uint64_t>(usage.ru_majflt);
}

Residency make_resident(uint8_t* base, uint64_t bytes, uint32_t threads,
                        const std::function<void(uint64_t done, uint64_t total)>& progress, uint64_t piece) {
  const auto start = std::chrono::steady_clock::now();
  Residency r;
  r.bytes = bytes;
  r.shmem_thp = shmem_thp_mode();
  if (bytes == 0) return r;
  // madvise wants a page-aligned start; the range's own pages are what matter.
  auto* first_page = reinterpret_cast<uint8_t*>(reinterpret_cast<uintptr_t>(base) & ~(kPage - 1));
  const uint64_t advised = bytes + static_cast<uint64_t>(base - first_page);
  r.hugepage_advised = ::madvise(first_page, advised, MADV_HUGEPAGE) == 0;
  piece = std::max(kPage, piece / kPage * kPage);
  const uint64_t pieces = (advised + piece - 1) / piece;
  std::atomic<uint64_t> next{0}, done{0};
  std::atomic<bool> touched{false};
  std::exception_ptr failure;
  std::atomic<bool> failed{false};
  std::mutex failure_mutex;
  // Each worker takes the next piece until none is left or one failed.
  const auto work = [&](bool report) {
    Method method = Method::kPopulate;
    for (uint64_t p; !failed.load() && (p = next.fetch_add(1)) < pieces;) {
      const uint64_t offset = p * piece;
      const uint64_t length = std::min(piece, advised - offset);
      try {
        method = populate_piece(first_page + offset, length, method);
      } catch (...) {
        std::lock_guard lock(failure_mutex);
        if (!failure) failure = std::current_exception();
        failed = true;
        return;
      }
      if (method == Method::kTouch) touched = true;
      const uint64_t now = done.fetch_add(length) + length;
      if (report && progress) progress(std::min(now, advised), advised);
    }
  };
  std::vector<std::thread> helpers;
  for (uint32_t t = 1; t < std::max<uint32_t>(threads, 1); ++t) helpers.emplace_back(work, false);
  work(true);
  for (std::thread& t : helpers) t.join();
  if (failure) std::rethrow_exception(failure);
  if (progress) progress(advised, advised);
  r.populate = touched ? "touched" : "MADV_POPULATE_WRITE";
  r.huge_bytes = std::min(huge_mapped_bytes(base), bytes);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

}  // namespace sluice::shm
