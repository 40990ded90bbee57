// router/predictor.cpp: loads the routers and ranks experts. The logits come
// from the same f32 matvec (and instruction set) as the model's, the ranking
// from compute/routing, so a guess from the real input is the real routing.
#include "router/predictor.h"

#include "compute/kernels/quant.h"
#include "compute/routing/routing.h"
#include "proto/container.h"
#include "proto/error.h"
#include "proto/tensor_inventory.h"

namespace sluice::router {
namespace {

std::vector<float> load_f32(const Container& container, const std::string& name, uint64_t rows, uint64_t cols) {
  const TrunkTensor tensor = container.load_trunk_tensor(name);
  if (tensor.format() != TrunkFormat::kF32 || tensor.rows() * tensor.cols() != rows * cols) {
    fail("{}: router tensor {} is [{}, {}] {}, expected f32 [{}, {}]", container.dir(), name, tensor.rows(),
         tensor.cols(), trunk_format_name(tensor.format()), rows, cols);
  }
  return dequantize(tensor);
}

}  // namespace

Predictor::Predictor(const ModelConfig& config, std::vector<RouterWeights> routers)
    : config_(config), routers_(std::move(routers)), exec_{kernels::isa_from_environment(), nullptr} {
  if (routers_.size() != config_.layers) fail("router: {} routers for {} layers", routers_.size(), config_.layers);
  for (uint32_t l = 0; l < routers_.size(); ++l) {
    if (routers_[l].matrix.empty()) continue;
    if (routers_[l].matrix.size() != uint64_t{config_.experts} * config_.hidden ||
        (config_.router.score_bias && routers_[l].bias.size() != config_.experts)) {
      fail("router: layer {} router has {} values and {} biases, expected {} × {} and {}", l, routers_[l].matrix.size(),
           routers_[l].bias.size(), config_.experts, config_.hidden, config_.router.score_bias ? config_.experts : 0);
    }
  }
}

Predictor::Predictor(const Container& container)
    : config_(ModelConfig::from_json(container.arch(), container.config())),
      exec_{kernels::isa_from_environment(), nullptr} {
  routers_.resize(config_.layers);
  loaded_.reserve(2 * container.moe_layers().size());
  for (const MoeLayerInfo& info : container.moe_layers()) {
    if (info.layer >= routers_.size() || !config_.layer_is_moe[info.layer]) {
      fail("{}: layer {} has an expert bank but the config makes it dense or absent", container.dir(), info.layer);
    }
    RouterWeights& weights = routers_[info.layer];
    weights.matrix = loaded_.emplace_back(load_f32(container, tensor_name(config_, TensorRole::kRouter, info.layer),
                                                   config_.experts, config_.hidden));
    if (config_.router.score_bias) {
      weights.bias = loaded_.emplace_back(
          load_f32(container, tensor_name(config_, TensorRole::kRouterBias, info.layer), 1, config_.experts));
    }
  }
}

std::optional<uint32_t> Predictor::next_moe_layer(uint32_t layer) const {
  for (uint32_t next = layer + 1; next < routers_.size(); ++next) {
    if (is_moe(next)) return next;
  }
  return std::nullopt;
}

std::vector<uint32_t> Predictor::predict(uint32_t layer, std::span<const float> input, uint32_t k) const {
  if (!is_moe(layer)) fail("router: layer {} has no router (dense or out of range)", layer);
  if (input.size() != config_.hidden) {
    fail("router: input of layer {} has {} values, hidden size is {}", layer, input.size(), config_.hidden);
  }
  logits_.resize(config_.experts);
  kernels::f32_matvec(routers_[layer].matrix.data(), config_.experts, config_.hidden, input.data(), logits_.data(),
                      exec_);
  return rank_experts(config_.router, logits_, routers_[layer].bias, k);
}

}  // namespace sluice::router
