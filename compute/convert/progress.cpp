// compute/convert/progress.cpp: the stderr progress reporter. Workers only
// bump an atomic counter; whoever wins the try_lock redraws, so a slow
// terminal never stalls encoding. The ETA runs on the encoding rate since
// the first weight was encoded: the reading and codebook training before it
// advance nothing, and counting them would project hours on a short run.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>

#include <fmt/format.h>

#include "compute/convert/convert.h"

namespace sluice::convert {
namespace {

using Clock = std::chrono::steady_clock;

std::string duration_text(double seconds) {
  const auto s = static_cast<long long>(seconds + 0.5);
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, (s / 60) % 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

class StderrProgress final : public ConvertProgress {
 public:
  StderrProgress(bool terminal, std::string program) : terminal_(terminal), program_(std::move(program)) {}

  void start(uint64_t total_weights) override {
    total_ = total_weights;
    start_ = last_draw_ = Clock::now();
  }
  void phase(const std::string& what) override {
    std::lock_guard lock(mutex_);
    phase_ = what;
    draw(true);
  }
  void advance(uint64_t weights) override {
    if (done_.fetch_add(weights) == 0) {
      std::lock_guard lock(mutex_);
      first_advance_ = Clock::now();
    }
    std::unique_lock lock(mutex_, std::try_to_lock);
    if (lock.owns_lock()) draw(false);
  }
  void finish() override {
    std::lock_guard lock(mutex_);
    phase_ = "done";
    draw(true);
    if (terminal_) std::fputc('\n', stderr);
  }
  void note(const std::string& what) override {
    std::lock_guard lock(mutex_);
    fmt::print(stderr, "{}: {}\n", program_, what);
  }

 private:
  void draw(bool forced) {
    const auto now = Clock::now();
    const double since = std::chrono::duration<double>(now - last_draw_).count();
    if (!forced && since < (terminal_ ? 0.2 : 5.0)) return;
    if (!terminal_ && forced && phase_ == last_phase_) return;
    last_draw_ = now;
    last_phase_ = phase_;
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    const uint64_t done = done_.load();
    const double fraction = total_ ? static_cast<double>(done) / static_cast<double>(total_) : 1.0;
    const double rate = elapsed > 0 ? static_cast<double>(done) / elapsed : 0.0;
    // Zero until the first advance has stamped its time (under mutex_, as here).
    const double encoding = first_advance_ == Clock::time_point{}
                                ? 0.0
                                : std::chrono::duration<double>(now - first_advance_).count();
    const std::string eta = encoding > 0 && fraction < 1.0
                                ? duration_text(encoding / fraction - encoding)
                                : "-";
    if (terminal_) {
      constexpr int kWidth = 30;
      const int filled = static_cast<int>(fraction * kWidth);
      fmt::print(stderr, "\r[{}{}] {:5.1f}% {:.1f} Mw/s ETA {} {:<28}", std::string(filled, '#'),
                 std::string(kWidth - filled, '.'), 100.0 * fraction, rate / 1e6, eta, phase_);
    } else {
      fmt::print(stderr, "sluice {}: {:5.1f}% {:.1f} Mw/s elapsed {} ETA {} {}\n", program_, 100.0 * fraction, rate / 1e6,
                 duration_text(elapsed), eta, phase_);
    }
    std::fflush(stderr);
  }

  const bool terminal_;
  const std::string program_;
  uint64_t total_ = 0;
  std::atomic<uint64_t> done_{0};
  std::mutex mutex_;
  std::string phase_, last_phase_;
  Clock::time_point start_, last_draw_, first_advance_;
};

class QuietProgress final : public ConvertProgress {
 public:
  void start(uint64_t) override {}
  void phase(const std::string&) override {}
  void advance(uint64_t) override {}
  void finish() override {}
};

}  // namespace

std::unique_ptr<ConvertProgress> make_stderr_progress(bool quiet, const std::string& program) {
  if (quiet) return std::make_unique<QuietProgress>();
  return std::make_unique<StderrProgress>(::isatty(STDERR_FILENO) == 1, program);
}

}  // namespace sluice::convert
