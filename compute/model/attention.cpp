// compute/model/attention.cpp: RoPE, KV cache storage and causal GQA attention.
#include "compute/model/attention.h"

#include <algorithm>
#include <cmath>

#include "compute/kernels/attend.h"
#include "proto/error.h"

namespace sluice {

RopeTable::RopeTable(const RopeConfig& rope, uint32_t positions)
    : pairs_(rope.dims / 2),
      positions_(positions),
      pairing_(rope.pairing),
      cos_(size_t{positions} * pairs_),
      sin_(size_t{positions} * pairs_) {
  const std::vector<float> inverse = rope.inverse_frequencies();
  const auto amplitude = static_cast<float>(rope.amplitude());
  for (uint32_t i = 0; i < pairs_; ++i) {
    // As the reference: angle = position × frequency, both in f32.
    for (uint32_t p = 0; p < positions; ++p) {
      const float angle = static_cast<float>(p) * inverse[i];
      cos_[size_t{p} * pairs_ + i] = std::cos(angle) * amplitude;
      sin_[size_t{p} * pairs_ + i] = std::sin(angle) * amplitude;
    }
  }
}

void RopeTable::rotate(float* head, uint32_t position) const {
  if (position >= positions_) fail("position {} is past the context length {}", position, positions_);
  const float* c = &cos_[size_t{position} * pairs_];
  const float* s = &sin_[size_t{position} * pairs_];
  // Half-split pairs i with i + d/2; adjacent pairs 2i with 2i + 1.
  const uint32_t stride = pairing_ == RotaryPairing::kHalfSplit ? 1 : 2;
  const uint32_t partner = pairing_ == RotaryPairing::kHalfSplit ? pairs_ : 1;
  for (uint32_t i = 0; i < pairs_; ++i) {
    float* a_at = head + size_t{i} * stride;
    const float a = a_at[0], b = a_at[partner];
    a_at[0] = a * c[i] - b * s[i];
    a_at[partner] = b * c[i] + a * s[i];
  }
}

float softmax_unnormalized(float* scores, uint32_t count) {
  const float max_score = *std::max_element(scores, scores + count);
  float total = 0.0f;
  for (uint32_t p = 0; p < count; ++p) {
    scores[p] = std::exp(scores[p] - max_score);
    total += scores[p];
  }
  return total;
}

void HeadScores::softmax() {
  const size_t heads = count_ == 0 ? 0 : values_.size() / count_;
  for (size_t h = 0; h < heads; ++h) {
    float* scores = &values_[h * count_];
    const float total = softmax_unnormalized(scores, count_);
    for (uint32_t p = 0; p < count_; ++p) scores[p] /= total;
  }
}

void attend(const float* query, KvCache& cache, uint32_t layer, uint32_t position, uint32_t heads,
            uint32_t kv_heads, uint32_t head_dim, float scale, float* output, HeadScores& scores,
            kernels::Isa isa) {
  const uint32_t group = heads / kv_heads, count = position + 1;
  const size_t stride = cache.row_stride();
  scores.reset(heads, count);
  // One kv head at a time, its group of query heads together: each cached
  // row is read once per kv head while it is in L1.
  for (uint32_t kv = 0; kv < kv_heads; ++kv)
    kernels::attention_scores(query + size_t{kv} * group * head_dim, group,
                              cache.key(layer, 0) + size_t{kv} * head_dim, stride, count, head_dim,
                              scale, scores.head(kv * group), scores.count(), isa);
  scores.softmax();
  std::fill(output, output + size_t{heads} * head_dim, 0.0f);
  for (uint32_t kv = 0; kv < kv_heads; ++kv)
    kernels::attention_values(scores.head(kv * group), scores.count(), group,
                              cache.value(layer, 0) + size_t{kv} * head_dim, stride, count,
                              head_dim, output + size_t{kv} * group * head_dim, isa);
}

}  // namespace sluice
