// compute/model/transformer.h: the forward pass over a chunk of tokens:
// embeddings, then per layer a mixer (GQA or MLA, owning its cache) and an
// FFN (dense SwiGLU, or MoE: the router, routed experts fetched through an
// ExpertSource, an optional shared expert), then the LM head. A chunk of one
// token is a decode step; a longer chunk reads each distinct expert of a
// layer once for all its tokens. Expert outputs are summed in routing order,
// so the result does not depend on the order records arrive in. Kimi K3's
// depth mixtures (attn_res.h) and latent experts (latent_moe.h) hook in here.
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
#include "compute/model/weights.h"
#include "compute/routing/routing.h"
#include "proto/model_config.h"

namespace sluice {

class Transformer {
 public:
  Transformer(const ModelConfig& config, const ModelWeights& weights, ExpertSource& experts,
              uint32_t context, kernels::Exec exec);

  // Runs `tokens` at positions [position(), position() + tokens.size()) and
  // advances the position. Writes vocabulary-sized logits for the last token
  // to `logits`, or for every token (tokens.size() rows) when `all_positions`.
  void forward(std::span<const int32_t> tokens, std::span<float> logits, bool all_positions);
  uint32_t position() const { return position_; }
  uint32_t context() const { return context_; }
  void reset() { position_ = 0; }
  // The routing of the last forward call: [token][moe layer].
  const std::vector<std::vector<Routing>>& last_routing() const { return routing_; }
  size_t kv_cache_bytes() const { return attention_->state_bytes() + (kda_ ? kda_->state_bytes() : 0); }

  // Called for each MoE layer once its routing is decided and its records are
  // requested, with the layer, its MoE ordinal, the chunk's tokens and their
  // MoE input (tokens × hidden, the post-attention norm); the routing is
  // last_routing()[t][moe_index]. Lookahead and --trace-out read from here;
  // a hook must not change anything the model computes.
  using MoeHook = std::function<void(uint32_t layer, size_t moe_index, uint32_t tokens, std::span<const float> input)>;
  void set_moe_hook(MoeHook hook) { moe_hook_ = std::move(hook); }

 private:
  void moe(uint32_t layer, uint32_t tokens, size_t moe_index);
  // x += down(silu(gate(normed)) ⊙ up(normed)) for the chunk.
  void swiglu(const Linear& gate, const Linear& up, const Linear& down, uint32_t tokens);

  const ModelConfig& config_;
  const ModelWeights& weights_;
  ExpertSource& experts_;
  kernels::Exec exec_;
  uint32_t context_;
  std::unique_ptr<Mixer> attention_;  // the softmax-attention layers (GQA or MLA)
  std::unique_ptr<Mixer> kda_;        // the KDA layers, when the model has any
  std::unique_ptr<AttnRes> attn_res_;  // K3's depth mixtures, when the model has them
  uint32_t position_ = 0;

  // Scratch for one chunk, rows of width hidden (x, normed, proj) or an FFN's.
  std::vector<float> x_, normed_, proj_;
  std::vector<float> router_logits_, expert_out_, gate_, up_, down_in_, down_out_, latent_in_, routed_;
  kernels::RvqTable gate_table_, up_table_, down_table_;
  std::vector<std::vector<Routing>> routing_;
  MoeHook moe_hook_;
};

}  // namespace sluice
