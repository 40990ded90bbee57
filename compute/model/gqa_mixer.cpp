// compute/model/gqa_mixer.cpp: grouped-query softmax attention with the
// families' q/k norm placements (none, whole vector, per head), clip_qkv and
// half-split RoPE, over a sequence's f32 KV cache.
#include <algorithm>

#include "compute/model/attention.h"
#include "compute/model/mixer.h"
#include "compute/model/ops.h"

namespace sluice {
namespace {

class GqaMixer final : public Mixer {
 public:
  GqaMixer(const ModelConfig& config, const ModelWeights& weights, uint32_t context,
           kernels::Exec exec)
      : config_(config),
        g_(config.gqa),
        weights_(weights),
        exec_(exec),
        rope_(config.rope, context),
        context_(context),
        scale_(config.attention_scale()) {}

  void forward(uint32_t layer, const float* normed, uint32_t tokens, uint32_t first_position,
               MixerState& state, float* out) override {
    const MixerSegment one{tokens, first_position, &state};
    forward_segments(layer, normed, std::span(&one, 1), config_.hidden, out);
  }

  // q, k, v and o project every row of every segment at once (quant_matmul
  // is row by row, so each row is as it would be alone); norms, RoPE, the
  // cache and attention go segment by segment.
  void forward_segments(uint32_t layer, const float* normed, std::span<const MixerSegment> segments,
                        uint32_t, float* out) override {
    const GqaWeights& w = weights_.layers[layer].gqa;
    const uint32_t head_dim = g_.head_dim;
    const uint32_t q_width = g_.heads * head_dim, kv_width = g_.kv_heads * head_dim;
    uint32_t rows = 0;
    for (const MixerSegment& s : segments) rows += s.tokens;
    q_.resize(size_t{rows} * q_width);
    k_.resize(size_t{rows} * kv_width);
    v_.resize(size_t{rows} * kv_width);
    w.q.apply(normed, rows, q_.data(), exec_);
    w.k.apply(normed, rows, k_.data(), exec_);
    w.v.apply(normed, rows, v_.data(), exec_);
    attn_.resize(size_t{rows} * q_width);
    uint32_t row = 0;
    for (const MixerSegment& s : segments) {
      KvCache cache(*s.state, kv_width);
      for (uint32_t t = 0; t < s.tokens; ++t) place(w, cache, layer, row + t, s.first_position + t);
      attend(&q_[size_t{row} * q_width], q_width, s.tokens, cache, layer, s.first_position,
             GqaShape{g_.heads, g_.kv_heads, head_dim, scale_}, &attn_[size_t{row} * q_width],
             q_width, scratch_, exec_);
      row += s.tokens;
    }
    w.o.apply(attn_.data(), rows, out, exec_);
  }

  MixerState make_state() const override {
    return KvCache::make_state(config_.layers, context_, g_.kv_heads * g_.head_dim);
  }

 private:
  // Row `row` of q, k, v: normed, clipped and rotated for `position`; its
  // key and value go into the cache there.
  void place(const GqaWeights& w, KvCache& cache, uint32_t layer, uint32_t row, uint32_t position) {
    const uint32_t head_dim = g_.head_dim;
    const uint32_t q_width = g_.heads * head_dim, kv_width = g_.kv_heads * head_dim;
    float* q = &q_[size_t{row} * q_width];
    float* k = &k_[size_t{row} * kv_width];
    float* v = &v_[size_t{row} * kv_width];
    if (g_.qk_norm == QkNorm::kWholeVector) {
      rms_norm(q, w.q_norm.data(), q_width, config_.rms_eps, q);
      rms_norm(k, w.k_norm.data(), kv_width, config_.rms_eps, k);
    } else if (g_.qk_norm == QkNorm::kPerHead) {
      for (uint32_t h = 0; h < g_.heads; ++h)
        rms_norm(q + h * head_dim, w.q_norm.data(), head_dim, config_.rms_eps, q + h * head_dim);
      for (uint32_t h = 0; h < g_.kv_heads; ++h)
        rms_norm(k + h * head_dim, w.k_norm.data(), head_dim, config_.rms_eps, k + h * head_dim);
    }
    if (g_.clip_qkv > 0.0f) {
      const float c = g_.clip_qkv;
      for (uint32_t i = 0; i < q_width; ++i) q[i] = std::clamp(q[i], -c, c);
      for (uint32_t i = 0; i < kv_width; ++i) k[i] = std::clamp(k[i], -c, c);
      for (uint32_t i = 0; i < kv_width; ++i) v[i] = std::clamp(v[i], -c, c);
    }
    for (uint32_t h = 0; h < g_.heads; ++h) rope_.rotate(q + h * head_dim, position);
    for (uint32_t h = 0; h < g_.kv_heads; ++h) rope_.rotate(k + h * head_dim, position);
    std::copy(k, k + kv_width, cache.key(layer, position));
    std::copy(v, v + kv_width, cache.value(layer, position));
  }

  const ModelConfig& config_;
  const GqaConfig& g_;
  const ModelWeights& weights_;
  kernels::Exec exec_;
  RopeTable rope_;
  uint32_t context_;
  float scale_;
  std::vector<float> q_, k_, v_, attn_;
  std::vector<AttentionScratch> scratch_;
};

}  // namespace

std::unique_ptr<Mixer> make_gqa_mixer(const ModelConfig& config, const ModelWeights& weights, uint32_t context,
                                      kernels::Exec exec) {
  return std::make_unique<GqaMixer>(config, weights, context, exec);
}

}  // namespace sluice
