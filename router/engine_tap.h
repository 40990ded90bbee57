// router/engine_tap.h: connects a compute client's Transformer to lookahead
// (a Publisher) and to a routing trace, through the model's MoE hook. Header
// only, compiled by its users in compute/: meson configures router/ before
// compute/, and router_lib itself never links the model. It only reads what
// the hook shows; the model's output cannot depend on it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "compute/model/transformer.h"
#include "router/lookahead.h"
#include "router/trace.h"

namespace sluice::router {

class EngineTap {
 public:
  // Installs itself as `transformer`'s MoE hook (replacing any other) until
  // destroyed. `moe_layers` is the number of MoE layers (a trace row's width).
  EngineTap(Transformer& transformer, uint32_t moe_layers) : transformer_(transformer), moe_layers_(moe_layers) {
    transformer_.set_moe_hook([this](uint32_t layer, size_t moe_index, uint32_t tokens, std::span<const float> input) {
      on_moe(layer, moe_index, tokens, input);
    });
  }
  ~EngineTap() { transformer_.set_moe_hook(nullptr); }
  EngineTap(const EngineTap&) = delete;
  EngineTap& operator=(const EngineTap&) = delete;

  void set_publisher(Publisher* publisher) { publisher_ = publisher; }
  void set_trace(TraceWriter* trace) { trace_ = trace; }

 private:
  void on_moe(uint32_t layer, size_t moe_index, uint32_t tokens, std::span<const float> input) {
    const auto& routing = transformer_.last_routing();
    if (publisher_ != nullptr) {
      const uint32_t per_row = tokens ? static_cast<uint32_t>(routing[0][moe_index].experts.size()) : 0;
      experts_.clear();
      for (uint32_t t = 0; t < tokens; ++t) {
        const auto& chosen = routing[t][moe_index].experts;
        experts_.insert(experts_.end(), chosen.begin(), chosen.end());
      }
      publisher_->publish(layer, tokens, input, per_row, experts_);
    }
    // Routing is complete for the chunk once its last MoE layer has routed.
    if (trace_ != nullptr && moe_index + 1 == moe_layers_) {
      for (uint32_t t = 0; t < tokens; ++t) {
        TraceToken row;
        row.tok = uint64_t{transformer_.position()} + t;
        for (const Routing& r : routing[t]) row.layers.push_back(r.experts);
        trace_->write(row);
      }
    }
  }

  Transformer& transformer_;
  uint32_t moe_layers_;
  Publisher* publisher_ = nullptr;
  TraceWriter* trace_ = nullptr;
  std::vector<uint32_t> experts_;
};

}  // namespace sluice::router
