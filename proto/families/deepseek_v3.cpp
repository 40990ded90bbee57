// proto/families/deepseek_v3.cpp: DeepSeek-V3 and Kimi K2 (architectures.md
// §3): MLA with YaRN, sigmoid routing with the score-correction bias and
// group-limited top-k, a shared expert, the first layers dense, the
// multi-token-prediction layers skipped. Defaults are DeepseekV3Config's.
#include <algorithm>

#include "proto/error.h"
#include "proto/families/common.h"
#include "proto/family_spec.h"

namespace sluice {
namespace {

using families::kMaxExperts;
using families::kMaxTopK;
using families::kMaxWidth;

// rope_scaling as transformers' _compute_yarn_parameters and DeepSeek-V3's
// attention read it: rope_type before the legacy type; factor required;
// original_max_position_embeddings absent: max_position_embeddings;
// beta_fast/beta_slow absent, null or 0: 32/1 (its `or`); mscale and
// mscale_all_dim count only when truthy; truncate null: false (its `if`).
void read_yarn(const ConfigReader& r, ModelConfig& c) {
  const nlohmann::json* scaling = r.find("rope_scaling");
  if (scaling == nullptr) return;
  if (!scaling->is_object()) fail("{}: key rope_scaling must be an object, not {}", r.where(), scaling->dump());
  const ConfigReader s(*scaling, r.where() + " rope_scaling");
  const std::string type = s.string("rope_type").value_or(s.string("type").value_or(""));
  if (type != "yarn") fail("{}: key rope_scaling.type = \"{}\" is not supported (only yarn)", r.where(), type);
  if (!s.has("factor")) fail("{}: key rope_scaling.factor is missing (yarn requires it)", r.where());
  s.refuse_unless("partial_rotary_factor", [](const nlohmann::json& v) { return v == 1.0; },
                  "RoPE over part of the head is not implemented");
  Yarn y;
  y.factor = s.number_or("factor", 1.0, 1.0, 1e6, false);
  y.original_max_positions = static_cast<float>(
      s.count_or("original_max_position_embeddings", c.max_positions, 1, families::kMaxPositions));
  const auto or_default = [](float v, float fallback) { return v == 0.0f ? fallback : v; };
  y.beta_fast = or_default(s.number_or("beta_fast", 32.0, 0.0, 1e6, false), 32.0f);
  y.beta_slow = or_default(s.number_or("beta_slow", 1.0, 0.0, 1e6, false), 1.0f);
  y.mscale = s.number_or("mscale", 0.0, 0.0, 1e6, false);
  y.mscale_all_dim = s.number_or("mscale_all_dim", 0.0, 0.0, 1e6, false);
  if (s.has("attention_factor")) y.attention_factor = s.number_or("attention_factor", 1.0, 0.0, 1e6);
  const auto truncate = scaling->find("truncate");
  y.truncate = truncate == scaling->end() || (!truncate->is_null() && s.flag_or("truncate", true));
  c.rope.yarn = y;
}

void read_mla(const ConfigReader& r, ModelConfig& c) {
  c.mixer = MixerKind::kMla;
  MlaConfig& m = c.mla;
  m.heads = r.count("num_attention_heads", 1, families::kMaxHeads);
  // null q_lora_rank means queries from a single q_proj (DeepSeek-V2-Lite).
  if (!r.json().contains("q_lora_rank")) {
    m.q_lora_rank = 1536;
  } else {
    m.q_lora_rank = r.has("q_lora_rank") ? r.count("q_lora_rank", 8, kMaxWidth) : 0;
  }
  m.kv_lora_rank = r.count_or("kv_lora_rank", 512, 8, kMaxWidth);
  m.nope_dim = r.count_or("qk_nope_head_dim", 128, 1, families::kMaxHeadDim);
  m.rope_dim = r.count_or("qk_rope_head_dim", 64, 2, families::kMaxHeadDim);
  m.v_dim = r.count_or("v_head_dim", 128, 1, families::kMaxHeadDim);
  if (m.rope_dim % 2 != 0) fail("{}: qk_rope_head_dim {} must be even for RoPE", r.where(), m.rope_dim);
  // HF builds q_a_layernorm and kv_a_layernorm with the class default eps.
  m.latent_norm_eps = 1e-6f;
  c.rope.dims = m.rope_dim;
  // DeepseekV3Config's rope_interleave (default true): rotate adjacent pairs,
  // as the released weights are laid out; false rotates halves.
  if (r.json().contains("rope_interleave") && r.json()["rope_interleave"].is_null()) {
    fail("{}: key rope_interleave is null (transformers would rotate halves; write false for that)", r.where());
  }
  c.rope.pairing = r.flag_or("rope_interleave", true) ? RotaryPairing::kAdjacent : RotaryPairing::kHalfSplit;
  read_yarn(r, c);
}

void read_sigmoid_router(const ConfigReader& r, ModelConfig& c) {
  const std::string scoring = r.string("scoring_func").value_or("sigmoid");
  if (scoring != "sigmoid") fail("{}: key scoring_func = \"{}\" is not supported (only sigmoid)", r.where(), scoring);
  const std::string method = r.string("topk_method").value_or("noaux_tc");
  if (method != "noaux_tc") fail("{}: key topk_method = \"{}\" is not supported (only noaux_tc)", r.where(), method);
  RouterConfig& router = c.router;
  router.kind = RouterKind::kSigmoid;
  router.experts = r.count_or("n_routed_experts", 256, 1, kMaxExperts);
  router.top_k = r.count_or("num_experts_per_tok", 8, 1, std::min<uint64_t>(kMaxTopK, router.experts));
  router.normalize = r.flag_or("norm_topk_prob", true);
  router.scaling = r.number_or("routed_scaling_factor", 2.5, 0.0, 1e6);
  router.score_bias = true;
  router.groups = r.count_or("n_group", 8, 1, router.experts);
  router.topk_groups = r.count_or("topk_group", 4, 1, router.groups);
  families::check_groups(r, router, "n_routed_experts", "n_group", "topk_group");
  // transformers and the checkpoints' modeling code give excluded groups a
  // selection score of 0; DeepSeek's inference script masks them with −∞.
  const std::string mask = r.string("sluice_group_mask").value_or("zero");
  if (mask != "zero" && mask != "-inf") {
    fail("{}: key sluice_group_mask = \"{}\" must be \"zero\" or \"-inf\"", r.where(), mask);
  }
  router.group_mask = mask == "zero" ? GroupMask::kZero : GroupMask::kNegativeInfinity;
}

void read_deepseek_v3(const ConfigReader& r, ModelConfig& c) {
  families::read_base(r, c, {.rms_norm_eps = 1e-6, .rope_theta = 10000.0, .max_position_embeddings = 4096});
  read_mla(r, c);
  read_sigmoid_router(r, c);
  c.dense_width = r.count_or("intermediate_size", 18432, 8, kMaxWidth);
  c.expert_width = r.count_or("moe_intermediate_size", 2048, 8, kMaxWidth);
  const uint32_t shared = r.count_or("n_shared_experts", 1, 0, 64);
  c.shared_width = shared * c.expert_width;
  const uint32_t first_dense = r.count_or("first_k_dense_replace", 3, 0, c.layers);
  const uint32_t freq = r.count_or("moe_layer_freq", 1, 1, families::kMaxLayers);
  c.layer_is_moe.assign(c.layers, false);
  for (uint32_t i = first_dense; i < c.layers; ++i) c.layer_is_moe[i] = i % freq == 0;
  c.skipped_source_layers = r.count_or("num_nextn_predict_layers", 0, 0, 16);
}

}  // namespace

const FamilySpec kDeepseekV3Family{.model_type = "deepseek_v3", .read = read_deepseek_v3, .naming = {}};
// Kimi K2 ships DeepSeek-V3's modeling code under its own model_type.
const FamilySpec kKimiK2Family{.model_type = "kimi_k2", .read = read_deepseek_v3, .naming = {}};

}  // namespace sluice
