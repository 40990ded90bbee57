// proto/model_config.cpp: family-specific reading of config.json.
#include "proto/model_config.h"

#include <algorithm>

#include "proto/error.h"

namespace sluice {
namespace {

uint32_t positive(const nlohmann::json& config, const char* key, uint32_t limit) {
  if (!config.contains(key) || !config[key].is_number_integer()) fail("config.json: {} must be an integer", key);
  const int64_t value = config[key].get<int64_t>();
  if (value <= 0 || value > limit) fail("config.json: {} = {} is out of range (1..{})", key, value, limit);
  return static_cast<uint32_t>(value);
}

float number(const nlohmann::json& config, const char* key, float fallback) {
  if (!config.contains(key) || config[key].is_null()) return fallback;
  if (!config[key].is_number()) fail("config.json: {} must be a number", key);
  return config[key].get<float>();
}

bool flag(const nlohmann::json& config, const char* key, bool fallback) {
  if (!config.contains(key) || config[key].is_null()) return fallback;
  if (!config[key].is_boolean()) fail("config.json: {} must be true or false", key);
  return config[key].get<bool>();
}

std::vector<int32_t> token_ids(const nlohmann::json& config, const char* key) {
  std::vector<int32_t> ids;
  if (!config.contains(key) || config[key].is_null()) return ids;
  const auto& value = config[key];
  auto take = [&](const nlohmann::json& v) {
    if (!v.is_number_integer()) fail("config.json: {} must hold token ids", key);
    ids.push_back(v.get<int32_t>());
  };
  if (value.is_array()) {
    for (const auto& v : value) take(v);
  } else {
    take(value);
  }
  return ids;
}

}  // namespace

ModelConfig ModelConfig::from_json(const std::string& arch, const nlohmann::json& config) {
  if (!config.is_object()) fail("config.json: not a JSON object");
  ModelConfig c;
  c.arch = arch;
  if (arch == "olmoe") {
    c.family = Family::kOlmoe;
    c.qk_norm = QkNorm::kWholeVector;
  } else if (arch == "qwen3_moe") {
    c.family = Family::kQwen3Moe;
    c.qk_norm = QkNorm::kPerHead;
  } else {
    fail("architecture '{}' is not supported (supported: olmoe, qwen3_moe)", arch);
  }
  c.vocab = positive(config, "vocab_size", 1u << 20);
  c.hidden = positive(config, "hidden_size", 65536);
  c.layers = positive(config, "num_hidden_layers", 256);
  c.heads = positive(config, "num_attention_heads", 1024);
  c.kv_heads = config.contains("num_key_value_heads") ? positive(config, "num_key_value_heads", 1024) : c.heads;
  c.head_dim = config.contains("head_dim") && !config["head_dim"].is_null() ? positive(config, "head_dim", 4096)
                                                                            : c.hidden / c.heads;
  if (c.heads % c.kv_heads != 0) {
    fail("config.json: num_attention_heads {} is not a multiple of num_key_value_heads {}", c.heads, c.kv_heads);
  }
  if (c.head_dim % 2 != 0 || c.head_dim == 0) fail("config.json: head_dim {} must be even", c.head_dim);
  c.experts = positive(config, "num_experts", 4096);
  c.top_k = positive(config, "num_experts_per_tok", 64);
  if (c.top_k > c.experts) fail("config.json: num_experts_per_tok {} exceeds num_experts {}", c.top_k, c.experts);
  c.dense_width = positive(config, "intermediate_size", 1u << 20);
  c.expert_width = c.family == Family::kOlmoe ? c.dense_width : positive(config, "moe_intermediate_size", 1u << 20);
  c.norm_topk_prob = flag(config, "norm_topk_prob", c.family == Family::kQwen3Moe);
  c.rms_eps = number(config, "rms_norm_eps", 1e-6f);
  c.rope_theta = number(config, "rope_theta", 10000.0f);
  c.clip_qkv = number(config, "clip_qkv", 0.0f);
  c.tie_embeddings = flag(config, "tie_word_embeddings", false);
  c.max_positions = config.contains("max_position_embeddings") ? positive(config, "max_position_embeddings", 1u << 24)
                                                               : 4096;
  if (!(c.rms_eps > 0.0f) || !(c.rope_theta > 0.0f)) fail("config.json: rms_norm_eps and rope_theta must be > 0");
  if (config.contains("rope_scaling") && !config["rope_scaling"].is_null()) {
    fail("config.json: rope_scaling is not supported yet for {}", arch);
  }

  c.layer_is_moe.assign(c.layers, true);
  if (c.family == Family::kQwen3Moe) {
    uint32_t step = config.contains("decoder_sparse_step") ? positive(config, "decoder_sparse_step", 256) : 1;
    std::vector<bool> mlp_only(c.layers, false);
    if (config.contains("mlp_only_layers") && !config["mlp_only_layers"].is_null()) {
      if (!config["mlp_only_layers"].is_array()) fail("config.json: mlp_only_layers must be a list");
      for (const auto& v : config["mlp_only_layers"]) {
        if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= c.layers) {
          fail("config.json: mlp_only_layers holds {}, not a layer index", v.dump());
        }
        mlp_only[v.get<size_t>()] = true;
      }
    }
    for (uint32_t i = 0; i < c.layers; ++i) c.layer_is_moe[i] = !mlp_only[i] && (i + 1) % step == 0;
  }
  c.eos_ids = token_ids(config, "eos_token_id");
  return c;
}

uint32_t ModelConfig::context_or_default(uint32_t requested) const {
  if (requested == 0) return std::min<uint32_t>(max_positions, 4096);
  if (requested > max_positions) {
    fail("--ctx {} exceeds the model's max_position_embeddings {}", requested, max_positions);
  }
  return requested;
}

}  // namespace sluice
