// compute/model/mixer.h: the token-mixing half of a layer (GQA attention,
// MLA, KDA). A mixer holds weights and scratch, never a sequence: it sizes
// the per-sequence state of every layer it serves (KV cache, latent cache,
// recurrent state) and acts on the one it is given; it reads the
// input-normed hidden states and writes what the layer adds to the residual.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "compute/kernels/dispatch.h"
#include "compute/model/sequence_state.h"
#include "compute/model/weights.h"
#include "proto/model_config.h"

namespace sluice {

// Consecutive rows of a mixer's input that belong to one sequence.
struct MixerSegment {
  uint32_t tokens;
  uint32_t first_position;
  MixerState* state;
};

class Mixer {
 public:
  virtual ~Mixer() = default;
  // Tokens at positions [first_position, first_position + tokens) of the
  // sequence whose state is `state` (made by make_state): `normed` and
  // `out` are tokens × hidden.
  virtual void forward(uint32_t layer, const float* normed, uint32_t tokens,
                       uint32_t first_position, MixerState& state, float* out) = 0;
  // Several sequences' rows at once (a batched decode step), each exactly as
  // forward() gives it. This runs them one by one; a mixer whose projections
  // are row by row overrides it to read its weights once for all rows.
  virtual void forward_segments(uint32_t layer, const float* normed,
                                std::span<const MixerSegment> segments, uint32_t hidden,
                                float* out);
  // One sequence's state for this mixer's layers, sized for the context the
  // mixer was made for (fixed, however much of it is used).
  virtual MixerState make_state() const = 0;
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
