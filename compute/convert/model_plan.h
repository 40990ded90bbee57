// compute/convert/model_plan.h: what a checkpoint of a supported family must
// contain and where each tensor goes (FORMAT.md "Which format a tensor
// gets"). Derived from config.json alone; it never reads tensor data.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "proto/record_format.h"

namespace sluice::convert {

enum class TrunkFormat { kF32, kQ8G128, kQ4G128 };
const char* trunk_format_name(TrunkFormat format);

struct TrunkTensorPlan {
  std::string name;
  std::vector<uint64_t> shape;  // [n] or [rows, cols]
  TrunkFormat format = TrunkFormat::kF32;
};

struct MoeLayerPlan {
  uint32_t layer = 0;
  uint32_t experts = 0;
  uint32_t hidden = 0;
  uint32_t expert_width = 0;
  uint32_t codebook_base = 0;  // 9 codebooks per MoE layer, in layer order
};

struct ModelPlan {
  std::string arch;  // "olmoe" or "qwen3_moe"
  std::vector<TrunkTensorPlan> trunk;
  std::vector<MoeLayerPlan> moe_layers;
};

// Reads the family's keys from config.json (already parsed; `config_name`
// is used in messages). Refuses an unknown model_type by name, missing or
// out-of-range keys by name.
ModelPlan plan_model(const nlohmann::ordered_json& config, const std::string& config_name);

// "model.layers.3.mlp.experts.17.down_proj.weight"
std::string expert_tensor_name(uint32_t layer, uint32_t expert, MatrixKind kind);

}  // namespace sluice::convert
