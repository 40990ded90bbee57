// compute/model/sampler.cpp: the sampling chain. Candidates are kept sorted by
// (logit desc, id asc) so every filter is a prefix cut and ties are stable.
#include "compute/model/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "proto/error.h"

namespace sluice {

void validate(const SamplingParams& params) {
  if (!(params.temperature >= 0.0f) || !std::isfinite(params.temperature)) {
    fail("--temp must be a finite number >= 0 (got {})", params.temperature);
  }
  if (params.top_k < 0) fail("--top-k must be >= 0 (got {})", params.top_k);
  if (!(params.top_p > 0.0f && params.top_p <= 1.0f)) fail("--top-p must be in (0, 1] (got {})", params.top_p);
  if (!(params.min_p >= 0.0f && params.min_p < 1.0f)) fail("--min-p must be in [0, 1) (got {})", params.min_p);
  if (!(params.repetition_penalty > 0.0f) || !std::isfinite(params.repetition_penalty)) {
    fail("--repeat-penalty must be a finite number > 0 (got {})", params.repetition_penalty);
  }
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) { validate(params); }

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> context) {
  const auto vocab = static_cast<int32_t>(logits.size());
  if (vocab == 0) fail("cannot sample from an empty row of logits");
  scratch_.assign(logits.begin(), logits.end());
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
      if (std::none_of(scratch_.begin(), scratch_.end(), [](float l) { return std::isfinite(l); })) {
        fail("the output constraint allows no token here (the grammar has no way to continue)");
      }
      token = draw();
    }
    constraint->accept(token);
  }
  return token;
}

int32_t Sampler::draw() {
  const auto vocab = static_cast<int32_t>(scratch_.size());
  if (params_.temperature <= 0.0f) {
    return static_cast<int32_t>(std::max_element(scratch_.begin(), scratch_.end()) - scratch_.begin());
  }

  order_.resize(static_cast<size_t>(vocab));
  std::iota(order_.begin(), order_.end(), 0);
  auto by_logit = [&](int32_t a, int32_t b) {
    const float la = scratch_[static_cast<size_t>(a)], lb = scratch_[static_cast<size_t>(b)];
    return la > lb || (la == lb && a < b);
  };
  size_t kept = order_.size();
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < kept) {
    kept = static_cast<size_t>(params_.top_k);
    std::partial_sort(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(kept), order_.end(), by_logit);
  } else {
    std::sort(order_.begin(), order_.end(), by_logit);
  }

  // Softmax over the kept candidates at this temperature, in double so the
  // cumulative cut of top-p does not depend on summation noise.
  const double max_logit = scratch_[static_cast<size_t>(order_[0])];
  std::vector<double> probs(kept);
  double total = 0.0;
  for (size_t i = 0; i < kept; ++i) {
    probs[i] = std::exp((scratch_[static_cast<size_t>(order_[i])] - max_logit) / params_.temperature);
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
