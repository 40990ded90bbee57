// proto/file_io.h: every read of a container file goes through this small
// interface, so tests can hand the reader a file that returns short reads,
// EIO or flipped bytes. It never interprets the bytes it moves.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace sluice {

class RandomAccessFile {
 public:
  virtual ~RandomAccessFile() = default;
  // Reads up to `length` bytes at `offset` into `destination`; returns the
  // number read, which is less than `length` only at end of file (or when a
  // test injects a short read). Throws Error naming the file on an I/O error.
  virtual size_t read_at(uint64_t offset, void* destination, size_t length) = 0;
  virtual uint64_t size() const = 0;
  virtual const std::string& path() const = 0;
  // True when reads bypass the page cache (O_DIRECT was accepted).
  virtual bool direct() const = 0;
};

enum class OpenMode { kBuffered, kDirect };

class FileSystem {
 public:
  virtual ~FileSystem() = default;
  // Throws Error naming the path when the file cannot be opened. kDirect
  // falls back to a buffered open when the filesystem refuses O_DIRECT;
  // direct() on the result tells which happened.
  virtual std::unique_ptr<RandomAccessFile> open(const std::string& path, OpenMode mode) = 0;
  virtual bool exists(const std::string& path) = 0;
};

// The real filesystem (pread on POSIX descriptors). Stateless, so one shared
// instance serves every caller.
FileSystem& posix_file_system();

// Reads exactly `length` bytes or throws Error naming the file and offset.
void read_exact(RandomAccessFile& file, uint64_t offset, void* destination, size_t length);

}  // namespace sluice
