// compute/model/latent_moe.h: Kimi K3's latent MoE (k3.md §2.4) around the
// routed experts: the router reads the full hidden state, the experts a
// narrower latent (routed_expert_down_proj of the post-attention norm), and
// their weighted sum goes back through the latent norm and the up
// projection. Without a latent both are the identity. Routing and the
// shared experts are not here.
#pragma once

#include <cstdint>
#include <vector>

#include "compute/kernels/dispatch.h"
#include "compute/model/weights.h"
#include "proto/model_config.h"

namespace sluice {

// The routed experts' input rows (tokens × config.expert_hidden()): `normed`
// itself, or W_dl · normed written to `latent`.
const float* latent_input(const ModelConfig& config, const MoeWeights& w, const float* normed,
                          uint32_t tokens, std::vector<float>& latent, const kernels::Exec& exec);

// x += W_ul · RMSNorm(routed) per token (routed: tokens × expert_hidden,
// normed in place), or x += routed without a latent.
void add_routed(const ModelConfig& config, const MoeWeights& w, float* routed, uint32_t tokens,
                float* x, std::vector<float>& scratch, const kernels::Exec& exec);

}  // namespace sluice
