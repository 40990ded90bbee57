// proto/families/kimi_k3.cpp: Kimi K3 (k3.md §1): the outer
// KimiK3ForConditionalGeneration config nests the LM's kimi_linear config
// under text_config and prefixes every LM tensor with language_model.. The
// vision tower (vision_config, vision_tower.*, mm_projector.*) is not run:
// its tensors are skipped by the converter.
#include "proto/error.h"
#include "proto/families/kimi.h"
#include "proto/family_spec.h"

namespace sluice {
namespace {

void read_kimi_k3(const ConfigReader& outer, ModelConfig& c) {
  const nlohmann::json* text = outer.find("text_config");
  if (text == nullptr || !text->is_object())
    fail("{}: key text_config is missing or not an object", outer.where());
  const ConfigReader r(*text, outer.where() + " text_config");
  const std::string type = r.string("model_type").value_or("kimi_linear");
  if (type != "kimi_linear")
    fail("{}: key model_type = \"{}\" is not kimi_linear", r.where(), type);
  families::read_kimi_text(r, c, true);
}

}  // namespace

const FamilySpec kKimiK3Family{.model_type = kKimiK3Type,
                               .read = read_kimi_k3,
                               .naming = {.prefix = "language_model.",
                                          .moe_block = "block_sparse_moe",
                                          .expert_matrix = {"w1", "w3", "w2"}},
                               .skipped_prefixes = {"vision_tower.", "mm_projector."},
                               .chat_format = ChatFormatKind::kXtml};

}  // namespace sluice
