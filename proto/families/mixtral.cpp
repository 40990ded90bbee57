// proto/families/mixtral.cpp: Mixtral (architectures.md §5): GQA without q/k
// norms, softmax top-2 renormalised, every layer MoE, experts named w1/w3/w2
// under block_sparse_moe. Defaults are MixtralConfig's.
#include "proto/families/common.h"
#include "proto/family_spec.h"

namespace sluice {
namespace {

void read_mixtral(const ConfigReader& r, ModelConfig& c) {
  families::read_base(r, c, {.rms_norm_eps = 1e-5, .rope_theta = 1e6, .max_position_embeddings = 4096 * 32});
  families::read_gqa(r, c, QkNorm::kNone, /*head_dim_key=*/true);
  families::refuse_sliding_window(r, c, /*window_alone_applies=*/true);
  families::read_softmax_router(r, c, "num_local_experts", 2, /*normalize=*/true);
  c.expert_width = r.count_or("intermediate_size", 14336, 8, families::kMaxWidth);
  c.layer_is_moe.assign(c.layers, true);
}

}  // namespace

const FamilySpec kMixtralFamily{.model_type = "mixtral",
                                .read = read_mixtral,
                                .naming = {.moe_block = "block_sparse_moe", .expert_matrix = {"w1", "w3", "w2"}}};

}  // namespace sluice
