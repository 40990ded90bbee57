// compute/convert/atomic_file.h: output files that appear under their final
// name only when complete: written as NAME.tmp, fsynced, renamed, and the
// directory fsynced. An abandoned writer removes its temporary file; it
// never leaves a partial file under the final name.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace sluice::convert {

class AtomicFile {
 public:
  explicit AtomicFile(std::string path);  // creates (truncates) path + ".tmp"
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Safe to call from several threads for disjoint ranges.
  void write_at(uint64_t offset, const void* data, size_t length);
  void append(const void* data, size_t length);  // single-threaded use only
  uint64_t appended() const { return cursor_; }
  void commit();  // fsync, rename to the final name, fsync the directory

 private:
  std::string path_;
  std::string temp_;
  int fd_ = -1;
  uint64_t cursor_ = 0;
};

void write_file_atomically(const std::string& path, std::string_view contents);

}  // namespace sluice::convert
