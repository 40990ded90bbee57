// tests/proto/faulty_file_system.h: a FileSystem test double wrapping the
// real one that injects EIO, short reads and flipped bytes into reads of
// chosen files at chosen offsets. It never changes the files on disk.
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "proto/error.h"
#include "proto/file_io.h"

namespace sluice::testing {

enum class Fault { kEio, kShortRead, kFlip };

struct FaultRule {
  std::string path_suffix;  // applies to files whose path ends with this
  Fault fault = Fault::kEio;
  uint64_t offset = 0;  // the fault fires on reads covering this file offset
};

class FaultyFileSystem final : public FileSystem {
 public:
  void add(FaultRule rule) { rules_.push_back(std::move(rule)); }
  // Files opened before a rule was added still see it.
  std::unique_ptr<RandomAccessFile> open(const std::string& path, OpenMode mode) override {
    return std::make_unique<FaultyFile>(posix_file_system().open(path, mode), rules_);
  }
  bool exists(const std::string& path) override { return posix_file_system().exists(path); }

 private:
  class FaultyFile final : public RandomAccessFile {
   public:
    FaultyFile(std::unique_ptr<RandomAccessFile> inner, const std::vector<FaultRule>& rules)
        : inner_(std::move(inner)), rules_(rules) {}
    size_t read_at(uint64_t offset, void* destination, size_t length) override {
      size_t got = inner_->read_at(offset, destination, length);
      for (const FaultRule& rule : rules_) {
        const std::string& p = inner_->path();
        if (p.size() < rule.path_suffix.size() || !p.ends_with(rule.path_suffix)) continue;
        if (rule.offset < offset || rule.offset >= offset + got) continue;
        switch (rule.fault) {
          case Fault::kEio:
            fail("{}: read of {} bytes at offset {} failed: Input/output error", p, length, offset);
          case Fault::kShortRead:
            got = static_cast<size_t>(rule.offset - offset);
            break;
          case Fault::kFlip:
            static_cast<uint8_t*>(destination)[rule.offset - offset] ^= 0x01;
            break;
        }
      }
      return got;
    }
    uint64_t size() const override { return inner_->size(); }
    const std::string& path() const override { return inner_->path(); }
    bool direct() const override { return inner_->direct(); }

   private:
    std::unique_ptr<RandomAccessFile> inner_;
    const std::vector<FaultRule>& rules_;
  };

  std::vector<FaultRule> rules_;
};

}  // namespace sluice::testing
