// compute/model/attn_res.cpp: the depth mixtures of Attention Residuals
// (attn_res.h). Scores and the softmax are f32 per token; a source's score
// divides its n ⊙ p dot by its RMS, summed in index order.
#include "compute/model/attn_res.h"

#include <algorithm>
#include <cmath>

#include "proto/error.h"

namespace sluice {

AttnRes::AttnRes(const ModelConfig& config, const ModelWeights& weights)
    : config_(config), weights_(weights) {
  if (config.attn_res_block == 0) fail("AttnRes: the model has no attn_res_block_size");
  capacity_ = (config.layers + config.attn_res_block - 1) / config.attn_res_block;
}

const float* AttnRes::before_mixer(uint32_t layer, float* partial, uint32_t tokens) {
  const size_t rows = size_t{tokens} * config_.hidden;
  if (layer == 0) {
    stored_ = 0;
    tokens_ = tokens;
    blocks_.resize(size_t{capacity_} * rows);
  }
  if (tokens != tokens_)
    fail("AttnRes: layer {} sees {} tokens, the pass began with {}", layer, tokens, tokens_);
  const LayerWeights& w = weights_.layers[layer];
  const float* input =
      stored_ == 0 ? partial : mix(w.attn_res_norm, w.attn_res_proj, partial, tokens);
  if (layer % config_.attn_res_block == 0) {
    if (stored_ == 0) {
      // The mixer must read the embedding after the partial is cleared.
      out_.assign(partial, partial + rows);
      input = out_.data();
    }
    std::copy_n(partial, rows, &blocks_[size_t{stored_++} * rows]);
    std::fill_n(partial, rows, 0.0f);
  }
  return input;
}

const float* AttnRes::before_ffn(uint32_t layer, const float* partial, uint32_t tokens) {
  const LayerWeights& w = weights_.layers[layer];
  return mix(w.mlp_res_norm, w.mlp_res_proj, partial, tokens);
}

const float* AttnRes::final_mixture(const float* partial, uint32_t tokens) {
  return mix(weights_.final_res_norm, weights_.final_res_proj, partial, tokens);
}

const float* AttnRes::mix(const std::vector<float>& norm, const std::vector<float>& query,
                          const float* live, uint32_t tokens) {
  const uint32_t hidden = config_.hidden, sources = stored_ + 1;
  const size_t rows = size_t{tokens} * hidden;
  out_.assign(rows, 0.0f);
  scores_.resize(sources);
  const auto source = [&](uint32_t i, uint32_t t) {
    return i < stored_ ? &blocks_[size_t{i} * rows + size_t{t} * hidden]
                       : live + size_t{t} * hidden;
  };
  for (uint32_t t = 0; t < tokens; ++t) {
    float best = -INFINITY;
    for (uint32_t i = 0; i < sources; ++i) {
      const float* v = source(i, t);
      float squares = 0.0f, dot = 0.0f;
      for (uint32_t j = 0; j < hidden; ++j) {
        squares += v[j] * v[j];
        dot += v[j] * norm[j] * query[j];
      }
      scores_[i] = dot / std::sqrt(squares / static_cast<float>(hidden) + config_.rms_eps);
      best = std::max(best, scores_[i]);
    }
    float total = 0.0f;
    for (uint32_t i = 0; i < sources; ++i) total += scores_[i] = std::exp(scores_[i] - best);
    float* out = &out_[size_t{t} * hidden];
    for (uint32_t i = 0; i < sources; ++i) {
      const float weight = scores_[i] / total;
      const float* v = source(i, t);
      for (uint32_t j = 0; j < hidden; ++j) out[j] += weight * v[j];
    }
  }
  return out_.data();
}

}  // namespace sluice
