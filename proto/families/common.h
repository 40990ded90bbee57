// proto/families/common.h: the config readings several family specs share
// (sizes, GQA attention, plain RoPE, softmax routing, keys nobody
// implements). Each takes the family's class defaults as arguments, so the
// defaults stay written in the family's own file.
#pragma once

#include <algorithm>

#include "proto/config_reader.h"
#include "proto/manifest.h"
#include "proto/model_config.h"

namespace sluice::families {

// Bounds every family shares: the container's (proto/manifest.h), and the
// attention shapes a config may ask for.
inline constexpr uint64_t kMaxLayers = sluice::kMaxLayers, kMaxExperts = kMaxExpertsPerLayer,
                          kMaxTopK = sluice::kMaxTopK, kMaxWidth = kMaxHidden, kMaxVocab = sluice::kMaxVocab;
inline constexpr uint64_t kMaxHeads = 1024, kMaxHeadDim = 4096, kMaxPositions = 1u << 24;

struct BaseDefaults {
  double rms_norm_eps;
  double rope_theta;
  uint32_t max_position_embeddings;
  bool situ = false;  // hidden_act "situ" is the family's to read (Kimi K3)
};

// vocab_size, hidden_size, num_hidden_layers (required); rms_norm_eps,
// rope_theta (or rope_parameters.rope_theta), max_position_embeddings,
// tie_word_embeddings, eos_token_id; and the refusals every family shares:
// attention_bias, a hidden_act other than silu (or situ, when allowed), partial_rotary_factor,
// a rope_parameters dict that is not plain RoPE.
void read_base(const ConfigReader& r, ModelConfig& c, const BaseDefaults& defaults);

// num_attention_heads, num_key_value_heads (absent or null: the head count),
// head_dim (absent or null: hidden / heads, when `head_dim_key`), half-split
// RoPE over the whole head; rope_scaling must be null.
void read_gqa(const ConfigReader& r, ModelConfig& c, QkNorm qk_norm, bool head_dim_key);

// Softmax routing over `experts_key` experts.
void read_softmax_router(const ConfigReader& r, ModelConfig& c, const char* experts_key, uint32_t top_k_default,
                         bool normalize);

// Refuses group-limited routing that cannot work, naming the family's keys:
// experts not a multiple of the groups, a group too small for its two-best
// score, or kept groups holding fewer experts than top-k.
void check_groups(const ConfigReader& r, const RouterConfig& router, const char* experts_key, const char* groups_key,
                  const char* topk_groups_key);

// Refuses a sliding window that would ever apply: `use_sliding_window`
// true, or (when `window_alone_applies`) `sliding_window` shorter than the
// model's maximum positions.
void refuse_sliding_window(const ConfigReader& r, const ModelConfig& c, bool window_alone_applies);

}  // namespace sluice::families
