// proto/families/olmoe.cpp: OLMoE (architectures.md §1): GQA with q/k norms
// over the whole concatenated vectors, softmax top-k without
// renormalisation, every layer MoE. Defaults are OlmoeConfig's.
#include "proto/families/common.h"
#include "proto/family_spec.h"

namespace sluice {
namespace {

void read_olmoe(const ConfigReader& r, ModelConfig& c) {
  families::read_base(r, c, {.rms_norm_eps = 1e-5, .rope_theta = 10000.0, .max_position_embeddings = 4096});
  families::read_gqa(r, c, QkNorm::kWholeVector, /*head_dim_key=*/false);
  families::read_softmax_router(r, c, "num_experts", 8, r.flag_or("norm_topk_prob", false));
  // OLMoE's intermediate_size is the expert width; it has no dense layers.
  c.expert_width = r.count("intermediate_size", 8, families::kMaxWidth);
  c.layer_is_moe.assign(c.layers, true);
}

}  // namespace

const FamilySpec kOlmoeFamily{.model_type = "olmoe", .read = read_olmoe, .naming = {}};

}  // namespace sluice
