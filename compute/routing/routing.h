// compute/routing/routing.h: which experts a MoE layer runs and with what
// weights, from its router's logits: softmax top-k (OLMoE, Qwen3, Mixtral)
// or sigmoid scores with a selection bias and group-limited top-k
// (DeepSeek-V3, Kimi). The engine and the lookahead router both call this,
// so a guess made from the real input equals the real routing. It sits
// below compute/model and router/ and depends only on proto/.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "proto/model_config.h"

namespace sluice {

// The routing of one layer for one token: experts in selection order
// (highest first, lower id on ties) and the weight each one's output is
// scaled by.
struct Routing {
  std::vector<uint32_t> experts;
  std::vector<float> weights;
};

// `logits` holds router.experts values (the f32 router matvec); `bias` the
// score-correction bias when router.score_bias, else empty.
//
// Softmax: p = softmax(logits) (f32, max subtracted, sum in id order), the
// top-k of p, renormalised when router.normalize.
// Sigmoid: s = σ(logits), selection on s + bias; with groups, each group
// scores the sum of its two best, the best topk_groups groups are kept and
// the others' selection scores become 0 or −∞ (router.group_mask); weights
// are the unbiased s of the chosen (s + bias when router.weights_from_biased),
// divided by their sum + 1e-20 when router.normalize, times router.scaling.
Routing route(const RouterConfig& router, std::span<const float> logits, std::span<const float> bias = {});

// The `k` experts the selection ranks highest (k may exceed top_k; excluded
// groups rank after every kept expert): lookahead's guess.
std::vector<uint32_t> rank_experts(const RouterConfig& router, std::span<const float> logits,
                                   std::span<const float> bias, uint32_t k);

}  // namespace sluice
