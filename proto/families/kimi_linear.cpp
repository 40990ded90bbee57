// proto/families/kimi_linear.cpp: Kimi-Linear (architectures.md §4): Kimi
// Delta Attention layers with NoPE latent-attention layers between them
// (linear_attn_config, 1-based), sigmoid routing with a selection bias and
// shared experts under block_sparse_moe, dense first layers. Defaults are
// KimiLinearConfig's. Keys of later Kimi releases that reuse this model_type
// are refused by name here; Kimi K3 (kimi_k3.cpp) reads them through
// read_kimi_text.
#include <algorithm>

#include "proto/error.h"
#include "proto/families/common.h"
#include "proto/families/kimi.h"
#include "proto/family_spec.h"

namespace sluice {
namespace {

using families::kMaxWidth;

void refuse_later_releases(const ConfigReader& r, const ConfigReader& linear) {
  for (const char* key : {"routed_expert_hidden_size", "latent_moe_use_norm", "attn_res_block_size",
                          "mla_use_output_gate", "text_config"}) {
    r.refuse_unless(key, [](const nlohmann::json& v) { return v == false; }, "a later Kimi release's feature");
  }
  for (const char* key : {"use_full_rank_gate", "gate_lower_bound"}) {
    linear.refuse_unless(key, [](const nlohmann::json& v) { return v == false; }, "a later Kimi release's feature");
  }
  r.refuse_unless("q_lora_rank", [](const nlohmann::json&) { return false; },
                  "Kimi-Linear's latent attention takes its query from one q_proj");
}

void read_layer_pattern(const ConfigReader& r, const ConfigReader& linear, ModelConfig& c) {
  const auto one_based = [&](const char* key) {
    std::vector<uint32_t> layers;
    const nlohmann::json* list = linear.find(key);
    if (list == nullptr || !list->is_array()) fail("{}: key linear_attn_config.{} must be a list of layers", r.where(), key);
    for (const auto& v : *list) {
      if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > c.layers) {
        fail("{}: key linear_attn_config.{} holds {}, not a layer in 1..{}", r.where(), key, v.dump(), c.layers);
      }
      layers.push_back(v.get<uint32_t>() - 1);
    }
    return layers;
  };
  const std::vector<uint32_t> kda = one_based("kda_layers"), full = one_based("full_attn_layers");
  c.layer_is_kda.assign(c.layers, false);
  std::vector<int> claimed(c.layers, 0);
  for (uint32_t i : kda) c.layer_is_kda[i] = true, ++claimed[i];
  for (uint32_t i : full) ++claimed[i];
  for (uint32_t i = 0; i < c.layers; ++i) {
    if (claimed[i] != 1) {
      fail("{}: layer {} (1-based) is in {} of linear_attn_config's kda_layers and full_attn_layers, not exactly one",
           r.where(), i + 1, claimed[i]);
    }
  }
}

// K3's own keys (k3.md §1.1), each switched on its own key, booleans by value.
void read_k3_features(const ConfigReader& r, const ConfigReader& linear, ModelConfig& c) {
  c.kda.full_rank_gate = linear.flag_or("use_full_rank_gate", false);
  c.kda.bounded_decay = linear.has("gate_lower_bound");
  if (c.kda.bounded_decay) {
    c.kda.gate_lower_bound = linear.number_or("gate_lower_bound", 0.0, -1e6, 0.0);
    if (c.kda.gate_lower_bound == 0.0f) fail("{}: key gate_lower_bound must be negative", linear.where());
  }
  c.mla.output_gate = r.flag_or("mla_use_output_gate", false);
  if (r.has("routed_expert_hidden_size")) {
    c.expert_latent = r.count("routed_expert_hidden_size", 8, kMaxWidth);
    c.expert_latent_norm = r.flag_or("latent_moe_use_norm", false);
  } else {
    r.refuse_unless("latent_moe_use_norm", [](const nlohmann::json& v) { return v == false; },
                    "a latent norm needs routed_expert_hidden_size");
  }
  c.attn_res_block = r.count_or("attn_res_block_size", 0, 0, families::kMaxLayers);
  if (r.string("hidden_act").value_or("silu") == "situ") {
    c.activation.kind = Activation::kSitu;
    c.activation.beta = r.number_or("activation_situ_beta", 4.0, 0.0, 1e6);
    c.activation.linear_beta = r.number_or("activation_situ_linear_beta", 0.0, 0.0, 1e6, false);
  }
}

}  // namespace

namespace families {

void read_kimi_text(const ConfigReader& r, ModelConfig& c, bool k3) {
  families::read_base(r, c, {.rms_norm_eps = 1e-6, .rope_theta = 10000.0, .max_position_embeddings = 4096,
                             .situ = k3});
  if (!r.has("max_position_embeddings")) {
    c.max_positions = r.count_or("model_max_length", 1u << 20, 1, families::kMaxPositions);
  }
  const nlohmann::json* linear_json = r.find("linear_attn_config");
  if (linear_json == nullptr || !linear_json->is_object()) fail("{}: key linear_attn_config is missing", r.where());
  const ConfigReader linear(*linear_json, r.where() + " linear_attn_config");
  // Absent, the class's mla_use_nope is false: latent attention with RoPE.
  if (!r.flag_or("mla_use_nope", false)) {
    fail("{}: key mla_use_nope is {}: only the NoPE latent attention of {} is implemented", r.where(),
         r.has("mla_use_nope") ? "false" : "absent (the class default false)", k3 ? "Kimi K3" : "Kimi-Linear");
  }
  if (k3) {
    read_k3_features(r, linear, c);
  } else {
    refuse_later_releases(r, linear);
  }
  read_layer_pattern(r, linear, c);

  c.kda.heads = linear.count("num_heads", 1, families::kMaxHeads);
  c.kda.head_dim = linear.count("head_dim", 1, families::kMaxHeadDim);
  c.kda.conv_kernel = linear.count_or("short_conv_kernel_size", 4, 1, 16);

  c.mixer = MixerKind::kMla;
  MlaConfig& m = c.mla;
  m.heads = r.count("num_attention_heads", 1, families::kMaxHeads);
  m.q_lora_rank = k3 && r.has("q_lora_rank") ? r.count("q_lora_rank", 8, kMaxWidth) : 0;
  m.kv_lora_rank = r.count("kv_lora_rank", 8, kMaxWidth);
  m.nope_dim = r.count("qk_nope_head_dim", 1, families::kMaxHeadDim);
  m.rope_dim = r.count("qk_rope_head_dim", 1, families::kMaxHeadDim);
  m.v_dim = r.count("v_head_dim", 1, families::kMaxHeadDim);
  // HF builds kv_a_layernorm with the class default; K3's reference engine,
  // checked against the release, uses rms_norm_eps (k3.md §2.3, unconfirmed).
  m.latent_norm_eps = k3 ? c.rms_eps : 1e-6f;
  c.rope.dims = 0;            // NoPE: the "rope" dims are cached unrotated

  const std::string activation = r.string("moe_router_activation_func").value_or("sigmoid");
  if (activation != "sigmoid") {
    fail("{}: key moe_router_activation_func = \"{}\" is not supported (only sigmoid)", r.where(), activation);
  }
  RouterConfig& router = c.router;
  router.kind = RouterKind::kSigmoid;
  router.experts = r.count("num_experts", 1, families::kMaxExperts);
  router.top_k = r.count("num_experts_per_token", 1, std::min<uint64_t>(families::kMaxTopK, router.experts),
                         {"num_experts_per_tok"});
  // The released code renormalises only when more than one expert is chosen.
  router.normalize = r.flag_or("moe_renormalize", true) && router.top_k > 1;
  router.scaling = r.number_or("routed_scaling_factor", 1.0, 0.0, 1e6);
  router.score_bias = true;
  const bool grouped = r.flag_or("use_grouped_topk", true);
  router.groups = grouped ? r.count_or("num_expert_group", 1, 1, router.experts) : 1;
  router.topk_groups = grouped ? r.count_or("topk_group", 1, 1, router.groups) : 1;
  families::check_groups(r, router, "num_experts", "num_expert_group", "topk_group");
  router.group_mask = GroupMask::kZero;
  // K3 weighs by the unbiased scores (k3.md §2.4); the fork is Kimi-Linear's.
  const std::string weights = r.string("sluice_moe_weights").value_or(k3 ? "unbiased" : "biased");
  if (weights != "biased" && weights != "unbiased") {
    fail("{}: key sluice_moe_weights = \"{}\" must be \"biased\" (the released modeling code) or \"unbiased\"",
         r.where(), weights);
  }
  router.weights_from_biased = weights == "biased";

  c.dense_width = r.count("intermediate_size", 8, kMaxWidth);
  c.expert_width = r.count("moe_intermediate_size", 8, kMaxWidth);
  c.shared_width = r.count_or("num_shared_experts", 0, 0, 64) * c.expert_width;
  const uint32_t first_dense = r.count_or("first_k_dense_replace", 0, 0, c.layers);
  const uint32_t freq = r.count_or("moe_layer_freq", 1, 1, families::kMaxLayers);
  c.layer_is_moe.assign(c.layers, false);
  for (uint32_t i = first_dense; i < c.layers; ++i) c.layer_is_moe[i] = i % freq == 0;
  c.skipped_source_layers = r.count_or("num_nextn_predict_layers", 0, 0, 16);
}

}  // namespace families

namespace {

void read_kimi_linear(const ConfigReader& r, ModelConfig& c) { families::read_kimi_text(r, c, false); }

}  // namespace

const FamilySpec kKimiLinearFamily{.model_type = "kimi_linear",
                                   .read = read_kimi_linear,
                                   .naming = {.moe_block = "block_sparse_moe", .expert_matrix = {"w1", "w3", "w2"}}};

}  // namespace sluice
