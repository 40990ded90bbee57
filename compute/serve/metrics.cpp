// compute/serve/metrics.cpp: the counters as Prometheus text exposition
// (version 0.0.4) and as JSON. Names are sluice_* with units in the name.
#include "compute/serve/metrics.h"

#include <fmt/format.h>

namespace sluice::serve {

Metrics::Metrics(uint32_t moe_layers, uint32_t experts)
    : experts_per_layer_(experts), heat_(moe_layers, std::vector<uint64_t>(experts, 0)) {}

void Metrics::count_request(const std::string& endpoint, int status) {
  const std::lock_guard lock(mutex_);
  ++requests_[{endpoint, status}];
}

void Metrics::add_generation(const GenerationTotals& totals) {
  const std::lock_guard lock(mutex_);
  ++generations_[totals.finish_reason];
  prompt_tokens_ += totals.prompt_tokens;
  cached_tokens_ += totals.cached_tokens;
  completion_tokens_ += totals.completion_tokens;
  prefill_seconds_ += totals.prefill_seconds;
  decode_seconds_ += totals.decode_seconds;
}

void Metrics::set_queue(size_t queued, size_t running) {
  const std::lock_guard lock(mutex_);
  queued_ = queued;
  running_ = running;
}

void Metrics::set_experts(const ExpertSourceStats& experts,
                          const std::optional<shm::GuessStats>& guesses) {
  const std::lock_guard lock(mutex_);
  experts_ = experts;
  guesses_ = guesses;
}

void Metrics::add_routing(size_t moe_layer, const std::vector<uint32_t>& experts) {
  const std::lock_guard lock(mutex_);
  if (moe_layer >= heat_.size()) return;
  for (uint32_t e : experts)
    if (e < experts_per_layer_) ++heat_[moe_layer][e];
}

void Metrics::set_decode_rate(double tokens_per_second) {
  const std::lock_guard lock(mutex_);
  decode_rate_ = tokens_per_second;
}

std::string Metrics::prometheus() const {
  const std::lock_guard lock(mutex_);
  std::string out;
  auto metric = [&out](const char* name, const char* type, const char* help) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  };
  // A metric without labels: its header and its one sample line.
  auto single = [&](const char* name, const char* type, const char* help,
                    const std::string& value) {
    metric(name, type, help);
    out += fmt::format("{} {}\n", name, value);
  };
  metric("sluice_requests_total", "counter", "HTTP requests answered, by endpoint and status");
  for (const auto& [key, count] : requests_)
    out += fmt::format("sluice_requests_total{{endpoint=\"{}\",status=\"{}\"}} {}\n", key.first,
                       key.second, count);
  metric("sluice_generations_total", "counter", "generations run by the engine, by finish reason");
  for (const auto& [finish, count] : generations_)
    out += fmt::format("sluice_generations_total{{finish_reason=\"{}\"}} {}\n", finish, count);
  single("sluice_prompt_tokens_total", "counter", "prompt tokens of finished generations",
         fmt::format("{}", prompt_tokens_));
  single("sluice_prompt_cached_tokens_total", "counter",
         "prompt tokens reused from the previous request's state (not prefilled)",
         fmt::format("{}", cached_tokens_));
  single("sluice_generated_tokens_total", "counter", "tokens generated",
         fmt::format("{}", completion_tokens_));
  single("sluice_prefill_seconds_total", "counter", "time spent prefilling prompts",
         fmt::format("{:.6f}", prefill_seconds_));
  single("sluice_decode_seconds_total", "counter", "time spent generating tokens",
         fmt::format("{:.6f}", decode_seconds_));
  single("sluice_decode_tokens_per_second", "gauge",
         "decode rate of the running or last generation", fmt::format("{:.3f}", decode_rate_));
  single("sluice_queue_depth", "gauge", "requests waiting for the engine",
         fmt::format("{}", queued_));
  single("sluice_requests_processing", "gauge", "requests the engine is generating for",
         fmt::format("{}", running_));
  single("sluice_expert_requests_total", "counter", "routed experts the model asked for",
         fmt::format("{}", experts_.requests));
  single("sluice_expert_hits_total", "counter", "routed experts served without reading the disk",
         fmt::format("{}", experts_.hits));
  single("sluice_expert_hit_rate", "gauge", "expert hits over expert requests since start",
         fmt::format("{:.6f}",
                     experts_.requests ? double(experts_.hits) / double(experts_.requests) : 0.0));
  single("sluice_expert_reads_total", "counter", "expert records read from disk",
         fmt::format("{}", experts_.reads));
  single("sluice_expert_bytes_read_total", "counter", "bytes of expert records read from disk",
         fmt::format("{}", experts_.bytes_read));
  if (guesses_) {
    single("sluice_lookahead_precision_at_1", "gauge",
           "share of the router's first guesses that were a real expert",
           fmt::format("{:.6f}", guesses_->precision_at_1()));
    single("sluice_lookahead_recall", "gauge", "share of the real experts the router guessed",
           fmt::format("{:.6f}", guesses_->recall()));
  }
  return out;
}

nlohmann::ordered_json Metrics::stats_json() const {
  const std::lock_guard lock(mutex_);
  nlohmann::ordered_json out = {
      {"generations", generations_},
      {"prompt_tokens", prompt_tokens_},
      {"cached_tokens", cached_tokens_},
      {"generated_tokens", completion_tokens_},
      {"decode_seconds", decode_seconds_},
      {"decode_tokens_per_second", decode_rate_},
      {"queue_depth", queued_},
      {"processing", running_},
      {"experts",
       {{"requests", experts_.requests},
        {"hits", experts_.hits},
        {"reads", experts_.reads},
        {"bytes_read", experts_.bytes_read}}},
      {"lookahead", guesses_
                        ? nlohmann::ordered_json{{"precision_at_1", guesses_->precision_at_1()},
                                                 {"recall", guesses_->recall()}}
                        : nlohmann::ordered_json(nullptr)},
      {"heat", heat_}};
  return out;
}

}  // namespace sluice::serve
