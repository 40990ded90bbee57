// proto/families/common.cpp: shared config readings (see common.h).
#include "proto/families/common.h"

#include "proto/error.h"

namespace sluice::families {

void read_base(const ConfigReader& r, ModelConfig& c, const BaseDefaults& defaults) {
  c.vocab = r.count("vocab_size", 1, kMaxVocab);
  c.hidden = r.count("hidden_size", 8, kMaxWidth);
  c.layers = r.count("num_hidden_layers", 1, kMaxLayers);
  c.rms_eps = r.number_or("rms_norm_eps", defaults.rms_norm_eps, 0.0, 1.0);
  c.max_positions = r.count_or("max_position_embeddings", defaults.max_position_embeddings, 1, kMaxPositions);
  c.tie_embeddings = r.flag_or("tie_word_embeddings", false);
  c.eos_ids = r.token_ids("eos_token_id");
  for (int32_t id : c.eos_ids) {
    if (static_cast<uint32_t>(id) >= c.vocab) fail("{}: key eos_token_id holds {}, outside the vocabulary of {}", r.where(), id, c.vocab);
  }
  c.rope.theta = r.number_or("rope_theta", defaults.rope_theta, 0.0, 1e12);
  if (const nlohmann::json* params = r.find("rope_parameters")) {
    // transformers 5 moves rope_theta here; only plain RoPE means what the
    // families below compute.
    const auto type = params->is_object() ? params->value("rope_type", std::string("default")) : std::string();
    if (!params->is_object() || type != "default") {
      fail("{}: key rope_parameters = {} is not supported: only plain RoPE (rope_type \"default\")", r.where(),
           params->dump());
    }
    if (params->contains("rope_theta")) {
      const ConfigReader inner(*params, r.where() + " rope_parameters");
      c.rope.theta = inner.number_or("rope_theta", c.rope.theta, 0.0, 1e12);
    }
  }
  r.refuse_unless("attention_bias", [](const nlohmann::json& v) { return v == false; },
                  "sluice's attention projections have no bias");
  r.refuse_unless("mlp_bias", [](const nlohmann::json& v) { return v == false; }, "sluice's MLPs have no bias");
  r.refuse_unless("hidden_act", [&](const nlohmann::json& v) { return v == "silu" || (defaults.situ && v == "situ"); },
                  defaults.situ ? "only silu and situ are implemented" : "only silu is implemented");
  r.refuse_unless("partial_rotary_factor", [](const nlohmann::json& v) { return v.is_number() && v.get<double>() == 1.0; },
                  "RoPE over part of the head is not implemented");
}

void read_gqa(const ConfigReader& r, ModelConfig& c, QkNorm qk_norm, bool head_dim_key) {
  c.mixer = MixerKind::kGqa;
  GqaConfig& g = c.gqa;
  g.heads = r.count("num_attention_heads", 1, kMaxHeads);
  g.kv_heads = r.count_or("num_key_value_heads", g.heads, 1, g.heads);
  if (g.heads % g.kv_heads != 0) {
    fail("{}: num_attention_heads {} is not a multiple of num_key_value_heads {}", r.where(), g.heads, g.kv_heads);
  }
  if (head_dim_key && r.has("head_dim")) {
    g.head_dim = r.count("head_dim", 2, kMaxHeadDim);
  } else {
    if (c.hidden % g.heads != 0) {
      fail("{}: hidden_size {} is not a multiple of num_attention_heads {}", r.where(), c.hidden, g.heads);
    }
    g.head_dim = c.hidden / g.heads;
  }
  if (g.head_dim % 2 != 0) fail("{}: head_dim {} must be even for RoPE", r.where(), g.head_dim);
  g.qk_norm = qk_norm;
  g.clip_qkv = r.number_or("clip_qkv", 0.0, 0.0, 1e30, false);
  c.rope.dims = g.head_dim;
  c.rope.pairing = RotaryPairing::kHalfSplit;
  r.refuse_unless("rope_scaling", [](const nlohmann::json&) { return false; },
                  "RoPE scaling is not implemented for this family");
}

void read_softmax_router(const ConfigReader& r, ModelConfig& c, const char* experts_key, uint32_t top_k_default,
                         bool normalize) {
  RouterConfig& router = c.router;
  router.kind = RouterKind::kSoftmax;
  router.experts = r.count(experts_key, 1, kMaxExperts);
  router.top_k = r.count_or("num_experts_per_tok", top_k_default, 1, std::min<uint64_t>(kMaxTopK, router.experts));
  router.normalize = normalize;
}

void check_groups(const ConfigReader& r, const RouterConfig& router, const char* experts_key, const char* groups_key,
                  const char* topk_groups_key) {
  if (router.experts % router.groups != 0) {
    fail("{}: {} {} is not a multiple of {} {}", r.where(), experts_key, router.experts, groups_key, router.groups);
  }
  const uint32_t per_group = router.experts / router.groups;
  if (router.groups > 1 && per_group < 2) {
    fail("{}: {} {} leaves {} expert per group; group scores need two", r.where(), groups_key, router.groups,
         per_group);
  }
  if (uint64_t{router.topk_groups} * per_group < router.top_k) {
    fail("{}: {} {} of {} {} keeps {} experts, fewer than the {} chosen", r.where(), topk_groups_key,
         router.topk_groups, groups_key, router.groups, uint64_t{router.topk_groups} * per_group, router.top_k);
  }
}

void refuse_sliding_window(const ConfigReader& r, const ModelConfig& c, bool window_alone_applies) {
  r.refuse_unless("use_sliding_window", [](const nlohmann::json& v) { return v == false; },
                  "sliding-window attention is not implemented");
  if (window_alone_applies) {
    r.refuse_unless("sliding_window",
                    [&](const nlohmann::json& v) { return v.is_number_integer() && v.get<int64_t>() >= c.max_positions; },
                    "sliding-window attention is not implemented");
  }
}

}  // namespace sluice::families
