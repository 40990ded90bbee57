// compute/model/latent_moe.cpp: the latent projections of K3's MoE
// (latent_moe.h), on the trunk's resident matrices.
#include "compute/model/latent_moe.h"

#include "compute/model/ops.h"

namespace sluice {

const float* latent_input(const ModelConfig& config, const MoeWeights& w, const float* normed,
                          uint32_t tokens, std::vector<float>& latent, const kernels::Exec& exec) {
  if (config.expert_latent == 0) return normed;
  latent.resize(size_t{tokens} * config.expert_latent);
  w.latent_down.apply(normed, tokens, latent.data(), exec);
  return latent.data();
}

void add_routed(const ModelConfig& config, const MoeWeights& w, float* routed, uint32_t tokens,
                float* x, std::vector<float>& scratch, const kernels::Exec& exec) {
  const uint32_t hidden = config.hidden;
  const float* up = routed;
  if (config.expert_latent > 0) {
    const uint32_t latent = config.expert_latent;
    if (config.expert_latent_norm) {
      for (uint32_t t = 0; t < tokens; ++t) {
        float* row = routed + size_t{t} * latent;
        rms_norm(row, w.latent_norm.data(), latent, config.rms_eps, row);
      }
    }
    scratch.resize(size_t{tokens} * hidden);
    w.latent_up.apply(routed, tokens, scratch.data(), exec);
    up = scratch.data();
  }
  for (size_t i = 0; i < size_t{tokens} * hidden; ++i) x[i] += up[i];
}

}  // namespace sluice
