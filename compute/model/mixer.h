// compute/model/mixer.h: the token-mixing half of a layer (GQA attention,
// MLA, KDA). A mixer owns its per-sequence state for every layer it serves
// (KV cache, latent cache, recurrent state) and says how large it is; it
// reads the input-normed hidden states and writes what the layer adds to
// the residual.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "compute/kernels/dispatch.h"
#include "compute/model/weights.h"
#include "proto/model_config.h"

namespace sluice {

class Mixer {
 public:
  virtual ~Mixer() = default;
  // Tokens at positions [first_position, first_position + tokens) of the
  // sequence: `normed` and `out` are tokens × hidden.
  virtual void forward(uint32_t layer, const float* normed, uint32_t tokens, uint32_t first_position,
                       float* out) = 0;
  // Bytes of per-sequence state (fixed, however much of it is used).
  virtual size_t state_bytes() const = 0;
};

// The softmax-attention mixer of `config.mixer` for a context of `context`
// positions (the KDA layers' mixer is make_kda_mixer).
std::unique_ptr<Mixer> make_mixer(const ModelConfig& config, const ModelWeights& weights, uint32_t context,
                                  kernels::Exec exec);

// The kinds (gqa_mixer.cpp, mla_mixer.cpp).
std::unique_ptr<Mixer> make_gqa_mixer(const ModelConfig& config, const ModelWeights& weights, uint32_t context,
                                      kernels::Exec exec);
std::unique_ptr<Mixer> make_mla_mixer(const ModelConfig& config, const ModelWeights& weights, uint32_t context,
                                      kernels::Exec exec);
std::unique_ptr<Mixer> make_kda_mixer(const ModelConfig& config, const ModelWeights& weights, uint32_t context,
                                      kernels::Exec exec);

}  // namespace sluice
