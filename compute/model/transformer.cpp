// compute/model/transformer.cpp: the layer loop. All activations are f32; the
// sums whose order matters for agreement with scripts/reference.py are noted.
#include "compute/model/transformer.h"

#include <algorithm>
#include <cmath>
#include <numeric>

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
      kda_(config.kda_layers() > 0 ? make_kda_mixer(config, weights, context, exec) : nullptr) {}

SequenceState Transformer::new_sequence() const {
  return SequenceState(attention_->make_state(), kda_ ? kda_->make_state() : MixerState(),
                       context_);
}

void Transformer::forward(SequenceState& sequence, std::span<const int32_t> tokens,
                          std::span<float> logits, bool all_positions) {
  if (tokens.empty()) fail("forward: no tokens");
  const Segment segment{&sequence, tokens};
  run(std::span<const Segment>(&segment, 1), logits, all_positions);
}

void Transformer::forward_batch(std::span<SequenceState* const> sequences,
                                std::span<const int32_t> tokens, std::span<float> logits) {
  if (sequences.empty()) fail("forward_batch: no sequences");
  if (tokens.size() != sequences.size()) {
    fail("forward_batch: {} tokens for {} sequences (one each)", tokens.size(), sequences.size());
  }
  std::vector<Segment> segments;
  for (size_t i = 0; i < sequences.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (sequences[j] == sequences[i])
        fail("forward_batch: sequence {} is also sequence {}", i, j);
    }
    segments.push_back({sequences[i], tokens.subspan(i, 1)});
  }
  run(segments, logits, false);
}

void Transformer::run(std::span<const Segment> segments, std::span<float> logits,
                      bool all_positions) {
  positions_.clear();
  for (const Segment& segment : segments) {
    const uint32_t position = segment.sequence->position();
    if (segment.sequence->context() != context_)
      fail("forward: a sequence made for another context length");
    if (size_t{position} + segment.tokens.size() > context_) {
      fail("context full: {} tokens do not fit after position {} (context length {}; raise --ctx)",
           segment.tokens.size(), position, context_);
    }
    for (size_t t = 0; t < segment.tokens.size(); ++t)
      positions_.push_back(position + static_cast<uint32_t>(t));
  }
  const auto count = static_cast<uint32_t>(positions_.size());
  const size_t rows_out = all_positions ? count : segments.size();
  if (logits.size() < rows_out * config_.vocab) fail("forward: logits buffer too small");

  const uint32_t hidden = config_.hidden;
  x_.resize(size_t{count} * hidden);
  normed_.resize(size_t{count} * hidden);
  std::vector<int32_t> ids;
  for (const Segment& segment : segments)
    ids.insert(ids.end(), segment.tokens.begin(), segment.tokens.end());
  for (uint32_t t = 0; t < count; ++t) {
    if (ids[t] < 0 || static_cast<uint32_t>(ids[t]) >= config_.vocab) {
      fail("token id {} is outside the vocabulary (size {})", ids[t], config_.vocab);
    }
    weights_.embed.row(static_cast<uint32_t>(ids[t]), &x_[size_t{t} * hidden]);
  }

  routing_.assign(count, {});
  size_t moe_index = 0;
  proj_.resize(size_t{count} * hidden);
  for (uint32_t layer = 0; layer < config_.layers; ++layer) {
    const LayerWeights& lw = weights_.layers[layer];
    for (uint32_t t = 0; t < count; ++t) {
      rms_norm(&x_[size_t{t} * hidden], lw.input_norm.data(), hidden, config_.rms_eps, &normed_[size_t{t} * hidden]);
    }
    // The mixers run sequence by sequence, each on its own state.
    const bool kda = config_.is_kda(layer);
    Mixer& mixer = kda ? *kda_ : *attention_;
    size_t row = 0;
    for (const Segment& segment : segments) {
      SequenceState& sequence = *segment.sequence;
      const auto n = static_cast<uint32_t>(segment.tokens.size());
      mixer.forward(layer, &normed_[row * hidden], n, sequence.position(),
                    kda ? sequence.kda() : sequence.attention(), &proj_[row * hidden]);
      row += n;
    }
    for (size_t i = 0; i < size_t{count} * hidden; ++i) x_[i] += proj_[i];
    for (uint32_t t = 0; t < count; ++t) {
      rms_norm(&x_[size_t{t} * hidden], lw.post_attention_norm.data(), hidden, config_.rms_eps,
               &normed_[size_t{t} * hidden]);
    }
    if (lw.moe) {
      moe(layer, count, moe_index++);
    } else {
      swiglu(lw.dense.gate, lw.dense.up, lw.dense.down, count);
    }
  }

  // The rows that get logits: every token, or each segment's last.
  std::vector<uint32_t> out_rows;
  size_t row = 0;
  for (const Segment& segment : segments) {
    for (size_t t = 0; t < segment.tokens.size(); ++t, ++row) {
      if (all_positions || t + 1 == segment.tokens.size())
        out_rows.push_back(static_cast<uint32_t>(row));
    }
  }
  for (size_t i = 0; i < out_rows.size(); ++i) {
    rms_norm(&x_[size_t{out_rows[i]} * hidden], weights_.final_norm.data(), hidden, config_.rms_eps,
             &normed_[i * hidden]);
  }
  weights_.lm_head.apply(normed_.data(), static_cast<uint32_t>(rows_out), logits.data(), exec_);
  for (const Segment& segment : segments) segment.sequence->advance(segment.tokens);
}

void Transformer::moe(uint32_t layer, uint32_t tokens, size_t moe_index) {
  const MoeWeights& lw = *weights_.layers[layer].moe;
  const uint32_t hidden = config_.hidden, width = config_.expert_width, top_k = config_.top_k;
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
  if (!lw.shared_gate.empty()) swiglu(lw.shared_gate, lw.shared_up, lw.shared_down, tokens);
}

void Transformer::swiglu(const Linear& gate, const Linear& up, const Linear& down, uint32_t tokens) {
  const uint32_t hidden = config_.hidden, width = gate.rows();
  gate_.resize(size_t{tokens} * width);
  up_.resize(size_t{tokens} * width);
  gate.apply(normed_.data(), tokens, gate_.data(), exec_);
  up.apply(normed_.data(), tokens, up_.data(), exec_);
  for (size_t i = 0; i < gate_.size(); ++i) gate_[i] = silu(gate_[i]) * up_[i];
  proj_.resize(size_t{tokens} * hidden);
  down.apply(gate_.data(), tokens, proj_.data(), exec_);
  for (size_t i = 0; i < size_t{tokens} * hidden; ++i) x_[i] += proj_[i];
}

}  // namespace sluice
