// compute/serve/metrics.h: the server's counters, written by the HTTP threads
// and the engine worker, read by /metrics (Prometheus text) and
// /sluice/stats (JSON for the web page). One mutex; never touches the engine.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "compute/model/expert_source.h"
#include "shm/stats.h"

namespace sluice::serve {

// What one finished generation adds.
struct GenerationTotals {
  std::string finish_reason;  // stop, length or cancelled
  uint32_t prompt_tokens = 0;
  uint32_t cached_tokens = 0;
  uint32_t completion_tokens = 0;
  double prefill_seconds = 0;
  double decode_seconds = 0;
};

class Metrics {
 public:
  Metrics(uint32_t moe_layers, uint32_t experts);

  void count_request(const std::string& endpoint, int status);
  void add_generation(const GenerationTotals& totals);
  void set_queue(size_t queued, size_t running);
  // The engine's cumulative expert statistics and lookahead scores, as the
  // worker last read them.
  void set_experts(const ExpertSourceStats& experts, const std::optional<shm::GuessStats>& guesses);
  // One token's routing: experts chosen per MoE layer.
  void add_routing(size_t moe_layer, const std::vector<uint32_t>& experts);
  void set_decode_rate(double tokens_per_second);

  std::string prometheus() const;
  nlohmann::ordered_json stats_json() const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  std::map<std::string, uint64_t> generations_;  // by finish reason
  uint64_t prompt_tokens_ = 0, cached_tokens_ = 0, completion_tokens_ = 0;
  double prefill_seconds_ = 0, decode_seconds_ = 0;
  double decode_rate_ = 0;  // tok/s of the running or last generation
  size_t queued_ = 0;
  size_t running_ = 0;
  ExpertSourceStats experts_;
  std::optional<shm::GuessStats> guesses_;
  uint32_t experts_per_layer_;
  std::vector<std::vector<uint64_t>> heat_;  // [moe layer][expert]: times chosen
};

}  // namespace sluice::serve
