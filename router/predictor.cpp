// router/predictor.cpp: loads the routers and ranks experts. The logits come
// from the same f32 matvec (and instruction set) as the model's; the softmax
// and tie rule mirror compute/model/transformer.cpp route(), which the router
// cannot link (compute/model hosts the router, not the other way round); a
// test holds the two together.
#include "router/predictor.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "compute/kernels/quant.h"
#include "proto/container.h"
#include "proto/error.h"

namespace sluice::router {

std::vector<uint32_t> rank_experts(std::span<const float> logits, uint32_t k) {
  const auto count = static_cast<uint32_t>(logits.size());
  k = std::min(k, count);
  if (count == 0) return {};
  // Probabilities, not logits: two logits that differ can round to the same
  // probability, and the real router breaks that tie by id.
  const float max_logit = *std::max_element(logits.begin(), logits.end());
  std::vector<float> probs(count);
  float total = 0.0f;
  for (uint32_t e = 0; e < count; ++e) {
    probs[e] = std::exp(logits[e] - max_logit);
    total += probs[e];
  }
  for (float& p : probs) p /= total;
  std::vector<uint32_t> order(count);
  std::iota(order.begin(), order.end(), 0u);
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](uint32_t a, uint32_t b) { return probs[a] > probs[b] || (probs[a] == probs[b] && a < b); });
  order.resize(k);
  return order;
}

Predictor::Predictor(uint32_t hidden, uint32_t top_k, std::vector<std::span<const float>> routers)
    : hidden_(hidden), top_k_(top_k), routers_(std::move(routers)), exec_{kernels::isa_from_environment(), nullptr} {
  if (hidden_ == 0) fail("router: hidden size 0");
  for (uint32_t l = 0; l < routers_.size(); ++l) {
    if (routers_[l].size() % hidden_ != 0) {
      fail("router: layer {} router has {} values, not a multiple of the hidden size {}", l, routers_[l].size(), hidden_);
    }
  }
}

Predictor::Predictor(const Container& container)
    : hidden_(container.hidden_size()), top_k_(container.top_k()), exec_{kernels::isa_from_environment(), nullptr} {
  loaded_.resize(container.layer_count());
  for (const MoeLayerInfo& info : container.moe_layers()) {
    if (info.layer >= loaded_.size()) {
      fail("{}: MoE layer {} is beyond the model's {} layers", container.dir(), info.layer, loaded_.size());
    }
    const std::string name = fmt::format("model.layers.{}.mlp.gate.weight", info.layer);
    const TrunkTensor tensor = container.load_trunk_tensor(name);
    if (tensor.format() != TrunkFormat::kF32 || tensor.rows() != info.experts || tensor.cols() != hidden_) {
      fail("{}: router tensor {} is [{}, {}], expected f32 [{}, {}]", container.dir(), name, tensor.rows(),
           tensor.cols(), info.experts, hidden_);
    }
    loaded_[info.layer] = dequantize(tensor);
  }
  routers_.assign(loaded_.begin(), loaded_.end());
}

std::optional<uint32_t> Predictor::next_moe_layer(uint32_t layer) const {
  for (uint32_t next = layer + 1; next < routers_.size(); ++next) {
    if (is_moe(next)) return next;
  }
  return std::nullopt;
}

std::vector<uint32_t> Predictor::predict(uint32_t layer, std::span<const float> input, uint32_t k) const {
  if (!is_moe(layer)) fail("router: layer {} has no router (dense or out of range)", layer);
  if (input.size() != hidden_) fail("router: input of layer {} has {} values, hidden size is {}", layer, input.size(), hidden_);
  const auto experts = static_cast<uint32_t>(routers_[layer].size() / hidden_);
  logits_.resize(experts);
  kernels::f32_matvec(routers_[layer].data(), experts, hidden_, input.data(), logits_.data(), exec_);
  return rank_experts(logits_, k);
}

}  // namespace sluice::router
