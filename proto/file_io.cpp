// proto/file_io.cpp: the POSIX implementation of the file interface.
#include "proto/file_io.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "proto/error.h"

namespace sluice {
namespace {

class PosixFile final : public RandomAccessFile {
 public:
  PosixFile(std::string path, int fd, bool direct) : path_(std::move(path)), fd_(fd), direct_(direct) {
    struct stat st {};
    if (fstat(fd_, &st) != 0) {
      const int err = errno;
      ::close(fd_);
      fail("{}: cannot stat: {}", path_, std::strerror(err));
    }
    size_ = static_cast<uint64_t>(st.st_size);
  }
  ~PosixFile() override { ::close(fd_); }
  PosixFile(const PosixFile&) = delete;
  PosixFile& operator=(const PosixFile&) = delete;

  size_t read_at(uint64_t offset, void* destination, size_t length) override {
    size_t done = 0;
    auto* out = static_cast<char*>(destination);
    while (done < length) {
      const ssize_t got = ::pread(fd_, out + done, length - done, static_cast<off_t>(offset + done));
      if (got < 0) {
        if (errno == EINTR) continue;
        fail("{}: read of {} bytes at offset {} failed: {}", path_, length, offset, std::strerror(errno));
      }
      if (got == 0) break;
      done += static_cast<size_t>(got);
    }
    return done;
  }
  uint64_t size() const override { return size_; }
  const std::string& path() const override { return path_; }
  bool direct() const override { return direct_; }

 private:
  std::string path_;
  int fd_;
  bool direct_;
  uint64_t size_ = 0;
};

class PosixFileSystem final : public FileSystem {
 public:
  std::unique_ptr<RandomAccessFile> open(const std::string& path, OpenMode mode) override {
    if (mode == OpenMode::kDirect) {
      const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
      if (fd >= 0) return std::make_unique<PosixFile>(path, fd, true);
      if (errno != EINVAL) fail("{}: cannot open: {}", path, std::strerror(errno));
    }
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
    return std::make_unique<PosixFile>(path, fd, false);
  }
  bool exists(const std::string& path) override { return ::access(path.c_str(), F_OK) == 0; }
};

}  // namespace

FileSystem& posix_file_system() {
  static PosixFileSystem instance;
  return instance;
}

void read_exact(RandomAccessFile& file, uint64_t offset, void* destination, size_t length) {
  const size_t got = file.read_at(offset, destination, length);
  if (got != length) {
    fail("{}: short read: wanted {} bytes at offset {}, got {} (file is {} bytes)", file.path(), length,
         offset, got, file.size());
  }
}

}  // namespace sluice
