// compute/model/attention.cpp: RoPE, KV cache storage and causal GQA attention.
#include "compute/model/attention.h"

#include <algorithm>
#include <cmath>

#include "proto/error.h"

namespace sluice {

RopeTable::RopeTable(uint32_t head_dim, float theta, uint32_t positions)
    : half_(head_dim / 2), positions_(positions), cos_(size_t{positions} * half_), sin_(size_t{positions} * half_) {
  for (uint32_t i = 0; i < half_; ++i) {
    // Same as the reference: inverse frequency in f32, angle = position * freq in f32.
    const float inverse_frequency =
        1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(head_dim));
    for (uint32_t p = 0; p < positions; ++p) {
      const float angle = static_cast<float>(p) * inverse_frequency;
      cos_[size_t{p} * half_ + i] = std::cos(angle);
      sin_[size_t{p} * half_ + i] = std::sin(angle);
    }
  }
}

void RopeTable::rotate(float* head, uint32_t position) const {
  if (position >= positions_) fail("position {} is past the context length {}", position, positions_);
  const float* c = &cos_[size_t{position} * half_];
  const float* s = &sin_[size_t{position} * half_];
  for (uint32_t i = 0; i < half_; ++i) {
    const float a = head[i], b = head[i + half_];
    head[i] = a * c[i] - b * s[i];
    head[i + half_] = b * c[i] + a * s[i];
  }
}

KvCache::KvCache(uint32_t layers, uint32_t capacity, uint32_t kv_width)
    : capacity_(capacity),
      kv_width_(kv_width),
      keys_(size_t{layers} * capacity * kv_width),
      values_(size_t{layers} * capacity * kv_width) {}

float* KvCache::key(uint32_t layer, uint32_t position) {
  return &keys_[(size_t{layer} * capacity_ + position) * kv_width_];
}
float* KvCache::value(uint32_t layer, uint32_t position) {
  return &values_[(size_t{layer} * capacity_ + position) * kv_width_];
}

void attend(const float* query, KvCache& cache, uint32_t layer, uint32_t position, uint32_t heads,
            uint32_t kv_heads, uint32_t head_dim, float* output, std::vector<float>& scores) {
  const uint32_t group = heads / kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  scores.resize(size_t{position} + 1);
  for (uint32_t h = 0; h < heads; ++h) {
    const float* q = query + size_t{h} * head_dim;
    const size_t kv_offset = size_t{h / group} * head_dim;
    float max_score = -INFINITY;
    for (uint32_t p = 0; p <= position; ++p) {
      const float* k = cache.key(layer, p) + kv_offset;
      float dot = 0.0f;
      for (uint32_t d = 0; d < head_dim; ++d) dot += q[d] * k[d];
      scores[p] = dot * scale;
      max_score = std::max(max_score, scores[p]);
    }
    float total = 0.0f;
    for (uint32_t p = 0; p <= position; ++p) {
      scores[p] = std::exp(scores[p] - max_score);
      total += scores[p];
    }
    float* out = output + size_t{h} * head_dim;
    std::fill(out, out + head_dim, 0.0f);
    for (uint32_t p = 0; p <= position; ++p) {
      const float weight = scores[p] / total;
      const float* v = cache.value(layer, p) + kv_offset;
      for (uint32_t d = 0; d < head_dim; ++d) out[d] += weight * v[d];
    }
  }
}

}  // namespace sluice
