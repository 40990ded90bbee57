// router/predictor.h: lookahead's guess of the next MoE layer's experts. It
// holds only the routers (f32, from the trunk) and ranks them as the real
// router does; it never decides what the model computes.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "compute/kernels/dispatch.h"

namespace sluice {
class Container;
}

namespace sluice::router {

// Experts of one router in decreasing softmax probability, lower id first on
// ties: the order compute/model's route() uses, so a guess made from the real
// input equals the real routing.
std::vector<uint32_t> rank_experts(std::span<const float> logits, uint32_t k);

class Predictor {
 public:
  // Loads model.layers.{i}.mlp.gate.weight of every MoE layer of `container`
  // (and nothing else). Throws Error naming the tensor when one is missing or
  // its shape disagrees with the manifest.
  explicit Predictor(const Container& container);
  // Borrows routers a model already holds: `routers[l]` is layer l's f32
  // [experts, hidden] matrix, empty for a dense layer. They must outlive it.
  Predictor(uint32_t hidden, uint32_t top_k, std::vector<std::span<const float>> routers);
  // Copies would point into the original's loaded routers.
  Predictor(const Predictor&) = delete;
  Predictor& operator=(const Predictor&) = delete;

  uint32_t hidden() const { return hidden_; }
  uint32_t top_k() const { return top_k_; }
  uint32_t layer_count() const { return static_cast<uint32_t>(routers_.size()); }
  bool is_moe(uint32_t layer) const { return layer < routers_.size() && !routers_[layer].empty(); }
  // The first MoE layer after `layer`, if any: whose experts a hidden state
  // published at `layer` is used to guess.
  std::optional<uint32_t> next_moe_layer(uint32_t layer) const;

  // The `k` most likely experts of MoE layer `layer`'s router on `input`
  // (hidden floats). Throws Error for a dense layer or a wrong input size.
  std::vector<uint32_t> predict(uint32_t layer, std::span<const float> input, uint32_t k) const;

 private:
  uint32_t hidden_ = 0;
  uint32_t top_k_ = 0;
  std::vector<std::vector<float>> loaded_;      // the routers, when loaded from a container
  std::vector<std::span<const float>> routers_;  // by model layer; empty for dense layers
  kernels::Exec exec_;
  mutable std::vector<float> logits_;
};

}  // namespace sluice::router
