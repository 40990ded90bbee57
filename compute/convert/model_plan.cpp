// compute/convert/model_plan.cpp: OLMoE and Qwen3-MoE tensor naming and
// layer types (architectures.md §1.2, §2.1-2.2). Config values are
// untrusted: every dimension is range-checked against FORMAT.md's bounds.
#include "compute/convert/model_plan.h"

#include <algorithm>

#include <fmt/format.h>

#include "proto/error.h"

namespace sluice::convert {
namespace {

class ConfigReader {
 public:
  ConfigReader(const nlohmann::ordered_json& config, const std::string& name) : config_(config), name_(name) {}

  uint64_t get(const char* key, uint64_t lo, uint64_t hi) const {
    const auto it = config_.find(key);
    if (it == config_.end() || !it->is_number_integer() || it->get<int64_t>() < 0) {
      fail("{}: key {} missing or not a non-negative integer", name_, key);
    }
    return check(key, it->get<uint64_t>(), lo, hi);
  }
  uint64_t get_or(const char* key, uint64_t fallback, uint64_t lo, uint64_t hi) const {
    const auto it = config_.find(key);
    if (it == config_.end() || it->is_null()) return check(key, fallback, lo, hi);
    return get(key, lo, hi);
  }
  bool flag(const char* key) const {
    const auto it = config_.find(key);
    return it != config_.end() && it->is_boolean() && it->get<bool>();
  }
  std::vector<uint64_t> list(const char* key) const {
    std::vector<uint64_t> out;
    const auto it = config_.find(key);
    if (it == config_.end() || it->is_null()) return out;
    if (!it->is_array()) fail("{}: key {} is not a list", name_, key);
    for (const auto& v : *it) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0) fail("{}: key {} holds {}, not a layer index", name_, key, v.dump());
      out.push_back(v.get<uint64_t>());
    }
    return out;
  }

 private:
  uint64_t check(const char* key, uint64_t value, uint64_t lo, uint64_t hi) const {
    if (value < lo || value > hi) fail("{}: key {} is {}, outside [{}, {}]", name_, key, value, lo, hi);
    return value;
  }
  const nlohmann::ordered_json& config_;
  const std::string& name_;
};

constexpr uint64_t kMaxLayers = 256, kMaxExperts = 4096, kMaxTopK = 64, kMaxWidth = 65536,
                   kMaxVocab = 1048576, kMaxHeads = 1024, kMaxHeadDim = 4096;

TrunkFormat matrix_format(const std::string& name) {
  if (name == "model.embed_tokens.weight" || name == "lm_head.weight") return TrunkFormat::kQ8G128;
  return TrunkFormat::kQ4G128;
}

}  // namespace

const char* trunk_format_name(TrunkFormat format) {
  switch (format) {
    case TrunkFormat::kF32: return "f32";
    case TrunkFormat::kQ8G128: return "q8g128";
    case TrunkFormat::kQ4G128: return "q4g128";
  }
  return "?";
}

std::string expert_tensor_name(uint32_t layer, uint32_t expert, MatrixKind kind) {
  return fmt::format("model.layers.{}.mlp.experts.{}.{}_proj.weight", layer, expert, matrix_kind_name(kind));
}

ModelPlan plan_model(const nlohmann::ordered_json& config, const std::string& name) {
  if (!config.is_object()) fail("{}: not a JSON object", name);
  const auto type_it = config.find("model_type");
  if (type_it == config.end() || !type_it->is_string()) fail("{}: key model_type missing", name);
  ModelPlan plan;
  plan.arch = type_it->get<std::string>();
  const bool qwen = plan.arch == "qwen3_moe";
  if (!qwen && plan.arch != "olmoe") {
    fail("{}: unsupported model_type {} (supported: olmoe, qwen3_moe)", name, plan.arch);
  }
  const ConfigReader cfg(config, name);
  const uint64_t hidden = cfg.get("hidden_size", 8, kMaxWidth);
  const uint64_t layers = cfg.get("num_hidden_layers", 1, kMaxLayers);
  const uint64_t heads = cfg.get("num_attention_heads", 1, kMaxHeads);
  const uint64_t kv_heads = cfg.get_or("num_key_value_heads", heads, 1, heads);
  const uint64_t vocab = cfg.get("vocab_size", 1, kMaxVocab);
  const uint64_t experts = cfg.get("num_experts", 1, kMaxExperts);
  cfg.get("num_experts_per_tok", 1, std::min(kMaxTopK, experts));
  const uint64_t head_dim = qwen ? cfg.get_or("head_dim", hidden / heads, 1, kMaxHeadDim) : hidden / heads;
  if (!qwen && hidden % heads != 0) fail("{}: hidden_size {} is not a multiple of num_attention_heads {}", name, hidden, heads);
  const uint64_t expert_width = qwen ? cfg.get("moe_intermediate_size", 8, kMaxWidth) : cfg.get("intermediate_size", 8, kMaxWidth);
  const uint64_t dense_width = qwen ? cfg.get("intermediate_size", 1, kMaxWidth) : 0;
  const uint64_t sparse_step = qwen ? cfg.get_or("decoder_sparse_step", 1, 1, kMaxLayers) : 1;
  const std::vector<uint64_t> mlp_only = qwen ? cfg.list("mlp_only_layers") : std::vector<uint64_t>{};
  // Validates the expert geometry up front (widths must be multiples of 8).
  RecordLayout::compute(static_cast<uint32_t>(hidden), static_cast<uint32_t>(expert_width));

  auto add = [&](std::string tensor, std::vector<uint64_t> shape, TrunkFormat format) {
    plan.trunk.push_back({std::move(tensor), std::move(shape), format});
  };
  auto add_matrix = [&](std::string tensor, uint64_t rows, uint64_t cols) {
    const TrunkFormat format = matrix_format(tensor);
    add(std::move(tensor), {rows, cols}, format);
  };
  add_matrix("model.embed_tokens.weight", vocab, hidden);
  const uint64_t q_width = heads * head_dim, kv_width = kv_heads * head_dim;
  for (uint32_t i = 0; i < layers; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    add(p + "input_layernorm.weight", {hidden}, TrunkFormat::kF32);
    add_matrix(p + "self_attn.q_proj.weight", q_width, hidden);
    add_matrix(p + "self_attn.k_proj.weight", kv_width, hidden);
    add_matrix(p + "self_attn.v_proj.weight", kv_width, hidden);
    add_matrix(p + "self_attn.o_proj.weight", hidden, q_width);
    // OLMoE normalises the whole q/k vectors, Qwen3 each head (§1.3, §2.3).
    add(p + "self_attn.q_norm.weight", {qwen ? head_dim : q_width}, TrunkFormat::kF32);
    add(p + "self_attn.k_norm.weight", {qwen ? head_dim : kv_width}, TrunkFormat::kF32);
    add(p + "post_attention_layernorm.weight", {hidden}, TrunkFormat::kF32);
    const bool moe = std::find(mlp_only.begin(), mlp_only.end(), i) == mlp_only.end() && (i + 1) % sparse_step == 0;
    if (moe) {
      add(p + "mlp.gate.weight", {experts, hidden}, TrunkFormat::kF32);
      plan.moe_layers.push_back({i, static_cast<uint32_t>(experts), static_cast<uint32_t>(hidden),
                                 static_cast<uint32_t>(expert_width),
                                 static_cast<uint32_t>(plan.moe_layers.size() * kRvqStages * 3)});
    } else {
      add_matrix(p + "mlp.gate_proj.weight", dense_width, hidden);
      add_matrix(p + "mlp.up_proj.weight", dense_width, hidden);
      add_matrix(p + "mlp.down_proj.weight", hidden, dense_width);
    }
  }
  add("model.norm.weight", {hidden}, TrunkFormat::kF32);
  if (!cfg.flag("tie_word_embeddings")) add_matrix("lm_head.weight", vocab, hidden);
  return plan;
}

}  // namespace sluice::convert
