// compute/model/transformer.cpp: the layer loop. All activations are f32; the
// sums whose order matters for agreement with scripts/reference.py are noted.
#include "compute/model/transformer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <mutex>
#include <numeric>

#include "compute/kernels/rvq_crossover.h"
#include "compute/kernels/rvq_decoded.h"
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

constexpr uint32_t kNoTableRow = UINT32_MAX;

}  // namespace

Transformer::Transformer(const ModelConfig& config, const ModelWeights& weights, ExpertSource& experts,
                         uint32_t context, kernels::Exec exec)
    : config_(config),
      weights_(weights),
      experts_(experts),
      exec_(exec),
      context_(context),
      rvq_crossover_(config.expert_width > 0
                         ? kernels::rvq_decode_crossover(exec, config.expert_hidden(), config.expert_width)
                         : kernels::rvq_default_crossover(exec.isa)),
      attention_(make_mixer(config, weights, context, exec)),
      kda_(config.kda_layers() > 0 ? make_kda_mixer(config, weights, context, exec) : nullptr),
      attn_res_(config.attn_res_block > 0 ? std::make_unique<AttnRes>(config, weights) : nullptr) {}

SequenceState Transformer::new_sequence() const {
  return SequenceState(attention_->make_state(), kda_ ? kda_->make_state() : MixerState(),
                       context_);
}

void Transformer::forward(SequenceState& sequence, std::span<const int32_t> tokens,
                          std::span<float> logits, bool all_positions, std::span<const float> media_rows) {
  if (tokens.empty()) fail("forward: no tokens");
  const Segment segment{&sequence, tokens};
  run(std::span<const Segment>(&segment, 1), logits, all_positions, media_rows);
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
                      bool all_positions, std::span<const float> media_rows) {
  positions_.clear();
  decodes_ = std::all_of(segments.begin(), segments.end(),
                         [](const Segment& segment) { return segment.tokens.size() == 1; });
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
  auto mark = std::chrono::steady_clock::now();
  const auto lap = [&mark](double& into) {
    const auto now = std::chrono::steady_clock::now();
    into += std::chrono::duration<double>(now - mark).count();
    mark = now;
  };
  for (uint32_t t = 0; t < count; ++t) {
    if (ids[t] < 0 || static_cast<uint32_t>(ids[t]) >= config_.vocab) {
      fail("token id {} is outside the vocabulary (size {})", ids[t], config_.vocab);
    }
    weights_.embed_row(static_cast<uint32_t>(ids[t]), &x_[size_t{t} * hidden]);
  }
  if (!media_rows.empty()) splice_media(ids, media_rows);
  lap(times_.embedding);

  routing_.assign(count, {});
  size_t moe_index = 0;
  proj_.resize(size_t{count} * hidden);
  for (uint32_t layer = 0; layer < config_.layers; ++layer) {
    const LayerWeights& lw = weights_.layers[layer];
    // K3's depth mixtures are per row, so the chunk's rows from every segment go through together.
    const float* mixer_in = attn_res_ ? attn_res_->before_mixer(layer, x_.data(), count) : x_.data();
    for (uint32_t t = 0; t < count; ++t) {
      rms_norm(&mixer_in[size_t{t} * hidden], lw.input_norm.data(), hidden, config_.rms_eps,
               &normed_[size_t{t} * hidden]);
    }
    // Each sequence's rows act on its own state.
    const bool kda = config_.is_kda(layer);
    Mixer& mixer = kda ? *kda_ : *attention_;
    mixer_segments_.clear();
    for (const Segment& segment : segments) {
      SequenceState& sequence = *segment.sequence;
      mixer_segments_.push_back({static_cast<uint32_t>(segment.tokens.size()), sequence.position(),
                                 kda ? &sequence.kda() : &sequence.attention()});
    }
    mixer.forward_segments(layer, normed_.data(), mixer_segments_, hidden, proj_.data());
    for (size_t i = 0; i < size_t{count} * hidden; ++i) x_[i] += proj_[i];
    lap(config_.is_kda(layer) ? times_.kda : times_.attention);
    const float* ffn_in = attn_res_ ? attn_res_->before_ffn(layer, x_.data(), count) : x_.data();
    for (uint32_t t = 0; t < count; ++t) {
      rms_norm(&ffn_in[size_t{t} * hidden], lw.post_attention_norm.data(), hidden, config_.rms_eps,
               &normed_[size_t{t} * hidden]);
    }
    if (lw.moe) {
      moe(layer, count, moe_index++);
      lap(times_.moe);
    } else {
      swiglu(lw.dense.gate, lw.dense.up, lw.dense.down, count);
      lap(times_.dense);
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
  const float* last = attn_res_ ? attn_res_->final_mixture(x_.data(), count) : x_.data();
  for (size_t i = 0; i < out_rows.size(); ++i) {
    rms_norm(&last[size_t{out_rows[i]} * hidden], weights_.final_norm.data(), hidden, config_.rms_eps,
             &normed_[i * hidden]);
  }
  weights_.lm_head.apply(normed_.data(), static_cast<uint32_t>(rows_out), logits.data(), exec_);
  lap(times_.lm_head);
  for (const Segment& segment : segments) segment.sequence->advance(segment.tokens);
}

void Transformer::splice_media(std::span<const int32_t> ids, std::span<const float> rows) {
  if (!config_.vision) fail("forward: image rows given to a model without a vision tower");
  const uint32_t hidden = config_.hidden;
  const auto pad = static_cast<int32_t>(config_.vision->media_pad_id);
  const auto pads = static_cast<size_t>(std::count(ids.begin(), ids.end(), pad));
  if (rows.size() != pads * hidden) {
    fail("forward: {} values of image rows for {} media pad tokens of width {}", rows.size(), pads, hidden);
  }
  const float* next = rows.data();
  for (size_t t = 0; t < ids.size(); ++t) {
    if (ids[t] != pad) continue;
    std::copy_n(next, hidden, &x_[t * hidden]);
    next += hidden;
  }
}

void Transformer::moe(uint32_t layer, uint32_t tokens, size_t moe_index) {
  const MoeWeights& lw = *weights_.layers[layer].moe;
  const uint32_t hidden = config_.hidden, top_k = config_.top_k;
  const uint32_t expert_hidden = config_.expert_hidden();  // K3's experts see a latent

  router_logits_.resize(config_.experts);
  distinct_.clear();
  for (uint32_t t = 0; t < tokens; ++t) {
    kernels::f32_matvec(lw.router.data(), config_.experts, hidden, &normed_[size_t{t} * hidden],
                        router_logits_.data(), exec_);
    routing_[t].push_back(route(config_.router, router_logits_, lw.bias));
    const Routing& r = routing_[t].back();
    distinct_.insert(distinct_.end(), r.experts.begin(), r.experts.end());
  }
  std::sort(distinct_.begin(), distinct_.end());
  distinct_.erase(std::unique(distinct_.begin(), distinct_.end()), distinct_.end());
  experts_.request(layer, distinct_);
  if (tokens == 1 && hold_next_ > 0) hold_next_layer(layer);
  if (moe_hook_) moe_hook_(layer, moe_index, tokens, std::span<const float>(normed_.data(), size_t{tokens} * hidden));

  // Each distinct expert serves the (token, rank) pairs that chose it, in
  // token order: counted, then placed.
  const size_t n_experts = distinct_.size();
  user_begin_.assign(n_experts + 1, 0);
  auto expert_at = [&](uint32_t expert) {
    return static_cast<size_t>(std::lower_bound(distinct_.begin(), distinct_.end(), expert) - distinct_.begin());
  };
  for (uint32_t t = 0; t < tokens; ++t)
    for (uint32_t k = 0; k < top_k; ++k) ++user_begin_[expert_at(routing_[t][moe_index].experts[k]) + 1];
  for (size_t e = 0; e < n_experts; ++e) user_begin_[e + 1] += user_begin_[e];
  user_pairs_.resize(size_t{tokens} * top_k);
  table_row_.assign(tokens, kNoTableRow);
  user_next_.assign(user_begin_.begin(), user_begin_.end() - 1);
  for (uint32_t t = 0; t < tokens; ++t)
    for (uint32_t k = 0; k < top_k; ++k) user_pairs_[user_next_[expert_at(routing_[t][moe_index].experts[k])]++] = {t, k};

  // Experts chosen by at least the crossover's count of tokens decode their
  // weights once; the others read gate/up tables, built only for their tokens.
  for (size_t e = 0; e < n_experts; ++e) {
    if (user_begin_[e + 1] - user_begin_[e] >= rvq_crossover_) continue;
    for (uint32_t i = user_begin_[e]; i < user_begin_[e + 1]; ++i) table_row_[user_pairs_[i].first] = 0;
  }
  table_tokens_.clear();
  for (uint32_t t = 0; t < tokens; ++t) {
    if (table_row_[t] == kNoTableRow) continue;
    table_row_[t] = static_cast<uint32_t>(table_tokens_.size());
    table_tokens_.push_back(t);
  }
  expert_in_ = latent_input(config_, lw, normed_.data(), tokens, latent_in_, exec_);
  if (!table_tokens_.empty()) {
    const auto rows = static_cast<uint32_t>(table_tokens_.size());
    const float* input = expert_in_;
    if (rows < tokens) {
      table_input_.resize(size_t{rows} * expert_hidden);
      for (uint32_t i = 0; i < rows; ++i) {
        std::copy_n(&expert_in_[size_t{table_tokens_[i]} * expert_hidden], expert_hidden,
                    &table_input_[size_t{i} * expert_hidden]);
      }
      input = table_input_.data();
    }
    const kernels::RvqTableBuild builds[] = {{&gate_table_, lw.codebooks[0].get()},
                                             {&up_table_, lw.codebooks[1].get()}};
    kernels::build_rvq_tables(builds, input, expert_hidden, rows, exec_);
  }

  // One parallel region for the whole block: each worker takes the next record
  // to land and computes that expert alone. The result of an expert does not
  // depend on which thread computes it, or with how many.
  expert_out_.resize(size_t{tokens} * top_k * expert_hidden);
  const size_t workers = exec_.pool != nullptr ? exec_.pool->size() : 1;
  expert_scratch_.resize(workers);
  if (workers > 1 && n_experts >= workers && experts_.records_held_at_once() >= workers) {
    kernels::Exec serial = exec_;  // every setting but the pool, which the experts share out
    serial.pool = nullptr;
    std::mutex source;
    exec_.pool->parallel_for_workers(n_experts, 1, [&](size_t worker, size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) {
        LandedExpert landed;
        {
          std::lock_guard lock(source);
          landed = experts_.next();
        }
        run_expert(landed, expert_scratch_[worker], serial, lw);
        std::lock_guard lock(source);
        experts_.release(landed);
      }
    });
  } else {
    for (size_t i = 0; i < n_experts; ++i) {
      const LandedExpert landed = experts_.next();
      run_expert(landed, expert_scratch_[0], exec_, lw);
      experts_.release(landed);
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
  if (!lw.shared_gate.empty()) {
    const auto start = std::chrono::steady_clock::now();
    swiglu(lw.shared_gate, lw.shared_up, lw.shared_down, tokens);
    times_.shared_experts += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
}

void Transformer::hold_next_layer(uint32_t layer) {
  uint32_t next = layer + 1;
  while (next < config_.layers && !weights_.layers[next].moe) ++next;
  if (next >= config_.layers) return;
  const MoeWeights& nw = *weights_.layers[next].moe;
  hold_logits_.resize(config_.experts);
  kernels::f32_matvec(nw.router.data(), config_.experts, config_.hidden, normed_.data(),
                      hold_logits_.data(), exec_);
  experts_.hold(next, rank_experts(config_.router, hold_logits_, nw.bias,
                                   std::min(hold_next_, config_.experts)));
}

void Transformer::run_expert(const LandedExpert& landed, ExpertScratch& scratch, const kernels::Exec& exec,
                             const MoeWeights& lw) {
  // The experts' rows are expert_hidden() wide: the hidden size, or K3's latent.
  const uint32_t hidden = config_.expert_hidden(), width = config_.expert_width, top_k = config_.top_k;
  const RecordLayout& layout = lw.bank->layout;
  const size_t e = landed.index;
  const uint32_t first = user_begin_.at(e), n = user_begin_.at(e + 1) - first;
  const auto* pairs = &user_pairs_[first];
  scratch.gate.resize(size_t{n} * width);
  scratch.up.resize(size_t{n} * width);
  scratch.hidden.resize(size_t{n} * width);
  scratch.out.resize(size_t{n} * hidden);
  const auto gate = matrix_view(landed.record, layout, MatrixKind::kGate);
  const auto up = matrix_view(landed.record, layout, MatrixKind::kUp);
  const auto down = matrix_view(landed.record, layout, MatrixKind::kDown);
  if (n >= rvq_crossover_) {
    scratch.input.resize(size_t{n} * hidden);
    for (uint32_t i = 0; i < n; ++i)
      std::copy_n(&expert_in_[size_t{pairs[i].first} * hidden], hidden, &scratch.input[size_t{i} * hidden]);
    kernels::rvq_matmul_decoded(*lw.codebooks[0], gate, scratch.input.data(), n, scratch.gate.data(), exec);
    kernels::rvq_matmul_decoded(*lw.codebooks[1], up, scratch.input.data(), n, scratch.up.data(), exec);
    gated_activation(config_.activation, scratch.gate.data(), scratch.up.data(), scratch.hidden.data(), size_t{n} * width);
    kernels::rvq_matmul_decoded(*lw.codebooks[2], down, scratch.hidden.data(), n, scratch.out.data(), exec);
  } else {
    scratch.rows.resize(n);
    for (uint32_t i = 0; i < n; ++i) scratch.rows[i] = table_row_[pairs[i].first];
    kernels::rvq_matmul(gate_table_, scratch.rows, gate, scratch.gate.data(), exec);
    kernels::rvq_matmul(up_table_, scratch.rows, up, scratch.up.data(), exec);
    gated_activation(config_.activation, scratch.gate.data(), scratch.up.data(), scratch.hidden.data(), size_t{n} * width);
    scratch.down_table.build(*lw.codebooks[2], scratch.hidden.data(), width, n, exec, &down);
    std::iota(scratch.rows.begin(), scratch.rows.end(), 0u);
    kernels::rvq_matmul(scratch.down_table, scratch.rows, down, scratch.out.data(), exec);
  }
  for (uint32_t i = 0; i < n; ++i) {
    const auto [t, k] = pairs[i];
    std::copy_n(&scratch.out[size_t{i} * hidden], hidden, &expert_out_[(size_t{t} * top_k + k) * hidden]);
  }
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
