// compute/cli/interrupt.h: Ctrl-C as a request a command polls between
// tokens, not a kill. While an InterruptScope lives, SIGINT sets a flag;
// the command decides what stopping means (end the run with its summary,
// or stop only the current reply).
#pragma once

#include <csignal>

namespace sluice::cli {

class InterruptScope {
 public:
  // kOnce: the handler resets itself, so a second Ctrl-C ends the process
  // the usual way; kEveryTime: each Ctrl-C only sets the flag again.
  enum class Repeat { kOnce, kEveryTime };
  explicit InterruptScope(Repeat repeat) {
    struct sigaction action {};
    action.sa_handler = [](int) { flag() = 1; };
    if (repeat == Repeat::kOnce) action.sa_flags = SA_RESETHAND;
    ::sigaction(SIGINT, &action, &previous_);
  }
  ~InterruptScope() { ::sigaction(SIGINT, &previous_, nullptr); }
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;

  static bool requested() { return flag() != 0; }
  static void clear() { flag() = 0; }

 private:
  static volatile std::sig_atomic_t& flag() {
    static volatile std::sig_atomic_t interrupted = 0;
    return interrupted;
  }
  struct sigaction previous_ {};
};

}  // namespace sluice::cli
