// compute/serve/stop_filter.cpp: the hold-back rule. A stop string found in
// the pending text ends it there; otherwise the longest tail that is a proper
// prefix of some stop string stays pending and the rest is released.
#include "compute/serve/stop_filter.h"

#include <algorithm>

namespace sluice::serve {

StopFilter::StopFilter(std::vector<std::string> stops) : stops_(std::move(stops)) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

std::string StopFilter::push(const std::string& text) {
  if (stopped_) return {};
  pending_ += text;
  // Released text never holds the start of a stop string, so a match can
  // only begin inside the pending text.
  size_t cut = std::string::npos;
  for (const std::string& stop : stops_) {
    const size_t at = pending_.find(stop);
    if (at < cut) {
      cut = at;
      matched_ = stop;
    }
  }
  if (cut != std::string::npos) {
    stopped_ = true;
    std::string out = pending_.substr(0, cut);
    pending_.clear();
    return out;
  }
  size_t hold = 0;
  for (const std::string& stop : stops_) {
    for (size_t k = std::min(stop.size() - 1, pending_.size()); k > hold; --k) {
      if (pending_.compare(pending_.size() - k, k, stop, 0, k) == 0) {
        hold = k;
        break;
      }
    }
  }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopFilter::finish() {
  std::string out;
  if (!stopped_) out.swap(pending_);
  pending_.clear();
  return out;
}

}  // namespace sluice::serve
