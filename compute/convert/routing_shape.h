// compute/convert/routing_shape.h: weights whose own routing looks real
// (`sluice synth --routing realistic`). It draws the embedding, LM head and
// routers from a few parameters and simulates the routing they give; it
// never fits the parameters (compute/cli/routing_fit.h does) and never
// touches anything but those tensors and the residual scale.
//
// The design: every block adds almost nothing to the residual stream
// (kResidualScale), so each router sees the current token's embedding. An
// embedding row is [1, slow (8), fast (8), filler] with a mean square of
// exactly 1, so RMSNorm leaves it as it is. Router logits are then
// bias + slow_weight · (a · slow) + fast_weight · (c · fast) with fixed
// random a, c per expert: the bias sets the popularity curve, the weights
// how much the routing follows each latent. The LM head scores token j
// after token i as kappa · slow_j · slow_i / 8, less kSelfPenalty when j is
// i (through the filler, which is nearly orthogonal between tokens), so
// decode sampled at temperature 1 drifts through the slow latent
// (next-token repeat and reuse within a few tokens) while the fast latent
// changes at every token, and a token seldom follows itself (which would
// repeat all its experts).
#pragma once

#include <cstdint>
#include <vector>

#include "proto/model_config.h"

namespace sluice::convert {

inline constexpr uint32_t kSlowDims = 8;
inline constexpr uint32_t kFastDims = 8;
inline constexpr uint32_t kShapedDims = 1 + kSlowDims + kFastDims;
// What attention, shared and dense FFNs and routed experts add to the
// residual, as a factor on their output projections.
inline constexpr float kResidualScale = 1e-3f;
inline constexpr float kSelfPenalty = 4.0f;
// Decode must sample this way for the fitted statistics to hold.
inline constexpr float kShapedTemperature = 1.0f;

struct RoutingShape {
  uint64_t seed = 1;
  uint32_t hidden = 0, vocab = 0, experts = 0;
  float kappa = 8.0f;
  std::vector<int32_t> moe_ordinal;  // by model layer; -1 for a layer without routed experts
  // By MoE ordinal:
  std::vector<float> slow_weight, fast_weight;
  std::vector<std::vector<float>> bias;  // by expert
};

// A shape with starting parameters for `config` (refuses tied embeddings,
// where the LM head cannot differ from the embedding, and a hidden size too
// small for the shaped dimensions, naming the key).
RoutingShape initial_routing_shape(const ModelConfig& config, uint64_t seed);

// One row of each shaped tensor, `shape.hidden` (router: the same) values.
void shaped_embedding_row(const RoutingShape& shape, uint32_t token, float* out);
void shaped_lm_head_row(const RoutingShape& shape, uint32_t token, float* out);
void shaped_router_row(const RoutingShape& shape, uint32_t moe, uint32_t expert, float* out);

// The routing a shape's weights give when decoding sampled text, computed
// from the latents alone (what the model computes, less quantization and
// the blocks' kResidualScale share).
class RoutingSimulator {
 public:
  RoutingSimulator(const RoutingShape& shape, const RouterConfig& router);
  // `tokens` tokens from a random first token: [token][MoE ordinal] → experts.
  std::vector<std::vector<std::vector<uint32_t>>> decode(const RoutingShape& shape, uint32_t tokens,
                                                         uint64_t seed) const;

 private:
  RouterConfig router_;
  uint32_t moe_layers_ = 0;
  std::vector<float> slow_, fast_;          // [token][dim]
  std::vector<float> slow_dir_, fast_dir_;  // [moe][expert][dim], a/√8 and c/√8
};

}  // namespace sluice::convert
