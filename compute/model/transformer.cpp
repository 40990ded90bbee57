// compute/model/transformer.cpp: the layer loop. All activations are f32; the
// sums whose order matters for agreement with scripts/reference.py are noted.
#include "compute/model/transformer.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "proto/error.h"

namespace sluice {
namespace {

// y = w ⊙ x / sqrt(mean(x²) + eps), the sum of squares in index order.
void rms_norm(const float* x, const float* weight, uint32_t n, float eps, float* y) {
  float sum = 0.0f;
  for (uint32_t i = 0; i < n; ++i) sum += x[i] * x[i];
  const float inverse = 1.0f / std::sqrt(sum / static_cast<float>(n) + eps);
  for (uint32_t i = 0; i < n; ++i) y[i] = weight[i] * (x[i] * inverse);
}

float silu(float v) { return v / (1.0f + std::exp(-v)); }

kernels::RvqMatrixView matrix_view(const uint8_t* record, const RecordLayout& layout, MatrixKind kind) {
  kernels::RvqMatrixView view;
  view.shape = layout.matrices[static_cast<int>(kind)];
  view.indices = record + layout.matrix_offset(kind);
  view.scales = reinterpret_cast<const uint16_t*>(record + layout.scales_offset(kind));
  return view;
}

}  // namespace

Routing route(std::span<const float> router_logits, uint32_t top_k, bool normalize) {
  const auto count = static_cast<uint32_t>(router_logits.size());
  const float max_logit = *std::max_element(router_logits.begin(), router_logits.end());
  std::vector<float> probs(count);
  float total = 0.0f;
  for (uint32_t e = 0; e < count; ++e) {
    probs[e] = std::exp(router_logits[e] - max_logit);
    total += probs[e];
  }
  for (float& p : probs) p /= total;
  std::vector<uint32_t> order(count);
  std::iota(order.begin(), order.end(), 0u);
  std::partial_sort(order.begin(), order.begin() + top_k, order.end(),
                    [&](uint32_t a, uint32_t b) { return probs[a] > probs[b] || (probs[a] == probs[b] && a < b); });
  Routing routing;
  routing.experts.assign(order.begin(), order.begin() + top_k);
  float chosen = 0.0f;
  for (uint32_t e : routing.experts) {
    routing.weights.push_back(probs[e]);
    chosen += probs[e];
  }
  if (normalize) {
    for (float& w : routing.weights) w /= chosen;
  }
  return routing;
}

Transformer::Transformer(const ModelConfig& config, const ModelWeights& weights, ExpertSource& experts,
                         uint32_t context, kernels::Exec exec)
    : config_(config),
      weights_(weights),
      experts_(experts),
      exec_(exec),
      rope_(config.head_dim, config.rope_theta, context),
      cache_(config.layers, context, config.kv_heads * config.head_dim) {}

void Transformer::forward(std::span<const int32_t> tokens, std::span<float> logits, bool all_positions) {
  const auto count = static_cast<uint32_t>(tokens.size());
  if (count == 0) fail("forward: no tokens");
  if (size_t{position_} + count > cache_.capacity()) {
    fail("context full: {} tokens do not fit after position {} (context length {}; raise --ctx)", count, position_,
         cache_.capacity());
  }
  const size_t rows_out = all_positions ? count : 1;
  if (logits.size() < rows_out * config_.vocab) fail("forward: logits buffer too small");

  const uint32_t hidden = config_.hidden;
  x_.resize(size_t{count} * hidden);
  normed_.resize(size_t{count} * hidden);
  for (uint32_t t = 0; t < count; ++t) {
    if (tokens[t] < 0 || static_cast<uint32_t>(tokens[t]) >= config_.vocab) {
      fail("token id {} is outside the vocabulary (size {})", tokens[t], config_.vocab);
    }
    weights_.embed.row(static_cast<uint32_t>(tokens[t]), &x_[size_t{t} * hidden]);
  }

  routing_.assign(count, {});
  size_t moe_index = 0;
  for (uint32_t layer = 0; layer < config_.layers; ++layer) {
    attention(layer, count);
    const LayerWeights& lw = weights_.layers[layer];
    for (uint32_t t = 0; t < count; ++t) {
      rms_norm(&x_[size_t{t} * hidden], lw.post_attention_norm.data(), hidden, config_.rms_eps,
               &normed_[size_t{t} * hidden]);
    }
    if (lw.moe != nullptr) {
      moe(layer, count, moe_index++);
    } else {
      dense_mlp(layer, count);
    }
  }

  const uint32_t first = all_positions ? 0 : count - 1;
  for (uint32_t t = first; t < count; ++t) {
    rms_norm(&x_[size_t{t} * hidden], weights_.final_norm.data(), hidden, config_.rms_eps,
             &normed_[size_t{t - first} * hidden]);
  }
  weights_.lm_head.apply(normed_.data(), static_cast<uint32_t>(rows_out), logits.data(), exec_);
  position_ += count;
}

void Transformer::attention(uint32_t layer, uint32_t tokens) {
  const LayerWeights& lw = weights_.layers[layer];
  const uint32_t hidden = config_.hidden, head_dim = config_.head_dim;
  const uint32_t q_width = config_.heads * head_dim, kv_width = config_.kv_heads * head_dim;
  for (uint32_t t = 0; t < tokens; ++t) {
    rms_norm(&x_[size_t{t} * hidden], lw.input_norm.data(), hidden, config_.rms_eps, &normed_[size_t{t} * hidden]);
  }
  q_.resize(size_t{tokens} * q_width);
  k_.resize(size_t{tokens} * kv_width);
  v_.resize(size_t{tokens} * kv_width);
  lw.q.apply(normed_.data(), tokens, q_.data(), exec_);
  lw.k.apply(normed_.data(), tokens, k_.data(), exec_);
  lw.v.apply(normed_.data(), tokens, v_.data(), exec_);

  attn_out_.resize(size_t{tokens} * q_width);
  for (uint32_t t = 0; t < tokens; ++t) {
    float* q = &q_[size_t{t} * q_width];
    float* k = &k_[size_t{t} * kv_width];
    float* v = &v_[size_t{t} * kv_width];
    if (config_.qk_norm == QkNorm::kWholeVector) {
      rms_norm(q, lw.q_norm.data(), q_width, config_.rms_eps, q);
      rms_norm(k, lw.k_norm.data(), kv_width, config_.rms_eps, k);
    } else {
      for (uint32_t h = 0; h < config_.heads; ++h) rms_norm(q + h * head_dim, lw.q_norm.data(), head_dim, config_.rms_eps, q + h * head_dim);
      for (uint32_t h = 0; h < config_.kv_heads; ++h) rms_norm(k + h * head_dim, lw.k_norm.data(), head_dim, config_.rms_eps, k + h * head_dim);
    }
    if (config_.clip_qkv > 0.0f) {
      const float c = config_.clip_qkv;
      for (uint32_t i = 0; i < q_width; ++i) q[i] = std::clamp(q[i], -c, c);
      for (uint32_t i = 0; i < kv_width; ++i) k[i] = std::clamp(k[i], -c, c);
      for (uint32_t i = 0; i < kv_width; ++i) v[i] = std::clamp(v[i], -c, c);
    }
    const uint32_t position = position_ + t;
    for (uint32_t h = 0; h < config_.heads; ++h) rope_.rotate(q + h * head_dim, position);
    for (uint32_t h = 0; h < config_.kv_heads; ++h) rope_.rotate(k + h * head_dim, position);
    std::copy(k, k + kv_width, cache_.key(layer, position));
    std::copy(v, v + kv_width, cache_.value(layer, position));
  }
  for (uint32_t t = 0; t < tokens; ++t) {
    attend(&q_[size_t{t} * q_width], cache_, layer, position_ + t, config_.heads, config_.kv_heads, head_dim,
           &attn_out_[size_t{t} * q_width], scores_);
  }
  proj_.resize(size_t{tokens} * hidden);
  lw.o.apply(attn_out_.data(), tokens, proj_.data(), exec_);
  for (size_t i = 0; i < size_t{tokens} * hidden; ++i) x_[i] += proj_[i];
}

void Transformer::moe(uint32_t layer, uint32_t tokens, size_t moe_index) {
  const LayerWeights& lw = weights_.layers[layer];
  const uint32_t hidden = config_.hidden, width = config_.expert_width, top_k = config_.top_k;
  const RecordLayout& layout = lw.moe->layout;

  router_logits_.resize(config_.experts);
  std::vector<uint32_t> distinct;
  for (uint32_t t = 0; t < tokens; ++t) {
    kernels::f32_matvec(lw.router.data(), config_.experts, hidden, &normed_[size_t{t} * hidden],
                        router_logits_.data(), exec_);
    routing_[t].push_back(route(router_logits_, top_k, config_.norm_topk_prob));
    const Routing& r = routing_[t].back();
    distinct.insert(distinct.end(), r.experts.begin(), r.experts.end());
  }
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  experts_.request(layer, distinct);
  if (moe_hook_) moe_hook_(layer, moe_index, tokens, std::span<const float>(normed_.data(), size_t{tokens} * hidden));

  // Each distinct expert serves the (token, rank) pairs that chose it.
  std::vector<std::vector<std::pair<uint32_t, uint32_t>>> users(distinct.size());
  for (uint32_t t = 0; t < tokens; ++t) {
    const Routing& r = routing_[t][moe_index];
    for (uint32_t k = 0; k < top_k; ++k) {
      const auto at = std::lower_bound(distinct.begin(), distinct.end(), r.experts[k]) - distinct.begin();
      users[static_cast<size_t>(at)].emplace_back(t, k);
    }
  }

  gate_table_.build(*lw.codebooks[0], normed_.data(), hidden, tokens, exec_);
  up_table_.build(*lw.codebooks[1], normed_.data(), hidden, tokens, exec_);
  expert_out_.resize(size_t{tokens} * top_k * hidden);
  std::vector<uint32_t> user_tokens, sequence;
  for (size_t landed_count = 0; landed_count < distinct.size(); ++landed_count) {
    const LandedExpert landed = experts_.next();
    const auto& pairs = users.at(landed.index);
    const auto n = static_cast<uint32_t>(pairs.size());
    user_tokens.clear();
    for (const auto& [t, k] : pairs) user_tokens.push_back(t);
    gate_.resize(size_t{n} * width);
    up_.resize(size_t{n} * width);
    kernels::rvq_matmul(gate_table_, user_tokens, matrix_view(landed.record, layout, MatrixKind::kGate), gate_.data(), exec_);
    kernels::rvq_matmul(up_table_, user_tokens, matrix_view(landed.record, layout, MatrixKind::kUp), up_.data(), exec_);
    down_in_.resize(size_t{n} * width);
    for (size_t i = 0; i < size_t{n} * width; ++i) down_in_[i] = silu(gate_[i]) * up_[i];
    down_table_.build(*lw.codebooks[2], down_in_.data(), width, n, exec_);
    sequence.resize(n);
    std::iota(sequence.begin(), sequence.end(), 0u);
    down_out_.resize(size_t{n} * hidden);
    kernels::rvq_matmul(down_table_, sequence, matrix_view(landed.record, layout, MatrixKind::kDown), down_out_.data(), exec_);
    experts_.release(landed);
    for (uint32_t i = 0; i < n; ++i) {
      const auto [t, k] = pairs[i];
      std::copy_n(&down_out_[size_t{i} * hidden], hidden, &expert_out_[(size_t{t} * top_k + k) * hidden]);
    }
  }

  // Sum in routing order: acc = Σ_k w_k · y_k from zero, then x += acc.
  std::vector<float> acc(hidden);
  for (uint32_t t = 0; t < tokens; ++t) {
    std::fill(acc.begin(), acc.end(), 0.0f);
    const Routing& r = routing_[t][moe_index];
    for (uint32_t k = 0; k < top_k; ++k) {
      const float* y = &expert_out_[(size_t{t} * top_k + k) * hidden];
      for (uint32_t i = 0; i < hidden; ++i) acc[i] += r.weights[k] * y[i];
    }
    float* x = &x_[size_t{t} * hidden];
    for (uint32_t i = 0; i < hidden; ++i) x[i] += acc[i];
  }
}

void Transformer::dense_mlp(uint32_t layer, uint32_t tokens) {
  const LayerWeights& lw = weights_.layers[layer];
  const uint32_t hidden = config_.hidden, width = config_.dense_width;
  gate_.resize(size_t{tokens} * width);
  up_.resize(size_t{tokens} * width);
  lw.dense_gate.apply(normed_.data(), tokens, gate_.data(), exec_);
  lw.dense_up.apply(normed_.data(), tokens, up_.data(), exec_);
  for (size_t i = 0; i < gate_.size(); ++i) gate_[i] = silu(gate_[i]) * up_[i];
  proj_.resize(size_t{tokens} * hidden);
  lw.dense_down.apply(gate_.data(), tokens, proj_.data(), exec_);
  for (size_t i = 0; i < size_t{tokens} * hidden; ++i) x_[i] += proj_[i];
}

}  // namespace sluice
