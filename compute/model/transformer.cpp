// compute/model/transformer.cpp: the layer loop. All activations are f32; the
// sums whose order matters for agreement with scripts/reference.py are noted.
#include "compute/model/transformer.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "compute/model/activation.h"
#include "compute/model/latent_moe.h"
#include "compute/model/ops.h"
#include "proto/error.h"

namespace sluice {
namespace {

kernels::RvqMatrixView matrix_view(const uint8_t* record, const RecordLayout& layout, MatrixKind kind) {
  kernels::RvqMatrixView view;
  view.shape = layout.matrices[static_cast<int>(kind)];
  view.indices = record + layout.matrix_offset(kind);
  view.scales = reinterpret_cast<const uint16_t*>(record + layout.scales_offset(kind));
  return view;
}

}  // namespace

Transformer::Transformer(const ModelConfig& config, const ModelWeights& weights, ExpertSource& experts,
                         uint32_t context, kernels::Exec exec)
    : config_(config),
      weights_(weights),
      experts_(experts),
      exec_(exec),
      context_(context),
      attention_(make_mixer(config, weights, context, exec)),
      kda_(config.kda_layers() > 0 ? make_kda_mixer(config, weights, context, exec) : nullptr),
      attn_res_(config.attn_res_block > 0 ? std::make_unique<AttnRes>(config, weights) : nullptr) {}

void Transformer::forward(std::span<const int32_t> tokens, std::span<float> logits, bool all_positions) {
  const auto count = static_cast<uint32_t>(tokens.size());
  if (count == 0) fail("forward: no tokens");
  if (size_t{position_} + count > context_) {
    fail("context full: {} tokens do not fit after position {} (context length {}; raise --ctx)", count, position_,
         context_);
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
  proj_.resize(size_t{count} * hidden);
  for (uint32_t layer = 0; layer < config_.layers; ++layer) {
    const LayerWeights& lw = weights_.layers[layer];
    const float* mixer_in = attn_res_ ? attn_res_->before_mixer(layer, x_.data(), count) : x_.data();
    for (uint32_t t = 0; t < count; ++t) {
      rms_norm(&mixer_in[size_t{t} * hidden], lw.input_norm.data(), hidden, config_.rms_eps,
               &normed_[size_t{t} * hidden]);
    }
    Mixer& mixer = config_.is_kda(layer) ? *kda_ : *attention_;
    mixer.forward(layer, normed_.data(), count, position_, proj_.data());
    for (size_t i = 0; i < size_t{count} * hidden; ++i) x_[i] += proj_[i];
    const float* ffn_in = attn_res_ ? attn_res_->before_ffn(layer, x_.data(), count) : x_.data();
    for (uint32_t t = 0; t < count; ++t) {
      rms_norm(&ffn_in[size_t{t} * hidden], lw.post_attention_norm.data(), hidden, config_.rms_eps,
               &normed_[size_t{t} * hidden]);
    }
    if (lw.moe) {
      moe(layer, count, moe_index++);
    } else {
      swiglu(lw.dense.gate, lw.dense.up, lw.dense.down, count);
    }
  }

  const uint32_t first = all_positions ? 0 : count - 1;
  const float* last = attn_res_ ? attn_res_->final_mixture(x_.data(), count) : x_.data();
  for (uint32_t t = first; t < count; ++t) {
    rms_norm(&last[size_t{t} * hidden], weights_.final_norm.data(), hidden, config_.rms_eps,
             &normed_[size_t{t - first} * hidden]);
  }
  weights_.lm_head.apply(normed_.data(), static_cast<uint32_t>(rows_out), logits.data(), exec_);
  position_ += count;
}

void Transformer::moe(uint32_t layer, uint32_t tokens, size_t moe_index) {
  const MoeWeights& lw = *weights_.layers[layer].moe;
  const uint32_t hidden = config_.hidden, width = config_.expert_width, top_k = config_.top_k;
  const uint32_t expert_hidden = config_.expert_hidden();  // K3's experts see a latent
  const RecordLayout& layout = lw.bank->layout;

  router_logits_.resize(config_.experts);
  std::vector<uint32_t> distinct;
  for (uint32_t t = 0; t < tokens; ++t) {
    kernels::f32_matvec(lw.router.data(), config_.experts, hidden, &normed_[size_t{t} * hidden],
                        router_logits_.data(), exec_);
    routing_[t].push_back(route(config_.router, router_logits_, lw.bias));
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

  const float* expert_in = latent_input(config_, lw, normed_.data(), tokens, latent_in_, exec_);
  gate_table_.build(*lw.codebooks[0], expert_in, expert_hidden, tokens, exec_);
  up_table_.build(*lw.codebooks[1], expert_in, expert_hidden, tokens, exec_);
  expert_out_.resize(size_t{tokens} * top_k * expert_hidden);
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
    gated_activation(config_.activation, gate_.data(), up_.data(), down_in_.data(), size_t{n} * width);
    down_table_.build(*lw.codebooks[2], down_in_.data(), width, n, exec_);
    sequence.resize(n);
    std::iota(sequence.begin(), sequence.end(), 0u);
    down_out_.resize(size_t{n} * expert_hidden);
    kernels::rvq_matmul(down_table_, sequence, matrix_view(landed.record, layout, MatrixKind::kDown), down_out_.data(), exec_);
    experts_.release(landed);
    for (uint32_t i = 0; i < n; ++i) {
      const auto [t, k] = pairs[i];
      std::copy_n(&down_out_[size_t{i} * expert_hidden], expert_hidden,
                  &expert_out_[(size_t{t} * top_k + k) * expert_hidden]);
    }
  }

  // Sum in routing order: acc = Σ_k w_k · y_k from zero, then x += acc
  // (through K3's latent norm and up projection).
  routed_.assign(size_t{tokens} * expert_hidden, 0.0f);
  for (uint32_t t = 0; t < tokens; ++t) {
    float* acc = &routed_[size_t{t} * expert_hidden];
    const Routing& r = routing_[t][moe_index];
    for (uint32_t k = 0; k < top_k; ++k) {
      const float* y = &expert_out_[(size_t{t} * top_k + k) * expert_hidden];
      for (uint32_t i = 0; i < expert_hidden; ++i) acc[i] += r.weights[k] * y[i];
    }
  }
  add_routed(config_, lw, routed_.data(), tokens, x_.data(), proj_, exec_);
  if (!lw.shared_gate.empty()) swiglu(lw.shared_gate, lw.shared_up, lw.shared_down, tokens);
}

void Transformer::swiglu(const Linear& gate, const Linear& up, const Linear& down, uint32_t tokens) {
  const uint32_t hidden = config_.hidden, width = gate.rows();
  gate_.resize(size_t{tokens} * width);
  up_.resize(size_t{tokens} * width);
  gate.apply(normed_.data(), tokens, gate_.data(), exec_);
  up.apply(normed_.data(), tokens, up_.data(), exec_);
  gated_activation(config_.activation, gate_.data(), up_.data(), gate_.data(), gate_.size());
  proj_.resize(size_t{tokens} * hidden);
  down.apply(gate_.data(), tokens, proj_.data(), exec_);
  for (size_t i = 0; i < size_t{tokens} * hidden; ++i) x_[i] += proj_[i];
}

}  // namespace sluice
