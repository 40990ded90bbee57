// compute/model/attn_res.h: Kimi K3's Attention Residuals (k3.md §2.1). The
// residual stream is a block partial sum; every sublayer, and the final norm,
// reads a softmax mixture over depth of the stored blocks and the live
// partial, scored per site by p · RMSNorm(V; n). Per token: nothing mixes
// across positions and nothing is kept between calls. It never changes the
// partial sum except to close a block.
#pragma once

#include <cstdint>
#include <vector>

#include "compute/model/weights.h"
#include "proto/model_config.h"

namespace sluice {

class AttnRes {
 public:
  AttnRes(const ModelConfig& config, const ModelWeights& weights);

  // The input of layer `layer`'s mixer for `tokens` rows of the partial sum
  // (tokens × hidden): the partial itself before any block is stored, else
  // the mixture over the stored blocks and the partial. At a block start
  // the partial is then stored as a block and `partial` is zeroed.
  const float* before_mixer(uint32_t layer, float* partial, uint32_t tokens);
  // The input of layer `layer`'s FFN: the mixture over stored blocks and the partial.
  const float* before_ffn(uint32_t layer, const float* partial, uint32_t tokens);
  // What the final norm reads: the output mixture over stored blocks and the partial.
  const float* final_mixture(const float* partial, uint32_t tokens);
  // Blocks stored so far in this call (for tests).
  uint32_t stored_blocks() const { return stored_; }

 private:
  const float* mix(const std::vector<float>& norm, const std::vector<float>& query,
                   const float* live, uint32_t tokens);

  const ModelConfig& config_;
  const ModelWeights& weights_;
  uint32_t capacity_ = 0;  // blocks a pass stores: the layers that start one
  uint32_t stored_ = 0;
  uint32_t tokens_ = 0;
  std::vector<float> blocks_;  // [block][token][hidden]
  std::vector<float> out_, scores_;
};

}  // namespace sluice
