// compute/convert/atomic_file.cpp: POSIX temp-file + rename.
#include "compute/convert/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "proto/error.h"

namespace sluice::convert {
namespace {

void fsync_directory_of(const std::string& path) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail("{}: cannot open directory to sync: {}", dir, std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) fail("{}: fsync failed: {}", dir, std::strerror(err));
}

}  // namespace

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)), temp_(path_ + ".tmp") {
  fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("{}: cannot create: {}", temp_, std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(temp_.c_str());
  }
}

void AtomicFile::write_at(uint64_t offset, const void* data, size_t length) {
  const auto* bytes = static_cast<const char*>(data);
  size_t done = 0;
  while (done < length) {
    const ssize_t n = ::pwrite(fd_, bytes + done, length - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("{}: write of {} bytes at offset {} failed: {}", temp_, length, offset, std::strerror(errno));
    }
    done += static_cast<size_t>(n);
  }
}

void AtomicFile::append(const void* data, size_t length) {
  write_at(cursor_, data, length);
  cursor_ += length;
}

void AtomicFile::commit() {
  if (::fsync(fd_) != 0) fail("{}: fsync failed: {}", temp_, std::strerror(errno));
  if (::close(fd_) != 0) {
    fd_ = -1;
    fail("{}: close failed: {}", temp_, std::strerror(errno));
  }
  fd_ = -1;
  if (::rename(temp_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp_.c_str());
    fail("{}: cannot rename to {}: {}", temp_, path_, std::strerror(err));
  }
  fsync_directory_of(path_);
}

void write_file_atomically(const std::string& path, std::string_view contents) {
  AtomicFile file(path);
  file.append(contents.data(), contents.size());
  file.commit();
}

}  // namespace sluice::convert
