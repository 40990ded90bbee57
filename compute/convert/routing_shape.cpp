// compute/convert/routing_shape.cpp: the shaped rows and the routing
// simulator (see routing_shape.h). Every latent is a pure function of
// (seed, token or expert), drawn from its own SplitMix64 stream.
#include "compute/convert/routing_shape.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "compute/convert/codebook.h"
#include "compute/convert/kmeans.h"
#include "compute/routing/routing.h"
#include "proto/error.h"

namespace sluice::convert {
namespace {

constexpr uint64_t kTokenSalt = 0x70ce;
constexpr uint64_t kExpertSalt = 0xe4e7;
constexpr uint64_t kFillerSalt = 0xf111;

// Standard normal values (Box-Muller).
void gaussians(SplitMix64& rng, float* out, size_t n) {
  for (size_t i = 0; i < n; i += 2) {
    const double u = 1.0 - rng.uniform(), v = rng.uniform();
    const double r = std::sqrt(-2.0 * std::log(u));
    out[i] = static_cast<float>(r * std::cos(2 * std::numbers::pi * v));
    if (i + 1 < n) out[i + 1] = static_cast<float>(r * std::sin(2 * std::numbers::pi * v));
  }
}

// The token's slow latent (on the sphere of radius √8: each value of order
// 1) and fast latent (standard normal).
void token_latents(uint64_t seed, uint32_t token, float* slow, float* fast) {
  SplitMix64 rng(derive_seed(seed, kTokenSalt, token));
  gaussians(rng, slow, kSlowDims);
  double norm = 0;
  for (uint32_t d = 0; d < kSlowDims; ++d) norm += double(slow[d]) * slow[d];
  const float to_sphere = static_cast<float>(std::sqrt(kSlowDims / std::max(norm, 1e-12)));
  for (uint32_t d = 0; d < kSlowDims; ++d) slow[d] *= to_sphere;
  gaussians(rng, fast, kFastDims);
}

// An expert's router directions over the two latents, each of norm about 1.
void expert_directions(uint64_t seed, uint32_t moe, uint32_t expert, float* slow, float* fast) {
  SplitMix64 rng(derive_seed(seed, kExpertSalt, moe, expert));
  gaussians(rng, slow, kSlowDims);
  gaussians(rng, fast, kFastDims);
  for (uint32_t d = 0; d < kSlowDims; ++d) slow[d] /= std::sqrt(float(kSlowDims));
  for (uint32_t d = 0; d < kFastDims; ++d) fast[d] /= std::sqrt(float(kFastDims));
}

float dot(const float* a, const float* b, uint32_t n) {
  float s = 0;
  for (uint32_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace

RoutingShape initial_routing_shape(const ModelConfig& config, uint64_t seed) {
  if (config.tie_embeddings) {
    fail(
        "--routing realistic: tie_word_embeddings is true, and the LM head must differ from the "
        "embedding");
  }
  if (config.hidden < 2 * kShapedDims) {
    fail("--routing realistic: hidden_size {} is below {} (the shaped dimensions and their filler)",
         config.hidden, 2 * kShapedDims);
  }
  RoutingShape shape;
  shape.seed = seed;
  shape.hidden = config.hidden;
  shape.vocab = config.vocab;
  shape.experts = config.experts;
  int32_t moe = 0;
  for (uint32_t l = 0; l < config.layers; ++l)
    shape.moe_ordinal.push_back(config.layer_is_moe[l] ? moe++ : -1);
  shape.slow_weight.assign(moe, 1.0f);
  shape.fast_weight.assign(moe, 1.0f);
  shape.bias.assign(moe, std::vector<float>(config.experts, 0.0f));
  return shape;
}

void shaped_embedding_row(const RoutingShape& shape, uint32_t token, float* out) {
  std::fill(out, out + shape.hidden, 0.0f);
  out[0] = 1.0f;
  token_latents(shape.seed, token, out + 1, out + 1 + kSlowDims);
  double used = 0;
  for (uint32_t d = 0; d < kShapedDims; ++d) used += double(out[d]) * out[d];
  // The filler makes the row's mean square exactly 1, so RMSNorm is the identity on it.
  float* filler = out + kShapedDims;
  const uint32_t n = shape.hidden - kShapedDims;
  SplitMix64 rng(derive_seed(shape.seed, kFillerSalt, token));
  gaussians(rng, filler, n);
  double norm = 0;
  for (uint32_t d = 0; d < n; ++d) norm += double(filler[d]) * filler[d];
  const double room = std::max(0.0, double(shape.hidden) - used);
  const float scale = static_cast<float>(std::sqrt(room / std::max(norm, 1e-12)));
  for (uint32_t d = 0; d < n; ++d) filler[d] *= scale;
}

void shaped_lm_head_row(const RoutingShape& shape, uint32_t token, float* out) {
  std::fill(out, out + shape.hidden, 0.0f);
  shaped_embedding_row(shape, token, out);
  out[0] = 0.0f;
  for (uint32_t d = 0; d < kSlowDims; ++d) out[1 + d] *= shape.kappa / kSlowDims;
  std::fill(out + 1 + kSlowDims, out + kShapedDims, 0.0f);
  float* filler = out + kShapedDims;
  double norm = 0;
  for (uint32_t d = kShapedDims; d < shape.hidden; ++d) norm += double(out[d]) * out[d];
  const float to_self = static_cast<float>(-kSelfPenalty / std::max(norm, 1e-12));
  for (uint32_t d = 0; d < shape.hidden - kShapedDims; ++d) filler[d] *= to_self;
}

void shaped_router_row(const RoutingShape& shape, uint32_t moe, uint32_t expert, float* out) {
  std::fill(out, out + shape.hidden, 0.0f);
  out[0] = shape.bias.at(moe).at(expert);
  float* slow = out + 1;
  float* fast = out + 1 + kSlowDims;
  expert_directions(shape.seed, moe, expert, slow, fast);
  for (uint32_t d = 0; d < kSlowDims; ++d) slow[d] *= shape.slow_weight[moe];
  for (uint32_t d = 0; d < kFastDims; ++d) fast[d] *= shape.fast_weight[moe];
}

RoutingSimulator::RoutingSimulator(const RoutingShape& shape, const RouterConfig& router)
    : router_(router), moe_layers_(static_cast<uint32_t>(shape.bias.size())) {
  slow_.resize(size_t{shape.vocab} * kSlowDims);
  fast_.resize(size_t{shape.vocab} * kFastDims);
  for (uint32_t t = 0; t < shape.vocab; ++t)
    token_latents(shape.seed, t, &slow_[size_t{t} * kSlowDims], &fast_[size_t{t} * kFastDims]);
  slow_dir_.resize(size_t{moe_layers_} * shape.experts * kSlowDims);
  fast_dir_.resize(size_t{moe_layers_} * shape.experts * kFastDims);
  for (uint32_t m = 0; m < moe_layers_; ++m) {
    for (uint32_t e = 0; e < shape.experts; ++e) {
      const size_t i = size_t{m} * shape.experts + e;
      expert_directions(shape.seed, m, e, &slow_dir_[i * kSlowDims], &fast_dir_[i * kFastDims]);
    }
  }
}

std::vector<std::vector<std::vector<uint32_t>>> RoutingSimulator::decode(const RoutingShape& shape,
                                                                         uint32_t tokens,
                                                                         uint64_t seed) const {
  SplitMix64 rng(seed);
  const uint32_t experts = shape.experts, vocab = shape.vocab;
  const std::vector<float> no_bias(router_.score_bias ? experts : 0, 0.0f);
  std::vector<float> logits(experts);
  std::vector<double> cumulative(vocab);
  std::vector<std::vector<std::vector<uint32_t>>> trace(tokens);
  uint32_t token = static_cast<uint32_t>(rng.below(vocab));
  for (uint32_t t = 0; t < tokens; ++t) {
    const float* slow = &slow_[size_t{token} * kSlowDims];
    const float* fast = &fast_[size_t{token} * kFastDims];
    for (uint32_t m = 0; m < moe_layers_; ++m) {
      for (uint32_t e = 0; e < experts; ++e) {
        const size_t i = size_t{m} * experts + e;
        logits[e] = shape.bias[m][e] +
                    shape.slow_weight[m] * dot(&slow_dir_[i * kSlowDims], slow, kSlowDims) +
                    shape.fast_weight[m] * dot(&fast_dir_[i * kFastDims], fast, kFastDims);
      }
      trace[t].push_back(route(router_, logits, no_bias).experts);
    }
    // The next token, sampled at kShapedTemperature from the LM head's logits.
    double sum = 0;
    // The filler's terms between two tokens are left out: about ±4/√hidden.
    const float scale = shape.kappa / kSlowDims / kShapedTemperature;
    float top = -INFINITY;
    for (uint32_t j = 0; j < vocab; ++j) {
      const float logit = scale * dot(&slow_[size_t{j} * kSlowDims], slow, kSlowDims) -
                          (j == token ? kSelfPenalty / kShapedTemperature : 0.0f);
      cumulative[j] = logit;
      top = std::max(top, logit);
    }
    for (uint32_t j = 0; j < vocab; ++j) cumulative[j] = sum += std::exp(cumulative[j] - top);
    const double x = rng.uniform() * sum;
    token = static_cast<uint32_t>(std::min<size_t>(
        std::upper_bound(cumulative.begin(), cumulative.end(), x) - cumulative.begin(), vocab - 1));
  }
  return trace;
}

}  // namespace sluice::convert
