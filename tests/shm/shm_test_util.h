// tests/shm/shm_test_util.h: helpers for the cache tests: unique instance
// names and an RAII guard that removes a named segment from /dev/shm even
// when the test fails, plus forking a child that reports through its exit code.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/interprocess/shared_memory_object.hpp>

namespace sluice::testing {

inline std::string unique_instance(const std::string& tag) {
  static int counter = 0;
  return "t" + std::to_string(::getpid()) + "-" + tag + "-" + std::to_string(counter++);
}

// Removes /dev/shm/sluice-<instance> on scope exit, whatever happened.
class ShmGuard {
 public:
  explicit ShmGuard(std::string instance) : instance_(std::move(instance)) { remove(); }
  ~ShmGuard() { remove(); }
  ShmGuard(const ShmGuard&) = delete;
  ShmGuard& operator=(const ShmGuard&) = delete;
  const std::string& instance() const { return instance_; }
  std::string name() const { return "sluice-" + std::to_string(::geteuid()) + "-" + instance_; }
  std::string path() const { return "/dev/shm/" + name(); }

 private:
  void remove() { boost::interprocess::shared_memory_object::remove(name().c_str()); }
  std::string instance_;
};

// Runs `body` in a forked child; the child exits with its return value
// (exceptions become 99) through _exit, so no parent destructor runs twice.
inline pid_t fork_child(const std::function<int()>& body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    int code = 99;
    try {
      code = body();
    } catch (...) {
      code = 99;
    }
    ::_exit(code);
  }
  return pid;
}

inline int wait_child(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return -1;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + WTERMSIG(status);
}

}  // namespace sluice::testing
