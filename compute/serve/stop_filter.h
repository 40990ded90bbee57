// compute/serve/stop_filter.h: generated text on its way to a client, held
// back while its tail could still begin a stop string, cut where a stop
// string begins. The text it is given is whole UTF-8 (the tokenizer's
// StreamingDecoder holds split characters); it never releases a byte of a
// stop string.
#pragma once

#include <string>
#include <vector>

namespace sluice::serve {

class StopFilter {
 public:
  explicit StopFilter(std::vector<std::string> stops);

  // Adds `text`; returns what is now safe to send (possibly empty). After a
  // stop string is found, stopped() is true and later text is ignored.
  std::string push(const std::string& text);
  // At the end of generation: whatever was held back (nothing after a stop).
  std::string finish();
  bool stopped() const { return stopped_; }
  // The stop string that was found (the earliest in the text); empty before.
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;  // received, not yet released
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace sluice::serve
