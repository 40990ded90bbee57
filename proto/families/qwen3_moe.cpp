// proto/families/qwen3_moe.cpp: Qwen3-MoE (architectures.md §2): GQA with an
// explicit head_dim and per-head q/k norms, softmax top-k, dense layers from
// mlp_only_layers and decoder_sparse_step. Defaults are Qwen3MoeConfig's
// (note norm_topk_prob: false when absent, though the releases set true).
#include <algorithm>

#include "proto/families/common.h"
#include "proto/family_spec.h"

namespace sluice {
namespace {

void read_qwen3_moe(const ConfigReader& r, ModelConfig& c) {
  families::read_base(r, c, {.rms_norm_eps = 1e-6, .rope_theta = 10000.0, .max_position_embeddings = 32768});
  families::read_gqa(r, c, QkNorm::kPerHead, /*head_dim_key=*/true);
  families::refuse_sliding_window(r, c, /*window_alone_applies=*/false);
  families::read_softmax_router(r, c, "num_experts", 8, r.flag_or("norm_topk_prob", false));
  c.expert_width = r.count_or("moe_intermediate_size", 768, 8, families::kMaxWidth);
  c.dense_width = r.count_or("intermediate_size", 6144, 8, families::kMaxWidth);
  const uint32_t step = r.count_or("decoder_sparse_step", 1, 1, families::kMaxLayers);
  const std::vector<uint32_t> mlp_only = r.layer_list("mlp_only_layers", c.layers);
  c.layer_is_moe.assign(c.layers, false);
  for (uint32_t i = 0; i < c.layers; ++i) {
    const bool dense = std::find(mlp_only.begin(), mlp_only.end(), i) != mlp_only.end();
    c.layer_is_moe[i] = !dense && (i + 1) % step == 0;
  }
}

}  // namespace

const FamilySpec kQwen3MoeFamily{.model_type = "qwen3_moe", .read = read_qwen3_moe, .naming = {}};

}  // namespace sluice
