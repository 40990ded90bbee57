// ioworker/depth_tuner.h: how many reads the worker keeps in flight, chosen
// by what the disk rewards: more reads in flight only while they move more
// bytes per second. Pure arithmetic on completion times; no I/O, no lock (the
// caller serialises calls).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <vector>

namespace sluice::ioworker {

class DepthTuner {
 public:
  // Depths tried: `floor`, twice that, ... up to `ceiling`.
  DepthTuner(uint32_t floor, uint32_t ceiling) {
    for (uint32_t d = std::max<uint32_t>(floor, 1);; d *= 2) {
      levels_.push_back(std::min(d, std::max(ceiling, floor)));
      if (d >= ceiling) break;
    }
    rates_.assign(levels_.size(), 0.0);
    depth_.store(levels_[0], std::memory_order_relaxed);
  }

  uint32_t depth() const { return depth_.load(std::memory_order_relaxed); }

  // A read of `bytes` completed at `now_ns`; `saturated`: requests were
  // waiting for a free read, so the depth was what limited the disk.
  void completed(uint64_t bytes, uint64_t now_ns, bool saturated) {
    if (window_reads_ == 0) window_start_ns_ = now_ns;
    ++window_reads_;
    window_bytes_ += bytes;
    saturated_reads_ += saturated ? 1 : 0;
    if (window_reads_ < kWindowPerDepth * levels_[level_]) return;
    // Judged only when the queue kept the depth busy for most of the window.
    const bool judged = 4 * saturated_reads_ >= 3 * window_reads_ && now_ns > window_start_ns_;
    const double rate = double(window_bytes_) / double(now_ns - window_start_ns_);
    window_reads_ = window_bytes_ = saturated_reads_ = 0;
    if (!judged) return;
    rates_[level_] = rates_[level_] > 0 ? 0.5 * rates_[level_] + 0.5 * rate : rate;
    if (level_ > 0 && rates_[level_] < kGain * rates_[level_ - 1]) {
      --level_;  // no reward for the extra reads: back off and stay a while
      hold_ = kHoldWindows;
    } else if (hold_ > 0) {
      --hold_;
    } else if (level_ + 1 < levels_.size()) {
      ++level_;  // try more in flight
    }
    depth_.store(levels_[level_], std::memory_order_relaxed);
  }

 private:
  static constexpr uint32_t kWindowPerDepth = 4;  // a window: this many reads per read in flight
  static constexpr double kGain = 1.05;           // a deeper queue must move 5% more
  static constexpr uint32_t kHoldWindows = 16;    // judged windows before probing deeper again

  std::vector<uint32_t> levels_;
  std::vector<double> rates_;  // bytes per ns, smoothed, per level
  size_t level_ = 0;
  uint32_t hold_ = 0;
  uint64_t window_start_ns_ = 0, window_reads_ = 0, window_bytes_ = 0, saturated_reads_ = 0;
  std::atomic<uint32_t> depth_{1};
};

}  // namespace sluice::ioworker
