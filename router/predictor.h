// router/predictor.h: lookahead's guess of the next MoE layer's experts. It
// holds only the routers (f32, from the trunk) and their selection biases,
// and ranks experts with compute/routing, the module the model routes with;
// it never decides what the model computes.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "compute/kernels/dispatch.h"
#include "proto/model_config.h"

namespace sluice {
class Container;
}

namespace sluice::router {

// One MoE layer's router as f32 [experts, hidden] and its bias (empty when
// the router kind has none); both empty for a dense layer.
struct RouterWeights {
  std::span<const float> matrix;
  std::span<const float> bias;
};

class Predictor {
 public:
  // Loads the router (and bias) of every MoE layer of `container`, by the
  // names its family spec gives, and nothing else. Throws Error naming the
  // tensor when one is missing or its shape disagrees with the config.
  explicit Predictor(const Container& container);
  // Borrows routers a model already holds: `routers[l]` is layer l's. They
  // must outlive it.
  Predictor(const ModelConfig& config, std::vector<RouterWeights> routers);
  // Copies would point into the original's loaded routers.
  Predictor(const Predictor&) = delete;
  Predictor& operator=(const Predictor&) = delete;

  uint32_t hidden() const { return config_.hidden; }
  uint32_t top_k() const { return config_.top_k; }
  uint32_t layer_count() const { return static_cast<uint32_t>(routers_.size()); }
  bool is_moe(uint32_t layer) const { return layer < routers_.size() && !routers_[layer].matrix.empty(); }
  // The first MoE layer after `layer`, if any: whose experts a hidden state
  // published at `layer` is used to guess.
  std::optional<uint32_t> next_moe_layer(uint32_t layer) const;

  // The `k` most likely experts of MoE layer `layer`'s router on `input`
  // (hidden floats). Throws Error for a dense layer or a wrong input size.
  std::vector<uint32_t> predict(uint32_t layer, std::span<const float> input, uint32_t k) const;

 private:
  ModelConfig config_;
  std::vector<std::vector<float>> loaded_;  // matrices then biases, when loaded from a container
  std::vector<RouterWeights> routers_;      // by model layer
  kernels::Exec exec_;
  mutable std::vector<float> logits_;
};

}  // namespace sluice::router
