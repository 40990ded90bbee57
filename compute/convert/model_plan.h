// compute/convert/model_plan.h: what a checkpoint must contain and where each
// tensor goes, as the family spec's tensor inventory says (proto/
// tensor_inventory.h). Derived from config.json alone; it never reads
// tensor data.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "proto/model_config.h"
#include "proto/record_format.h"
#include "proto/tensor_inventory.h"

namespace sluice::convert {

using sluice::TrunkFormat;
using sluice::trunk_format_name;
using TrunkTensorPlan = TensorSpec;
using MoeLayerPlan = MoeLayerSpec;

struct ModelPlan {
  std::string arch;
  ModelConfig config;
  std::vector<TrunkTensorPlan> trunk;
  std::vector<MoeLayerPlan> moe_layers;
};

// Reads config.json (already parsed; `config_name` is used in messages)
// through its family spec. Refuses an unknown model_type by name, missing,
// out-of-range or unimplemented keys by name.
ModelPlan plan_model(const nlohmann::ordered_json& config, const std::string& config_name);

}  // namespace sluice::convert
