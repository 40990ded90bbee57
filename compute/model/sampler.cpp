// compute/model/sampler.cpp: the sampling chain. Candidates are kept sorted by
// (logit desc, id asc) so every filter is a prefix cut and ties are stable;
// the draw never depends on how that order was reached.
#include "compute/model/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <utility>

#include "proto/error.h"

namespace sluice {

void validate(const SamplingParams& params) {
  if (!(params.temperature >= 0.0f) || !std::isfinite(params.temperature)) {
    fail("--temp must be a finite number >= 0 (got {})", params.temperature);
  }
  if (params.top_k < 0) fail("--top-k must be >= 0 (got {})", params.top_k);
  if (!(params.top_p > 0.0f && params.top_p <= 1.0f))
    fail("--top-p must be in (0, 1] (got {})", params.top_p);
  if (!(params.min_p >= 0.0f && params.min_p < 1.0f))
    fail("--min-p must be in [0, 1) (got {})", params.min_p);
  if (!(params.repetition_penalty > 0.0f) || !std::isfinite(params.repetition_penalty)) {
    fail("--repeat-penalty must be a finite number > 0 (got {})", params.repetition_penalty);
  }
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {
  validate(params);
}

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> context) {
  const auto vocab = static_cast<int32_t>(logits.size());
  if (vocab == 0) fail("cannot sample from an empty row of logits");
  scratch_.assign(logits.begin(), logits.end());
  if (!params_.banned.empty()) {
    for (int32_t token : params_.banned) {
      if (token >= 0 && token < vocab) scratch_[static_cast<size_t>(token)] = -INFINITY;
    }
    if (std::none_of(scratch_.begin(), scratch_.end(), [](float l) { return l > -INFINITY; }))
      fail("every token id that may be sampled has a logit of -infinity");
  }
  if (params_.repetition_penalty != 1.0f) {
    for (int32_t token : context) {
      if (token < 0 || token >= vocab) continue;
      float& l = scratch_[static_cast<size_t>(token)];
      l = l > 0.0f ? l / params_.repetition_penalty : l * params_.repetition_penalty;
    }
  }
  int32_t token = draw();
  if (TokenConstraint* constraint = params_.constraint) {
    if (!constraint->allows(token)) {
      constraint->mask(scratch_);
      if (std::none_of(scratch_.begin(), scratch_.end(),
                       [](float l) { return std::isfinite(l); })) {
        fail("the output constraint allows no token here (the grammar has no way to continue)");
      }
      token = draw();
    }
    constraint->accept(token);
  }
  return token;
}

void Sampler::rank_by_logit() {
  // A stable LSD radix sort of keys that order as (logit desc): ids stay
  // ascending within a logit, exactly the (logit desc, id asc) order, at a
  // fraction of a comparison sort's cost (it runs per token per sequence).
  const size_t n = scratch_.size();
  keys_.resize(n);
  order_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const float logit = scratch_[i] == 0.0f ? 0.0f : scratch_[i];  // -0 ties +0
    const auto bits = std::bit_cast<uint32_t>(logit);
    const uint32_t ascending = bits & 0x80000000u ? ~bits : bits | 0x80000000u;
    keys_[i] = ~ascending;
    order_[i] = static_cast<int32_t>(i);
  }
  constexpr int kDigitBits = 11;
  constexpr uint32_t kDigits = 1u << kDigitBits;
  spare_keys_.resize(n);
  spare_order_.resize(n);
  std::vector<uint32_t> count(kDigits);
  for (int shift = 0; shift < 32; shift += kDigitBits) {
    std::fill(count.begin(), count.end(), 0u);
    for (size_t i = 0; i < n; ++i) ++count[(keys_[i] >> shift) & (kDigits - 1)];
    uint32_t sum = 0;
    for (uint32_t& c : count) sum += std::exchange(c, sum);
    for (size_t i = 0; i < n; ++i) {
      const uint32_t at = count[(keys_[i] >> shift) & (kDigits - 1)]++;
      spare_keys_[at] = keys_[i];
      spare_order_[at] = order_[i];
    }
    keys_.swap(spare_keys_);
    order_.swap(spare_order_);
  }
}

int32_t Sampler::draw() {
  if (params_.temperature <= 0.0f) {
    return static_cast<int32_t>(std::max_element(scratch_.begin(), scratch_.end()) -
                                scratch_.begin());
  }

  rank_by_logit();
  size_t kept = order_.size();
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < kept)
    kept = static_cast<size_t>(params_.top_k);

  // Softmax over the kept candidates at this temperature, in double so the
  // cumulative cut of top-p does not depend on summation noise.
  const double max_logit = scratch_[static_cast<size_t>(order_[0])];
  std::vector<double>& probs = probs_;
  probs.resize(kept);
  double total = 0.0;
  for (size_t i = 0; i < kept; ++i) {
    probs[i] =
        std::exp((scratch_[static_cast<size_t>(order_[i])] - max_logit) / params_.temperature);
    total += probs[i];
  }
  for (double& p : probs) p /= total;

  if (params_.top_p < 1.0f) {
    double cumulative = 0.0;
    size_t cut = 0;
    while (cut < kept) {
      cumulative += probs[cut++];
      if (cumulative >= params_.top_p) break;
    }
    kept = cut;
  }
  if (params_.min_p > 0.0f) {
    const double floor = params_.min_p * probs[0];
    size_t cut = 1;
    while (cut < kept && probs[cut] >= floor) ++cut;
    kept = cut;
  }

  // Masked tokens (probability 0) are never the fallback of a rounded draw.
  while (kept > 1 && probs[kept - 1] == 0.0) --kept;
  double mass = 0.0;
  for (size_t i = 0; i < kept; ++i) mass += probs[i];
  // 53 random bits give a uniform double in [0, 1) independent of the library.
  const double draw = static_cast<double>(rng_() >> 11) * 0x1.0p-53 * mass;
  double cumulative = 0.0;
  for (size_t i = 0; i < kept; ++i) {
    cumulative += probs[i];
    if (draw < cumulative) return order_[i];
  }
  return order_[kept - 1];
}

}  // namespace sluice
