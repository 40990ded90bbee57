// compute/model/routing_tap.h: what watches the model's routing without
// changing it: lookahead (the mailbox publisher, and in embedded mode the
// router thread itself) and routing traces. One RoutingSession per engine,
// for as long as it generates; it only reads what the MoE hook shows, so the
// model's output cannot depend on it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "compute/model/engine.h"
#include "router/lookahead.h"
#include "router/predictor.h"
#include "router/trace.h"
#include "shm/stats.h"

namespace sluice {

class CachedExpertSource;

struct RoutingOptions {
  // Next-layer experts to prefetch per token; 0: off. Needs the expert
  // cache: embedded mode runs the router as a thread, attached mode
  // publishes for the sluice-router of the group.
  uint32_t lookahead = 0;
  bool in_prefill = false;  // also publish prefill chunks (bench decode measures it)
  std::string trace_out;    // write the routing as JSON lines (router/trace.h)
};

class RoutingSession {
 public:
  // Installs itself as `engine`'s MoE hook until destroyed. Throws Error when
  // the trace file cannot be written.
  RoutingSession(Engine& engine, const RoutingOptions& options);
  ~RoutingSession();
  RoutingSession(const RoutingSession&) = delete;
  RoutingSession& operator=(const RoutingSession&) = delete;

  // Stops the embedded router (rethrowing what stopped it, if anything) and
  // closes the trace. Generation must be over.
  void finish();

  // True when this process runs the router (embedded mode with lookahead).
  bool runs_router() const { return lookahead_ != nullptr; }
  // The guesses scored so far in this engine's cache segment, summed over layers.
  shm::GuessStats guesses() const;

 private:
  void on_moe(uint32_t layer, size_t moe_index, uint32_t tokens, std::span<const float> input);

  Engine& engine_;
  uint32_t moe_layers_;
  CachedExpertSource* cache_ = nullptr;
  std::optional<router::TraceWriter> trace_;
  std::optional<router::Publisher> publisher_;
  bool publish_prefill_ = false;
  uint32_t published_attachment_ = 0;  // the source's reattachments() the publisher writes to
  std::optional<router::Predictor> predictor_;
  std::unique_ptr<router::Lookahead> lookahead_;
  std::vector<uint32_t> experts_;
};

}  // namespace sluice
