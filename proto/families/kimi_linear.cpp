// proto/families/kimi_linear.cpp: Kimi-Linear (architectures.md §4): Kimi
// Delta Attention layers with NoPE latent-attention layers between them
// (linear_attn_config, 1-based), sigmoid routing with a selection bias and
// shared experts under block_sparse_moe, dense first layers. Defaults are
// KimiLinearConfig's. Keys of later Kimi releases that reuse this model_type
// are refused by name.
#include <algorithm>

#include "proto/error.h"
#include "proto/families/common.h"
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
  r.refuse_unless("mla_use_nope", [](const nlohmann::json& v) { return v == true; },
                  "only the NoPE latent attention of Kimi-Linear is implemented");
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

void read_kimi_linear(const ConfigReader& r, ModelConfig& c) {
  families::read_base(r, c, {.rms_norm_eps = 1e-6, .rope_theta = 10000.0, .max_position_embeddings = 4096});
  if (!r.has("max_position_embeddings")) {
    c.max_positions = r.count_or("model_max_length", 1u << 20, 1, families::kMaxPositions);
  }
  const nlohmann::json* linear_json = r.find("linear_attn_config");
  if (linear_json == nullptr || !linear_json->is_object()) fail("{}: key linear_attn_config is missing", r.where());
  const ConfigReader linear(*linear_json, r.where() + " linear_attn_config");
  refuse_later_releases(r, linear);
  read_layer_pattern(r, linear, c);

  c.kda.heads = linear.count("num_heads", 1, families::kMaxHeads);
  c.kda.head_dim = linear.count("head_dim", 1, families::kMaxHeadDim);
  c.kda.conv_kernel = linear.count_or("short_conv_kernel_size", 4, 1, 16);

  c.mixer = MixerKind::kMla;
  MlaConfig& m = c.mla;
  m.heads = r.count("num_attention_heads", 1, families::kMaxHeads);
  m.q_lora_rank = 0;
  m.kv_lora_rank = r.count("kv_lora_rank", 8, kMaxWidth);
  m.nope_dim = r.count("qk_nope_head_dim", 1, families::kMaxHeadDim);
  m.rope_dim = r.count("qk_rope_head_dim", 1, families::kMaxHeadDim);
  m.v_dim = r.count("v_head_dim", 1, families::kMaxHeadDim);
  m.latent_norm_eps = 1e-6f;  // HF builds kv_a_layernorm with the class default
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
  const std::string weights = r.string("sluice_moe_weights").value_or("biased");
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

}  // namespace

const FamilySpec kKimiLinearFamily{.model_type = "kimi_linear",
                                   .read = read_kimi_linear,
                                   .naming = {.moe_block = "block_sparse_moe", .expert_matrix = {"w1", "w3", "w2"}}};

}  // namespace sluice
