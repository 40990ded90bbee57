// compute/routing/routing.cpp: the two router kinds. Every sum runs in id
// order in f32 so scripts/reference.py and lookahead agree bit for bit.
#include "compute/routing/routing.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "proto/error.h"

namespace sluice {
namespace {

void check_inputs(const RouterConfig& router, std::span<const float> logits, std::span<const float> bias) {
  if (logits.size() != router.experts) fail("route: {} logits for {} experts", logits.size(), router.experts);
  if (router.score_bias && bias.size() != router.experts) {
    fail("route: {} bias values for {} experts", bias.size(), router.experts);
  }
}

// Selection order over all experts: by `key` descending, lower id on ties.
std::vector<uint32_t> order_by(const std::vector<float>& key, uint32_t k) {
  std::vector<uint32_t> order(key.size());
  std::iota(order.begin(), order.end(), 0u);
  k = std::min<uint32_t>(k, static_cast<uint32_t>(order.size()));
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](uint32_t a, uint32_t b) { return key[a] > key[b] || (key[a] == key[b] && a < b); });
  order.resize(k);
  return order;
}

std::vector<float> softmax(std::span<const float> logits) {
  const float max_logit = *std::max_element(logits.begin(), logits.end());
  std::vector<float> probs(logits.size());
  float total = 0.0f;
  for (size_t e = 0; e < logits.size(); ++e) {
    probs[e] = std::exp(logits[e] - max_logit);
    total += probs[e];
  }
  for (float& p : probs) p /= total;
  return probs;
}

std::vector<float> sigmoid(std::span<const float> logits) {
  std::vector<float> scores(logits.size());
  for (size_t e = 0; e < logits.size(); ++e) scores[e] = 1.0f / (1.0f + std::exp(-logits[e]));
  return scores;
}

// s + bias, with the experts of groups outside the best topk_groups masked.
std::vector<float> selection_scores(const RouterConfig& router, const std::vector<float>& scores,
                                    std::span<const float> bias) {
  std::vector<float> selection(scores);
  if (router.score_bias) {
    for (size_t e = 0; e < selection.size(); ++e) selection[e] += bias[e];
  }
  if (router.groups <= 1 || router.topk_groups >= router.groups) return selection;
  const uint32_t per_group = router.experts / router.groups;
  std::vector<float> group_score(router.groups);
  for (uint32_t g = 0; g < router.groups; ++g) {
    float best = -std::numeric_limits<float>::infinity(), second = best;
    for (uint32_t e = g * per_group; e < (g + 1) * per_group; ++e) {
      if (selection[e] > best) {
        second = best;
        best = selection[e];
      } else if (selection[e] > second) {
        second = selection[e];
      }
    }
    group_score[g] = best + second;
  }
  const std::vector<uint32_t> kept = order_by(group_score, router.topk_groups);
  const float masked = router.group_mask == GroupMask::kZero ? 0.0f : -std::numeric_limits<float>::infinity();
  for (uint32_t g = 0; g < router.groups; ++g) {
    if (std::find(kept.begin(), kept.end(), g) != kept.end()) continue;
    for (uint32_t e = g * per_group; e < (g + 1) * per_group; ++e) selection[e] = masked;
  }
  return selection;
}

}  // namespace

Routing route(const RouterConfig& router, std::span<const float> logits, std::span<const float> bias) {
  check_inputs(router, logits, bias);
  Routing routing;
  if (router.kind == RouterKind::kSoftmax) {
    const std::vector<float> probs = softmax(logits);
    routing.experts = order_by(probs, router.top_k);
    float chosen = 0.0f;
    for (uint32_t e : routing.experts) {
      routing.weights.push_back(probs[e]);
      chosen += probs[e];
    }
    if (router.normalize) {
      for (float& w : routing.weights) w /= chosen;
    }
  } else {
    const std::vector<float> scores = sigmoid(logits);
    routing.experts = order_by(selection_scores(router, scores, bias), router.top_k);
    float chosen = 0.0f;
    for (uint32_t e : routing.experts) {
      const float weight = router.weights_from_biased ? scores[e] + bias[e] : scores[e];
      routing.weights.push_back(weight);
      chosen += weight;
    }
    const float denominator = chosen + 1e-20f;
    for (float& w : routing.weights) {
      if (router.normalize) w /= denominator;
      w *= router.scaling;
    }
  }
  return routing;
}

std::vector<uint32_t> rank_experts(const RouterConfig& router, std::span<const float> logits,
                                   std::span<const float> bias, uint32_t k) {
  check_inputs(router, logits, bias);
  if (router.kind == RouterKind::kSoftmax) return order_by(softmax(logits), k);
  return order_by(selection_scores(router, sigmoid(logits), bias), k);
}

}  // namespace sluice
