// proto/model_config.h: the hyperparameters of one model, read from
// the checkpoint's config.json (kept verbatim in the container manifest) and
// checked. Nothing here touches weights.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace sluice {

enum class Family { kOlmoe, kQwen3Moe };

enum class QkNorm {
  kWholeVector,  // OLMoE: one RMSNorm over all heads' concatenated q (and k)
  kPerHead,      // Qwen3: one RMSNorm of head_dim applied to every head
};

struct ModelConfig {
  Family family = Family::kOlmoe;
  std::string arch;
  uint32_t vocab = 0;
  uint32_t hidden = 0;
  uint32_t layers = 0;
  uint32_t heads = 0;
  uint32_t kv_heads = 0;
  uint32_t head_dim = 0;
  uint32_t dense_width = 0;   // intermediate_size of dense MLP layers
  uint32_t expert_width = 0;  // width of each routed expert
  uint32_t experts = 0;
  uint32_t top_k = 0;
  bool norm_topk_prob = false;
  float rms_eps = 1e-6f;
  float rope_theta = 10000.0f;
  float clip_qkv = 0.0f;  // 0: no clamping
  bool tie_embeddings = false;
  QkNorm qk_norm = QkNorm::kPerHead;
  uint32_t max_positions = 0;
  std::vector<bool> layer_is_moe;
  std::vector<int32_t> eos_ids;

  // Throws Error naming the key when a value is missing, of the wrong type or
  // out of range, or when the architecture is not one sluice runs.
  static ModelConfig from_json(const std::string& arch, const nlohmann::json& config);

  // The context length every command uses when --ctx is not given (0): the
  // model's max_position_embeddings, at most 4096. A larger request is an
  // Error naming --ctx.
  uint32_t context_or_default(uint32_t requested) const;
};

}  // namespace sluice
