// ioworker/bank_files.cpp: O_DIRECT open plus a 4 KiB probe read per bank
// (an open can succeed where reads are refused), with the buffered fallback.
#include "ioworker/bank_files.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

#include "proto/aligned_buffer.h"
#include "proto/container.h"
#include "proto/error.h"

namespace sluice::ioworker {
namespace {

// The probe: one aligned 4 KiB read at offset 0 (every bank holds ≥ 1 record).
bool probe_direct(int fd) {
  AlignedBuffer buffer(kRecordAlign, kRecordAlign);
  return ::pread(fd, buffer.data(), kRecordAlign, 0) == static_cast<ssize_t>(kRecordAlign);
}

}  // namespace

BankFiles::BankFiles(const Container& container, bool direct, bool quiet) {
  bool told = false;
  try {
    for (const MoeLayerInfo& info : container.moe_layers()) {
      if (fds_.size() <= info.layer) fds_.resize(info.layer + 1, -1);
      const std::string path = container.dir() + "/" + info.file;
      int fd = -1;
      if (direct) {
        fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
        if (fd >= 0 && !probe_direct(fd)) {
          ::close(fd);
          fd = -1;
        }
      }
      if (fd < 0) {
        const int open_errno = errno;
        if (direct && !told && !quiet) {
          std::fprintf(stderr, "sluice-io: O_DIRECT refused on %s (%s); reading through the page cache\n",
                       path.c_str(), std::strerror(open_errno));
          told = true;
        }
        all_direct_ = false;
        fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
        ::posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
      }
      fds_[info.layer] = fd;
    }
  } catch (...) {
    for (int fd : fds_) {
      if (fd >= 0) ::close(fd);
    }
    throw;
  }
  if (container.moe_layers().empty()) all_direct_ = false;
}

BankFiles::~BankFiles() {
  for (int fd : fds_) {
    if (fd >= 0) ::close(fd);
  }
}

int BankFiles::fd(uint32_t layer) const {
  if (layer >= fds_.size() || fds_[layer] < 0) fail("layer {} has no expert bank", layer);
  return fds_[layer];
}

}  // namespace sluice::ioworker
