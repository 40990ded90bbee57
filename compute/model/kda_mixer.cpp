// compute/model/kda_mixer.cpp: the Kimi Delta Attention layers (§4.3): the
// projections, the short causal convolutions with their carried inputs, the
// decay and write-strength gates, L2 normalisation as fla places its
// epsilon, the recurrence (kda.h), the gated output norm, the heads split
// over the pool. State per layer is fixed: each head's d × d matrix and the
// convolutions' last inputs; it is cleared whenever a sequence starts at position 0.
#include <algorithm>
#include <cmath>

#include "compute/kernels/thread_pool.h"
#include "compute/model/kda.h"
#include "compute/model/mixer.h"
#include "compute/model/ops.h"
#include "proto/error.h"

namespace sluice {
namespace {

float softplus(float u) { return u > 20.0f ? u : std::log1p(std::exp(u)); }
float sigmoid(float u) { return 1.0f / (1.0f + std::exp(-u)); }

// x / sqrt(‖x‖² + 1e-6) · scale, fla's l2norm.
void l2_normalize(float* x, uint32_t n, float scale) {
  float sum = 0.0f;
  for (uint32_t i = 0; i < n; ++i) sum += x[i] * x[i];
  const float inverse = scale / std::sqrt(sum + 1e-6f);
  for (uint32_t i = 0; i < n; ++i) x[i] *= inverse;
}

class KdaMixer final : public Mixer {
  // One head's gathered inputs, output and the recurrence's scratch.
  struct HeadScratch {
    std::vector<float> q, k, v, g, beta, out, work;
  };

 public:
  KdaMixer(const ModelConfig& config, const ModelWeights& weights, kernels::Exec exec)
      : config_(config), kda_(config.kda), weights_(weights), exec_(exec), index_(config.layers, kNone) {
    for (uint32_t i = 0; i < config.layers; ++i) {
      if (config.is_kda(i)) index_[i] = layers_++;
    }
  }

  void forward(uint32_t layer, const float* normed, uint32_t tokens, uint32_t first_position,
               MixerState& state, float* out) override {
    if (index_[layer] == kNone) fail("layer {} is not a KDA layer", layer);
    const KdaWeights& w = weights_.layers[layer].kda;
    const uint32_t heads = kda_.heads, d = kda_.head_dim, p = kda_.width();
    float* recurrent = &state.fixed()[size_t{index_[layer]} * kda_.state_floats()];
    float* carried = recurrent + size_t{heads} * d * d;  // [q, k, v][kernel − 1][p]
    if (first_position == 0) std::fill(recurrent, recurrent + kda_.state_floats(), 0.0f);

    const size_t rows = size_t{tokens} * p;
    q_.resize(rows), k_.resize(rows), v_.resize(rows);
    w.q.apply(normed, tokens, q_.data(), exec_);
    w.k.apply(normed, tokens, k_.data(), exec_);
    w.v.apply(normed, tokens, v_.data(), exec_);
    convolve(w.q_conv, q_, carried, tokens);
    convolve(w.k_conv, k_, carried + size_t{kda_.conv_kernel - 1} * p, tokens);
    convolve(w.v_conv, v_, carried + size_t{2} * (kda_.conv_kernel - 1) * p, tokens);
    gates(w, normed, tokens);

    attn_.resize(rows);
    // Heads are independent: the pool splits them, each worker with its own scratch.
    const size_t workers = exec_.pool != nullptr ? exec_.pool->size() : 1;
    if (head_scratch_.size() < workers) head_scratch_.resize(workers);
    auto run_heads = [&](size_t worker, size_t begin, size_t end) {
      for (size_t h = begin; h < end; ++h) one_head(w, recurrent, static_cast<uint32_t>(h), tokens, head_scratch_[worker]);
    };
    if (workers > 1)
      exec_.pool->parallel_for_workers(heads, 1, run_heads);
    else
      run_heads(0, 0, heads);
    w.o.apply(attn_.data(), tokens, out, exec_);
  }

  // Head h of every token: gather [tokens][d], normalise, run the
  // recurrence (the chunked form for several tokens), then the gated output
  // norm RMSNorm(o_h) ⊙ σ(γ_h) into the head's columns of attn_.
  void one_head(const KdaWeights& w, float* recurrent, uint32_t h, uint32_t tokens, HeadScratch& s) {
    const uint32_t d = kda_.head_dim, p = kda_.width();
    const float query_scale = 1.0f / std::sqrt(static_cast<float>(d));
    const size_t head_rows = size_t{tokens} * d;
    s.q.resize(head_rows), s.k.resize(head_rows), s.v.resize(head_rows), s.g.resize(head_rows);
    s.beta.resize(tokens), s.out.resize(head_rows);
    for (uint32_t t = 0; t < tokens; ++t) {
      const size_t from = size_t{t} * p + size_t{h} * d, to = size_t{t} * d;
      std::copy_n(&q_[from], d, &s.q[to]);
      std::copy_n(&k_[from], d, &s.k[to]);
      std::copy_n(&v_[from], d, &s.v[to]);
      std::copy_n(&decay_[from], d, &s.g[to]);
      l2_normalize(&s.q[to], d, query_scale);
      l2_normalize(&s.k[to], d, 1.0f);
      s.beta[t] = beta_[size_t{t} * kda_.heads + h];
    }
    float* state = recurrent + size_t{h} * d * d;
    if (tokens == 1) {
      kda_recurrent({s.q.data(), s.k.data(), s.v.data(), s.g.data(), s.beta.data()}, 1, d, state, s.out.data(),
                    s.work, exec_.isa);
    } else {
      for (uint32_t start = 0; start < tokens; start += kKdaChunk) {
        const uint32_t n = std::min(kKdaChunk, tokens - start);
        const size_t at = size_t{start} * d;
        kda_chunk({&s.q[at], &s.k[at], &s.v[at], &s.g[at], &s.beta[start]}, n, d, state, &s.out[at], s.work);
      }
    }
    for (uint32_t t = 0; t < tokens; ++t) {
      float* o = &attn_[size_t{t} * p + size_t{h} * d];
      rms_norm(&s.out[size_t{t} * d], w.o_norm.data(), d, config_.rms_eps, o);
      const float* gate = &gate_[size_t{t} * p + size_t{h} * d];
      for (uint32_t c = 0; c < d; ++c) o[c] *= sigmoid(gate[c]);
    }
  }

  // Per KDA layer: heads × d × d, then 3 × (kernel − 1) × p; nothing grows with position.
  MixerState make_state() const override {
    return MixerState(0, 0, 0, size_t{layers_} * kda_.state_floats());
  }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;


  // x[t][c] ← silu(Σ_j w[c][j] · in_{t−K+1+j}[c]): tap K−1 multiplies the
  // current token; inputs before the chunk come from `carried` (the last
  // K − 1 pre-activation rows), which is then replaced by this chunk's last.
  void convolve(const std::vector<float>& weight, std::vector<float>& x, float* carried, uint32_t tokens) {
    const uint32_t p = kda_.width(), taps = kda_.conv_kernel, history = taps - 1;
    sequence_.resize(size_t{history + tokens} * p);
    std::copy_n(carried, size_t{history} * p, sequence_.begin());
    std::copy(x.begin(), x.begin() + size_t{tokens} * p, sequence_.begin() + size_t{history} * p);
    for (uint32_t t = 0; t < tokens; ++t) {
      for (uint32_t c = 0; c < p; ++c) {
        float sum = 0.0f;
        for (uint32_t j = 0; j < taps; ++j) sum += weight[size_t{c} * taps + j] * sequence_[size_t{t + j} * p + c];
        x[size_t{t} * p + c] = silu(sum);
      }
    }
    std::copy_n(sequence_.begin() + size_t{tokens} * p, size_t{history} * p, carried);
  }

  // The log-decay g = −exp(A_log[h]) · softplus(f_b(f_a x) + dt_bias) (or
  // K3's bounded form), the write strength β = σ(b x) and the output gate
  // γ = g_b(g_a x) (or K3's full-rank g x).
  void gates(const KdaWeights& w, const float* normed, uint32_t tokens) {
    const uint32_t heads = kda_.heads, d = kda_.head_dim, p = kda_.width();
    low_rank_.resize(size_t{tokens} * d);
    decay_.resize(size_t{tokens} * p);
    w.decay_a.apply(normed, tokens, low_rank_.data(), exec_);
    w.decay_b.apply(low_rank_.data(), tokens, decay_.data(), exec_);
    for (uint32_t t = 0; t < tokens; ++t) {
      for (uint32_t c = 0; c < p; ++c) {
        float& g = decay_[size_t{t} * p + c];
        const float z = g + w.decay_bias[c], rate = std::exp(w.decay_log[c / d]);
        // K3 bounds the decay to (lb, 0) by a sigmoid (k3.md §2.2), not a clamp.
        g = kda_.bounded_decay ? kda_.gate_lower_bound * sigmoid(rate * z) : -rate * softplus(z);
      }
    }
    beta_.resize(size_t{tokens} * heads);
    w.beta.apply(normed, tokens, beta_.data(), exec_);
    for (float& b : beta_) b = sigmoid(b);
    gate_.resize(size_t{tokens} * p);
    if (kda_.full_rank_gate) {
      w.gate.apply(normed, tokens, gate_.data(), exec_);
      return;
    }
    w.gate_a.apply(normed, tokens, low_rank_.data(), exec_);
    w.gate_b.apply(low_rank_.data(), tokens, gate_.data(), exec_);
  }

  const ModelConfig& config_;
  const KdaConfig& kda_;
  const ModelWeights& weights_;
  kernels::Exec exec_;
  std::vector<uint32_t> index_;  // model layer → KDA layer, kNone for others
  uint32_t layers_ = 0;
  std::vector<float> q_, k_, v_, sequence_, low_rank_, decay_, beta_, gate_, attn_;
  std::vector<HeadScratch> head_scratch_;
};

}  // namespace

std::unique_ptr<Mixer> make_kda_mixer(const ModelConfig& config, const ModelWeights& weights, uint32_t /*context*/,
                                      kernels::Exec exec) {
  return std::make_unique<KdaMixer>(config, weights, exec);
}

}  // namespace sluice
