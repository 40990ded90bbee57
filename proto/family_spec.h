// proto/family_spec.h: the registry of model families. A family spec is one
// file in proto/families/: how its config.json reads (keys, aliases, class
// defaults, refusals) and how its tensors are named. The converter, loader,
// memory plan, predictor and `sluice info` all go through it.
#pragma once

#include <array>
#include <span>
#include <string_view>

#include "proto/config_reader.h"
#include "proto/model_config.h"

namespace sluice {

// Where a family's MoE tensors live: model.layers.{i}.{moe_block}.gate.weight
// for the router, ...{moe_block}.experts.{e}.{expert_matrix[kind]}.weight for
// the routed experts (gate, up, down order).
struct TensorNaming {
  std::string_view prefix;  // before every LM tensor name (Kimi K3: "language_model.")
  std::string_view moe_block = "mlp";
  std::array<std::string_view, 3> expert_matrix = {"gate_proj", "up_proj", "down_proj"};
};

// How a family writes chat prompts: the checkpoint's Jinja chat template
// (from tokenizer_config.json), or code of its own (Kimi K3's XTML, k3.md §5).
enum class ChatFormatKind { kJinjaTemplate, kXtml };

struct FamilySpec {
  std::string_view model_type;
  // Fills every field of `config` but arch from config.json.
  void (*read)(const ConfigReader& reader, ModelConfig& config);
  TensorNaming naming;
  // Where the tensors of K3's vision tower and projector start: stored when
  // the config has a vision_config, else skipped by the converter, which says so.
  std::array<std::string_view, 2> vision_prefixes{};
  ChatFormatKind chat_format = ChatFormatKind::kJinjaTemplate;
};

// The spec registered for `model_type`, or nullptr.
const FamilySpec* find_family(std::string_view model_type);
std::span<const FamilySpec* const> all_families();

// One line per family file: each defines its spec.
extern const FamilySpec kOlmoeFamily;
extern const FamilySpec kQwen3MoeFamily;
extern const FamilySpec kMixtralFamily;
extern const FamilySpec kDeepseekV3Family;
extern const FamilySpec kKimiK2Family;
extern const FamilySpec kKimiLinearFamily;
extern const FamilySpec kKimiK3Family;
// The name sluice gives Kimi K3 (its outer model_type is unconfirmed; the
// family is found by its outer architectures, k3.md §1.1).
inline constexpr std::string_view kKimiK3Type = "kimi_k3";

}  // namespace sluice
