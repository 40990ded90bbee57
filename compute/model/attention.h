// compute/model/attention.h: rotary embeddings (both pairings, YaRN), the
// GQA KV cache and causal grouped-query softmax attention, all in f32.
// Knows nothing of weights: the mixers project q, k, v and apply the output
// projection.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "compute/kernels/dispatch.h"
#include "compute/model/sequence_state.h"
#include "proto/model_config.h"

namespace sluice {

// cos/sin of every rotated pair for every position up to the context
// length, from the config's inverse frequencies (YaRN included) and scaled
// by its amplitude.
class RopeTable {
 public:
  RopeTable(const RopeConfig& rope, uint32_t positions);
  // Rotates the first rope.dims values of `head` (the whole head for GQA,
  // the rope part for MLA) in the config's pairing.
  void rotate(float* head, uint32_t position) const;

 private:
  uint32_t pairs_;
  uint32_t positions_;
  RotaryPairing pairing_;
  std::vector<float> cos_, sin_;
};

// K and V after norms and rotation, per layer and position: a view of a
// sequence's GQA state, whose rows are K then V (kv_width each).
class KvCache {
 public:
  static MixerState make_state(uint32_t layers, uint32_t capacity, uint32_t kv_width) {
    return MixerState(layers, capacity, 2 * kv_width, 0);
  }
  KvCache(MixerState& state, uint32_t kv_width) : state_(state), kv_width_(kv_width) {}
  float* key(uint32_t layer, uint32_t position) { return state_.row(layer, position); }
  float* value(uint32_t layer, uint32_t position) {
    return state_.row(layer, position) + kv_width_;
  }
  // Floats from one position's row to the next within a layer.
  size_t row_stride() const { return state_.row_floats(); }
  uint32_t capacity() const { return state_.context(); }

 private:
  MixerState& state_;
  uint32_t kv_width_;
};

// In place: softmax over scores[0..count) in f32, max subtracted, the sum in
// position order; returns the sum, the scores hold exp(score − max).
float softmax_unnormalized(float* scores, uint32_t count);
// softmax_unnormalized, then each divided by the sum: the attention weights.
void softmax_weights(float* scores, uint32_t count);

// How many of `tokens` tokens (positions first_position on) share one pass
// over a sequence's cache when each brings `rows_per_token` queries: their
// scores (rows × positions) stay within heads × capacity floats, which the
// memory plan counts (ioworker/memory_plan.cpp), so fewer share a pass as
// the context fills. At least one.
uint32_t tokens_per_pass(uint32_t rows_per_token, uint32_t heads, uint32_t capacity,
                         uint32_t first_position, uint32_t tokens);

struct GqaShape {
  uint32_t heads, kv_heads, head_dim;
  float scale;
};

// What GQA attention reuses from call to call on one thread: queries, scores
// and outputs of one kv head's group over a batch of tokens (and, in worker
// 0's, their causal counts, shared by every kv head). Only growing allocates.
struct AttentionScratch {
  std::vector<uint32_t> counts;
  std::vector<float> queries, scores, outputs;
};

// Tokens t < tokens at positions first_position + t (queries at query +
// t·query_stride, outputs at output + t·output_stride), each attending to
// cached positions [0, first_position + t]: for each query head h (reading
// kv head h / (heads / kv_heads)), softmax over lane_dot(q, k) · scale in f32
// (max subtracted, sum in position order), then the probability-weighted
// sum of values in position order (compute/kernels/attend.h, the same bits
// at every instruction set). Each token gets the bits it would get alone;
// together they read each cached row once per kv head and batch of tokens.
// Long enough work splits the kv heads over exec's pool, one scratch per
// worker (`scratch` grows to the pool's size); no result depends on it.
void attend(const float* query, size_t query_stride, uint32_t tokens, KvCache& cache,
            uint32_t layer, uint32_t first_position, const GqaShape& shape, float* output,
            size_t output_stride, std::vector<AttentionScratch>& scratch,
            const kernels::Exec& exec);

}  // namespace sluice
