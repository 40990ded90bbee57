// ioworker/bank_files.h: the worker's own descriptors of a container's banks
// for io_uring, opened with O_DIRECT where one aligned probe read proves it
// works, else buffered with POSIX_FADV_RANDOM (said once on stderr). It
// never reads a record itself beyond the probe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sluice {
class Container;
}

namespace sluice::ioworker {

class BankFiles {
 public:
  // `direct`: try O_DIRECT. `quiet`: do not print the fallback note.
  BankFiles(const Container& container, bool direct, bool quiet);
  ~BankFiles();
  BankFiles(const BankFiles&) = delete;
  BankFiles& operator=(const BankFiles&) = delete;

  // The descriptor of model layer `layer`'s bank; throws for a dense layer.
  int fd(uint32_t layer) const;
  bool all_direct() const { return all_direct_; }

 private:
  std::vector<int> fds_;  // by model layer; -1 for dense layers
  bool all_direct_ = true;
};

}  // namespace sluice::ioworker
