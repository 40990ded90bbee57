// tests/shm/populate_test.cpp: making a shared mapping resident (every page
// present afterwards, writes to it fault no more, progress reaches the end,
// work split across threads and pieces), and reading shmem_enabled's mode.
#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

#include "shm/populate.h"

using namespace sluice::shm;

namespace {

constexpr uint64_t kPage = 4096;

// A fresh anonymous shared mapping: shmem, as the embedded cache's segment.
struct SharedMapping {
  explicit SharedMapping(uint64_t bytes) : bytes(bytes) {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    REQUIRE(p != MAP_FAILED);
    base = static_cast<uint8_t*>(p);
  }
  ~SharedMapping() { ::munmap(base, bytes); }
  uint64_t resident_pages() const {
    std::vector<unsigned char> present(bytes / kPage);
    REQUIRE(::mincore(base, bytes, present.data()) == 0);
    uint64_t n = 0;
    for (unsigned char c : present) n += c & 1;
    return n;
  }
  uint8_t* base = nullptr;
  uint64_t bytes = 0;
};

std::string write_temp(const std::string& text) {
  char path[] = "/tmp/sluice_thp_XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  ::close(fd);
  std::ofstream(path) << text;
  return path;
}

}  // namespace

TEST_CASE("a fresh shared mapping is wholly resident afterwards, and writing it faults no more") {
  const uint64_t bytes = uint64_t{16} << 20;
  SharedMapping mapping(bytes);
  REQUIRE(mapping.resident_pages() == 0);
  std::vector<std::pair<uint64_t, uint64_t>> calls;
  const Residency r = make_resident(mapping.base, bytes, 2,
                                    [&](uint64_t done, uint64_t total) { calls.emplace_back(done, total); },
                                    uint64_t{1} << 20);
  CHECK(mapping.resident_pages() == bytes / kPage);
  CHECK(r.bytes == bytes);
  CHECK((r.populate == "MADV_POPULATE_WRITE" || r.populate == "touched"));
  CHECK(r.huge_bytes <= bytes);
  // Progress on the caller's thread, never backwards, ending at the whole range.
  REQUIRE(!calls.empty());
  for (size_t i = 1; i < calls.size(); ++i) CHECK(calls[i].first >= calls[i - 1].first);
  CHECK(calls.back() == std::make_pair(bytes, bytes));
  // Untouched, every page would fault once (4096 of them); resident, none does.
  const uint64_t before = process_page_faults();
  for (uint64_t at = 0; at < bytes; at += kPage) mapping.base[at] = 1;
  CHECK(process_page_faults() - before < 64);
}

TEST_CASE("a range that is not a whole number of pieces, or starts inside a page, is covered to its end") {
  const uint64_t bytes = uint64_t{3} << 20;
  SharedMapping mapping(bytes);
  // Starts 100 bytes into the first page and ends a page short of the mapping.
  const Residency r = make_resident(mapping.base + 100, bytes - kPage - 100, 3, {}, 5 * kPage);
  CHECK(mapping.resident_pages() == bytes / kPage - 1);
  CHECK(r.bytes == bytes - kPage - 100);
}

TEST_CASE("an empty range does nothing") {
  const Residency r = make_resident(nullptr, 0, 2);
  CHECK(r.bytes == 0);
  CHECK(r.huge_bytes == 0);
}

TEST_CASE("shmem_enabled's mode is the bracketed word; an unreadable or unbracketed file gives none") {
  const std::string never = write_temp("always within_size advise [never] deny force\n");
  CHECK(shmem_thp_mode(never) == "never");
  const std::string advise = write_temp("always within_size [advise] never deny force\n");
  CHECK(shmem_thp_mode(advise) == "advise");
  const std::string plain = write_temp("advise\n");
  CHECK(shmem_thp_mode(plain).empty());
  CHECK(shmem_thp_mode("/nonexistent/shmem_enabled").empty());
  for (const std::string& path : {never, advise, plain}) std::remove(path.c_str());
}

TEST_CASE("the huge-page line says what the kernel did, and why not when it did not") {
  Residency r;
  r.bytes = uint64_t{4} << 30;
  r.hugepage_advised = true;
  r.shmem_thp = "never";
  CHECK(r.huge_pages() == "4 KiB pages (shmem_enabled is never)");
  r.huge_bytes = uint64_t{2} << 30;
  CHECK(r.huge_pages() == "2 MiB pages: 2.00 GiB of 4.00 GiB");
  r.huge_bytes = 0;
  r.hugepage_advised = false;
  CHECK(r.huge_pages() == "4 KiB pages (MADV_HUGEPAGE refused)");
}
