// compute/model/attention.h: rotary embeddings, the KV cache and causal
// grouped-query softmax attention, all in f32. Knows nothing of weights:
// the caller projects q, k, v and applies the output projection.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace sluice {

// cos/sin of the half-split ("NeoX") rotation for every position up to the
// context length; element i pairs with i + head_dim/2.
class RopeTable {
 public:
  RopeTable(uint32_t head_dim, float theta, uint32_t positions);
  void rotate(float* head, uint32_t position) const;

 private:
  uint32_t half_;
  uint32_t positions_;
  std::vector<float> cos_, sin_;
};

// K and V after norms and rotation, per layer, for positions [0, capacity).
class KvCache {
 public:
  KvCache(uint32_t layers, uint32_t capacity, uint32_t kv_width);
  float* key(uint32_t layer, uint32_t position);
  float* value(uint32_t layer, uint32_t position);
  uint32_t capacity() const { return capacity_; }
  size_t bytes() const { return keys_.size() * sizeof(float) * 2; }

 private:
  uint32_t capacity_;
  uint32_t kv_width_;
  std::vector<float> keys_, values_;
};

// One query position attending to cached positions [0, position]: for each
// query head h (reading kv head h / (heads / kv_heads)), softmax over scores
// q·k · scale computed in f32 (max subtracted, sum in position order), then
// the probability-weighted sum of values in position order.
void attend(const float* query, KvCache& cache, uint32_t layer, uint32_t position, uint32_t heads,
            uint32_t kv_heads, uint32_t head_dim, float* output, std::vector<float>& scores);

}  // namespace sluice
