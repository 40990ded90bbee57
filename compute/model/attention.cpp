// compute/model/attention.cpp: RoPE, KV cache storage and causal GQA attention.
#include "compute/model/attention.h"

#include <algorithm>
#include <cmath>

#include "compute/kernels/attend.h"
#include "compute/kernels/thread_pool.h"
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

void softmax_weights(float* scores, uint32_t count) {
  const float total = softmax_unnormalized(scores, count);
  for (uint32_t p = 0; p < count; ++p) scores[p] /= total;
}

uint32_t tokens_per_pass(uint32_t rows_per_token, uint32_t heads, uint32_t capacity,
                         uint32_t first_position, uint32_t tokens) {
  // At most 256 query rows: each cached row is read once for a prefill chunk of OLMoE's.
  constexpr uint64_t kQueryRowsPerPass = 256;
  const uint64_t rows =
      std::min(kQueryRowsPerPass, uint64_t{heads} * capacity / (first_position + tokens));
  return std::max<uint32_t>(1, static_cast<uint32_t>(rows / rows_per_token));
}

namespace {

// Below this many multiply-adds per pass (all kv heads), waking the pool
// costs more than it saves: a decode step at a short context stays on one
// thread.
constexpr uint64_t kParallelMultiplyAdds = uint64_t{1} << 20;

}  // namespace

void attend(const float* query, size_t query_stride, uint32_t tokens, KvCache& cache,
            uint32_t layer, uint32_t first_position, const GqaShape& shape, float* output,
            size_t output_stride, std::vector<AttentionScratch>& scratch,
            const kernels::Exec& exec) {
  const uint32_t group = shape.heads / shape.kv_heads, head_dim = shape.head_dim;
  const size_t stride = cache.row_stride(), group_floats = size_t{group} * head_dim;
  const size_t workers = exec.pool != nullptr ? exec.pool->size() : 1;
  if (scratch.size() < workers) scratch.resize(workers);
  const uint32_t batch =
      tokens_per_pass(group, shape.heads, cache.capacity(), first_position, tokens);
  for (uint32_t t0 = 0; t0 < tokens; t0 += batch) {
    const uint32_t batch_tokens = std::min(batch, tokens - t0), rows = batch_tokens * group;
    const uint32_t longest = first_position + t0 + batch_tokens;
    // The same for every kv head: worker 0's, which the workers only read.
    std::vector<uint32_t>& counts = scratch[0].counts;
    counts.resize(rows);
    for (uint32_t r = 0; r < rows; ++r) counts[r] = first_position + t0 + r / group + 1;
    auto one_kv_head = [&](AttentionScratch& s, uint32_t kv) {
      s.queries.resize(size_t{rows} * head_dim);
      s.outputs.assign(size_t{rows} * head_dim, 0.0f);
      s.scores.resize(size_t{rows} * longest);
      for (uint32_t t = 0; t < batch_tokens; ++t) {
        const float* q = query + (t0 + t) * query_stride + kv * group_floats;
        std::copy(q, q + group_floats, s.queries.begin() + t * group_floats);
      }
      kernels::attention_scores(s.queries.data(), counts,
                                cache.key(layer, 0) + size_t{kv} * head_dim, stride, head_dim,
                                shape.scale, s.scores.data(), longest, exec.isa);
      for (uint32_t r = 0; r < rows; ++r)
        softmax_weights(&s.scores[size_t{r} * longest], counts[r]);
      kernels::attention_values(s.scores.data(), longest, counts,
                                cache.value(layer, 0) + size_t{kv} * head_dim, stride, head_dim,
                                s.outputs.data(), exec.isa);
      for (uint32_t t = 0; t < batch_tokens; ++t) {
        const float* o = s.outputs.data() + t * group_floats;
        std::copy(o, o + group_floats, output + (t0 + t) * output_stride + kv * group_floats);
      }
    };
    const uint64_t work = uint64_t{shape.heads} * batch_tokens * longest * head_dim;
    if (workers > 1 && shape.kv_heads > 1 && work >= kParallelMultiplyAdds) {
      exec.pool->parallel_for_workers(shape.kv_heads, 1, [&](size_t worker, size_t b, size_t e) {
        for (size_t kv = b; kv < e; ++kv) one_kv_head(scratch[worker], static_cast<uint32_t>(kv));
      });
    } else {
      for (uint32_t kv = 0; kv < shape.kv_heads; ++kv) one_kv_head(scratch[0], kv);
    }
  }
}

}  // namespace sluice
