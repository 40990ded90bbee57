// compute/model/transformer.h: the forward pass over a chunk of tokens:
// embeddings, then per layer a mixer (GQA, MLA or KDA, acting on the
// sequence's state it is given) and an FFN (dense SwiGLU, or MoE: the router,
// routed experts fetched through an ExpertSource, an optional shared
// expert), then the LM head. A chunk of one token is a decode step; a longer
// chunk, or one decode token of each of several sequences, reads each
// distinct expert of a layer once for all its tokens. Expert outputs are
// summed in routing order, so the result does not depend on the order
// records arrive in, nor on which other sequences share the step. Holds no
// sequence: every SequenceState is the caller's. Kimi K3's depth mixtures
// (attn_res.h) and latent experts (latent_moe.h) hook in here.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "compute/kernels/rvq.h"
#include "compute/kernels/thread_pool.h"
#include "compute/model/attn_res.h"
#include "compute/model/expert_source.h"
#include "compute/model/mixer.h"
#include "compute/model/sequence_state.h"
#include "compute/model/weights.h"
#include "compute/routing/routing.h"
#include "proto/model_config.h"

namespace sluice {

// Seconds spent in each part of the forward passes so far (a few clock
// reads a layer): the embedding lookup, the mixers (with their input norm),
// the MoE blocks (router, routed experts including any wait for their
// records, shared expert; `shared_experts` is the last part of `moe`), the
// dense FFNs, and the final norm with the LM head.
struct ForwardTimes {
  double embedding = 0, kda = 0, attention = 0, moe = 0, shared_experts = 0, dense = 0, lm_head = 0;

  ForwardTimes operator-(const ForwardTimes& earlier) const {
    return {embedding - earlier.embedding, kda - earlier.kda,         attention - earlier.attention,
            moe - earlier.moe,             shared_experts - earlier.shared_experts, dense - earlier.dense,
            lm_head - earlier.lm_head};
  }
};

class Transformer {
 public:
  Transformer(const ModelConfig& config, const ModelWeights& weights, ExpertSource& experts,
              uint32_t context, kernels::Exec exec);

  // A fresh sequence at position 0, its state sized for context().
  SequenceState new_sequence() const;

  // Runs `tokens` of `sequence` at positions [position, position +
  // tokens.size()) and advances it. Writes vocabulary-sized logits for the
  // last token to `logits`, or for every token (tokens.size() rows) when
  // `all_positions`. `media_rows` (hidden wide), when given, are the input
  // embeddings of the call's media pad tokens in order (K3's image
  // positions, k3.md §4.3): exactly one row per pad.
  void forward(SequenceState& sequence, std::span<const int32_t> tokens, std::span<float> logits,
               bool all_positions, std::span<const float> media_rows = {});
  // One decode step of several distinct sequences at once: tokens[i] runs
  // at sequences[i]'s position, and logits row i (vocabulary-sized) is its.
  // Each row is bit-identical to sequences[i] stepped alone by forward().
  void forward_batch(std::span<SequenceState* const> sequences, std::span<const int32_t> tokens,
                     std::span<float> logits);

  uint32_t context() const { return context_; }
  // Tokens per expert from which an expert decodes its weights once instead
  // of reading tables (kernels/rvq_crossover.h), chosen at construction.
  uint32_t rvq_decode_crossover() const { return rvq_crossover_; }
  // The routing of the last forward call: [token][moe layer], tokens in
  // call order (a batch's tokens in sequence order).
  const std::vector<std::vector<Routing>>& last_routing() const { return routing_; }
  // The position each token of the last forward call ran at, in the same order.
  const std::vector<uint32_t>& last_positions() const { return positions_; }
  // True when every sequence of the last (or current) forward call ran one
  // token: a decode step, of one sequence or of several batched together.
  bool last_call_decodes() const { return decodes_; }
  const ForwardTimes& times() const { return times_; }

  // Called for each MoE layer once its routing is decided and its records are
  // requested, with the layer, its MoE ordinal, the chunk's tokens and their
  // MoE input (tokens × hidden, the post-attention norm); the routing is
  // last_routing()[t][moe_index]. Lookahead and --trace-out read from here;
  // a hook must not change anything the model computes.
  using MoeHook = std::function<void(uint32_t layer, size_t moe_index, uint32_t tokens, std::span<const float> input)>;
  void set_moe_hook(MoeHook hook) { moe_hook_ = std::move(hook); }
  // In a decode step, once a MoE layer's records are requested, the next MoE
  // layer's router runs on this layer's input and its `k` best experts are
  // held (ExpertSource::hold), so their reads overlap this layer's experts.
  // 0: off. The guess never changes what the model computes.
  void set_hold_next(uint32_t k) { hold_next_ = k; }

 private:
  // A run of consecutive tokens of one sequence within a forward call.
  struct Segment {
    SequenceState* sequence;
    std::span<const int32_t> tokens;
  };
  // Runs the segments' tokens as one chunk: logits for every token when
  // `all_positions`, else for each segment's last.
  void run(std::span<const Segment> segments, std::span<float> logits, bool all_positions,
           std::span<const float> media_rows = {});
  // Overwrites the embeddings of the media pad tokens among `ids` with `rows`, in order.
  void splice_media(std::span<const int32_t> ids, std::span<const float> rows);
  void moe(uint32_t layer, uint32_t tokens, size_t moe_index);
  // The hold of set_hold_next for the MoE layer after `layer`, from normed_'s one row.
  void hold_next_layer(uint32_t layer);
  // x += down(silu(gate(normed)) ⊙ up(normed)) for the chunk.
  void swiglu(const Linear& gate, const Linear& up, const Linear& down, uint32_t tokens);

  const ModelConfig& config_;
  const ModelWeights& weights_;
  ExpertSource& experts_;
  kernels::Exec exec_;
  uint32_t context_;
  uint32_t rvq_crossover_;
  std::unique_ptr<Mixer> attention_;   // the softmax-attention layers (GQA or MLA)
  std::unique_ptr<Mixer> kda_;         // the KDA layers, when the model has any
  std::unique_ptr<AttnRes> attn_res_;  // K3's depth mixtures, when the model has them

  // Scratch for one chunk, rows of width hidden (x, normed, proj) or an FFN's.
  std::vector<float> x_, normed_, proj_;
  std::vector<MixerSegment> mixer_segments_;  // this forward pass's rows, by sequence
  std::vector<float> router_logits_, expert_out_, gate_, up_, latent_in_, routed_;
  // The routed experts' input rows (expert_hidden() wide): normed_, or K3's latent_in_.
  const float* expert_in_ = nullptr;
  kernels::RvqTable gate_table_, up_table_;
  // One MoE block's bookkeeping: its distinct experts, the (token, rank) pairs
  // each serves (user_pairs_[user_begin_[e] .. user_begin_[e + 1])), and each
  // token's row in the gate/up tables (tokens of decode-once experts only
  // have none).
  std::vector<uint32_t> distinct_, user_begin_, user_next_, table_row_, table_tokens_;
  std::vector<std::pair<uint32_t, uint32_t>> user_pairs_;
  std::vector<float> table_input_;
  // What one expert's computation needs, one per pool worker; grows once.
  struct ExpertScratch {
    std::vector<float> input, gate, up, hidden, out;
    std::vector<uint32_t> rows;
    kernels::RvqTable down_table;
  };
  std::vector<ExpertScratch> expert_scratch_;
  // One landed expert applied to the tokens that chose it, into expert_out_.
  void run_expert(const LandedExpert& landed, ExpertScratch& scratch, const kernels::Exec& exec,
                  const MoeWeights& lw);
  std::vector<std::vector<Routing>> routing_;
  std::vector<uint32_t> positions_;
  bool decodes_ = false;
  MoeHook moe_hook_;
  uint32_t hold_next_ = 0;
  std::vector<float> hold_logits_;
  ForwardTimes times_;
};

}  // namespace sluice
