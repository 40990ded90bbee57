// compute/model/mla_mixer.cpp: multi-head latent attention in its absorbed
// form (architectures.md §3.4). A sequence's cache holds, per layer and position, the
// normed latent and the rotated shared rope key, never expanded keys or
// values: kv_b_proj's key half is folded into the query and its value half
// applied to the attention-weighted latent. Without rotary dims (Kimi-
// Linear's NoPE layers) the rope part is cached and dotted unrotated.
#include <algorithm>
#include <cmath>

#include "compute/kernels/attend.h"
#include "compute/model/attention.h"
#include "compute/model/mixer.h"
#include "compute/model/ops.h"
#include "proto/error.h"

namespace sluice {
namespace {

class MlaMixer final : public Mixer {
 public:
  MlaMixer(const ModelConfig& config, const ModelWeights& weights, uint32_t context, kernels::Exec exec)
      : m_(config.mla),
        weights_(weights),
        exec_(exec),
        rope_(config.rope, context),
        context_(context),
        scale_(config.attention_scale()),
        slot_(config.layers, UINT32_MAX) {
    // Only this mixer's layers hold a cache (Kimi-Linear interleaves KDA).
    for (uint32_t i = 0; i < config.layers; ++i) {
      if (!config.is_kda(i)) slot_[i] = slots_++;
    }
  }

  void forward(uint32_t layer, const float* normed, uint32_t tokens, uint32_t first_position,
               MixerState& cache, float* out) override {
    const MlaWeights& w = weights_.layers[layer].mla;
    const uint32_t heads = m_.heads, latent = m_.kv_lora_rank, rope = m_.rope_dim, nope = m_.nope_dim;
    const uint32_t qk = m_.qk_dim(), v_dim = m_.v_dim, cached = m_.cached_width();
    queries(w, normed, tokens);
    kva_.resize(size_t{tokens} * cached);
    w.kv_a.apply(normed, tokens, kva_.data(), exec_);
    for (uint32_t t = 0; t < tokens; ++t) {
      const uint32_t position = first_position + t;
      float* row = entry(cache, layer, position);
      const float* a = &kva_[size_t{t} * cached];
      rms_norm(a, w.kv_a_norm.data(), latent, m_.latent_norm_eps, row);
      std::copy(a + latent, a + cached, row + latent);
      rope_.rotate(row + latent, position);
      for (uint32_t h = 0; h < heads; ++h) rope_.rotate(&q_[(size_t{t} * heads + h) * qk + nope], position);
    }

    // q̄[t][h] = W_UK[h]ᵀ q_nope[t][h]: one head's key half dequantized once per chunk.
    absorbed_.assign(size_t{tokens} * heads * latent, 0.0f);
    key_half_.resize(size_t{nope} * latent);
    for (uint32_t h = 0; h < heads; ++h) {
      for (uint32_t i = 0; i < nope; ++i) w.kv_b.row(h * (nope + v_dim) + i, &key_half_[size_t{i} * latent]);
      for (uint32_t t = 0; t < tokens; ++t) {
        const float* q_nope = &q_[(size_t{t} * heads + h) * qk];
        float* q_bar = &absorbed_[(size_t{t} * heads + h) * latent];
        for (uint32_t i = 0; i < nope; ++i) {
          const float* k_row = &key_half_[size_t{i} * latent];
          for (uint32_t j = 0; j < latent; ++j) q_bar[j] += q_nope[i] * k_row[j];
        }
      }
    }

    // Both halves of kv_b_proj are applied as f32 weights (the reference
    // models the same), dequantized once per chunk.
    value_half_.resize(size_t{heads} * v_dim * latent);
    for (uint32_t h = 0; h < heads; ++h) {
      for (uint32_t i = 0; i < v_dim; ++i) {
        w.kv_b.row(h * (nope + v_dim) + nope + i, &value_half_[(size_t{h} * v_dim + i) * latent]);
      }
    }
    attn_.resize(size_t{tokens} * heads * v_dim);
    // Every head of every token reads the same latents: positions outside,
    // the rows (token, head) of a pass inside, so each cached entry is read
    // once per pass; each row's scores and weights are the bits it gets alone.
    const uint32_t batch = tokens_per_pass(heads, heads, context_, first_position, tokens);
    for (uint32_t t0 = 0; t0 < tokens; t0 += batch) {
      const uint32_t rows = std::min(batch, tokens - t0) * heads;
      const uint32_t longest = first_position + t0 + rows / heads;
      counts_.resize(rows);
      for (uint32_t r = 0; r < rows; ++r) counts_[r] = first_position + t0 + r / heads + 1;
      scores_.resize(size_t{rows} * longest);
      for (uint32_t s = 0; s < longest; ++s) {
        const float* c = entry(cache, layer, s);
        for (uint32_t r = 0; r < rows; ++r) {
          if (s >= counts_[r]) continue;
          const size_t row = size_t{t0} * heads + r;  // (token, head) of the chunk
          const float* q_bar = &absorbed_[row * latent];
          const float* q_rope = &q_[row * qk + nope];
          scores_[size_t{r} * longest + s] =
              (kernels::lane_dot(q_bar, c, latent, exec_.isa) +
               kernels::lane_dot(q_rope, c + latent, rope, exec_.isa)) *
              scale_;
        }
      }
      for (uint32_t r = 0; r < rows; ++r)
        softmax_weights(&scores_[size_t{r} * longest], counts_[r]);
      read_out_.assign(size_t{rows} * latent, 0.0f);
      kernels::attention_values(scores_.data(), longest, counts_, entry(cache, layer, 0),
                                cache.row_floats(), latent, read_out_.data(), exec_.isa);
      // o[t][h] = W_UV[h] u[t][h]: the value half of head h's rows.
      for (uint32_t r = 0; r < rows; ++r) {
        const uint32_t h = r % heads;
        float* o = &attn_[(size_t{t0} * heads + r) * v_dim];
        for (uint32_t i = 0; i < v_dim; ++i)
          o[i] = kernels::lane_dot(&value_half_[(size_t{h} * v_dim + i) * latent],
                                   &read_out_[size_t{r} * latent], latent, exec_.isa);
      }
    }
    if (m_.output_gate) {
      // K3: the concatenated heads ⊙ σ(g_proj x) before o_proj (k3.md §2.3).
      gate_.resize(attn_.size());
      w.gate.apply(normed, tokens, gate_.data(), exec_);
      for (size_t i = 0; i < attn_.size(); ++i) attn_[i] /= 1.0f + std::exp(-gate_[i]);
    }
    w.o.apply(attn_.data(), tokens, out, exec_);
  }

  // [slot][position][latent | rope key]
  MixerState make_state() const override {
    return MixerState(slots_, context_, m_.cached_width(), 0);
  }

 private:
  void queries(const MlaWeights& w, const float* normed, uint32_t tokens) {
    q_.resize(size_t{tokens} * m_.heads * m_.qk_dim());
    if (w.q_a.empty()) {
      w.q.apply(normed, tokens, q_.data(), exec_);
      return;
    }
    q_latent_.resize(size_t{tokens} * m_.q_lora_rank);
    w.q_a.apply(normed, tokens, q_latent_.data(), exec_);
    for (uint32_t t = 0; t < tokens; ++t) {
      float* row = &q_latent_[size_t{t} * m_.q_lora_rank];
      rms_norm(row, w.q_a_norm.data(), m_.q_lora_rank, m_.latent_norm_eps, row);
    }
    w.q_b.apply(q_latent_.data(), tokens, q_.data(), exec_);
  }

  float* entry(MixerState& cache, uint32_t layer, uint32_t position) const {
    if (position >= context_) fail("position {} is past the context length {}", position, context_);
    return cache.row(slot_[layer], position);
  }

  const MlaConfig& m_;
  const ModelWeights& weights_;
  kernels::Exec exec_;
  RopeTable rope_;
  uint32_t context_;
  float scale_;
  std::vector<uint32_t> slot_;  // model layer → cache slot
  uint32_t slots_ = 0;
  std::vector<float> q_, q_latent_, kva_, absorbed_, key_half_, value_half_, attn_, read_out_, gate_;
  std::vector<float> scores_;
  std::vector<uint32_t> counts_;
};

}  // namespace

std::unique_ptr<Mixer> make_mla_mixer(const ModelConfig& config, const ModelWeights& weights, uint32_t context,
                                      kernels::Exec exec) {
  return std::make_unique<MlaMixer>(config, weights, context, exec);
}

}  // namespace sluice
