// compute/convert/model_plan.cpp: the converter's view of a model: the
// family spec's config reading and tensor inventory, plus the check that the
// expert geometry fits a record.
#include "compute/convert/model_plan.h"

namespace sluice::convert {

ModelPlan plan_model(const nlohmann::ordered_json& config, const std::string& name) {
  ModelPlan plan;
  plan.config = ModelConfig::from_json(nlohmann::json::parse(config.dump()), name);
  plan.arch = plan.config.arch;
  plan.trunk = trunk_inventory(plan.config);
  // K3's vision tower goes after the trunk, so the text model's tensors sit where they would without it.
  for (TensorSpec& tensor : vision_inventory(plan.config)) plan.trunk.push_back(std::move(tensor));
  plan.moe_layers = moe_inventory(plan.config);
  // Validates the expert geometry up front (widths must be multiples of 8).
  for (const MoeLayerPlan& layer : plan.moe_layers) RecordLayout::compute(layer.hidden, layer.expert_width);
  return plan;
}

}  // namespace sluice::convert
