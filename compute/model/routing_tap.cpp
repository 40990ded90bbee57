// compute/model/routing_tap.cpp: the MoE hook that feeds the mailbox and the
// trace, and the embedded router thread's wiring to the in-process worker.
#include "compute/model/routing_tap.h"

#include "compute/model/cached_expert_source.h"
#include "ioworker/worker.h"

namespace sluice {

RoutingSession::RoutingSession(Engine& engine, const RoutingOptions& options)
    : engine_(engine), moe_layers_(static_cast<uint32_t>(engine.container().moe_layers().size())) {
  // Lookahead needs the expert cache; reads without one (--no-cache) have nothing to prefetch into.
  cache_ = dynamic_cast<CachedExpertSource*>(&engine.experts());
  if (!options.trace_out.empty()) trace_.emplace(options.trace_out);
  if (options.lookahead > 0 && cache_ != nullptr) {
    if (ioworker::Worker* worker = cache_->worker()) {
      // The engine's own routers: no second load of the trunk tensors.
      std::vector<router::RouterWeights> routers;
      for (const LayerWeights& layer : engine.weights().layers) {
        routers.push_back(layer.moe ? router::RouterWeights{layer.moe->router, layer.moe->bias} : router::RouterWeights{});
      }
      predictor_.emplace(engine.config(), std::move(routers));
      lookahead_ = std::make_unique<router::Lookahead>(
          *predictor_, cache_->segment(), options.lookahead, [worker](uint32_t layer, std::span<const uint32_t> experts) {
            worker->prefetch(layer, experts, ioworker::PrefetchOrigin::kRouter);
          },
          router::layers_ahead_from_environment());
      lookahead_->start();
    }
    publish_prefill_ = options.in_prefill;
    publisher_.emplace(cache_->segment(), cache_->client_id(), publish_prefill_);
  }
  if (publisher_ || trace_) {
    engine_.transformer().set_moe_hook(
        [this](uint32_t layer, size_t moe_index, uint32_t tokens, std::span<const float> input) {
          on_moe(layer, moe_index, tokens, input);
        });
  }
}

RoutingSession::~RoutingSession() { engine_.transformer().set_moe_hook(nullptr); }

void RoutingSession::finish() {
  engine_.transformer().set_moe_hook(nullptr);
  if (lookahead_) lookahead_->stop();
  if (trace_) trace_->close();
}

shm::GuessStats RoutingSession::guesses() const {
  if (cache_ == nullptr) return {};
  return shm::read_stats(cache_->segment()).lookahead.total();
}

void RoutingSession::on_moe(uint32_t layer, size_t moe_index, uint32_t tokens, std::span<const float> input) {
  const auto& routing = engine_.transformer().last_routing();
  if (publisher_ && cache_->reattachments() != published_attachment_) {
    // The daemon was restarted: its successor's router reads the new segment's mailbox.
    published_attachment_ = cache_->reattachments();
    publisher_.emplace(cache_->segment(), cache_->client_id(), publish_prefill_);
  }
  if (publisher_) {
    const uint32_t per_row = tokens ? static_cast<uint32_t>(routing[0][moe_index].experts.size()) : 0;
    experts_.clear();
    for (uint32_t t = 0; t < tokens; ++t) {
      const auto& chosen = routing[t][moe_index].experts;
      experts_.insert(experts_.end(), chosen.begin(), chosen.end());
    }
    publisher_->publish(layer, tokens, engine_.transformer().last_call_decodes(), input, per_row,
                        experts_);
  }
  // Routing is complete for the chunk once its last MoE layer has routed.
  if (trace_ && moe_index + 1 == moe_layers_) {
    for (uint32_t t = 0; t < tokens; ++t) {
      router::TraceToken row;
      row.tok = engine_.transformer().last_positions()[t];
      for (const Routing& r : routing[t]) {
        row.layers.push_back(r.experts);
        row.weights.emplace_back(r.weights.begin(), r.weights.end());
      }
      trace_->write(row);
    }
  }
}

}  // namespace sluice
