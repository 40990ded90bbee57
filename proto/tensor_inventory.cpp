// proto/tensor_inventory.cpp: the tensor list of each layer kind. Storage
// follows FORMAT.md "Which format a tensor gets": norms, routers and biases
// f32; embeddings q8g128; the LM head kDefaultLmHeadFormat unless the
// converter says otherwise; every other matrix q4g128.
#include "proto/tensor_inventory.h"

#include <fmt/format.h>

#include "proto/error.h"
#include "proto/family_spec.h"

namespace sluice {
namespace {

const FamilySpec& family_of(const ModelConfig& config) {
  const FamilySpec* family = find_family(config.arch);
  if (family == nullptr) fail("architecture '{}' is not supported (supported: {})", config.arch, supported_architectures());
  return *family;
}

std::string_view role_suffix(TensorRole role) {
  switch (role) {
    case TensorRole::kInputNorm: return "input_layernorm.weight";
    case TensorRole::kPostAttentionNorm: return "post_attention_layernorm.weight";
    case TensorRole::kQ: return "self_attn.q_proj.weight";
    case TensorRole::kK: return "self_attn.k_proj.weight";
    case TensorRole::kV: return "self_attn.v_proj.weight";
    case TensorRole::kO: return "self_attn.o_proj.weight";
    case TensorRole::kQNorm: return "self_attn.q_norm.weight";
    case TensorRole::kKNorm: return "self_attn.k_norm.weight";
    case TensorRole::kQA: return "self_attn.q_a_proj.weight";
    case TensorRole::kQANorm: return "self_attn.q_a_layernorm.weight";
    case TensorRole::kQB: return "self_attn.q_b_proj.weight";
    case TensorRole::kKVA: return "self_attn.kv_a_proj_with_mqa.weight";
    case TensorRole::kKVANorm: return "self_attn.kv_a_layernorm.weight";
    case TensorRole::kKVB: return "self_attn.kv_b_proj.weight";
    case TensorRole::kQConv: return "self_attn.q_conv1d.weight";
    case TensorRole::kKConv: return "self_attn.k_conv1d.weight";
    case TensorRole::kVConv: return "self_attn.v_conv1d.weight";
    case TensorRole::kDecayA: return "self_attn.f_a_proj.weight";
    case TensorRole::kDecayB: return "self_attn.f_b_proj.weight";
    case TensorRole::kDecayLog: return "self_attn.A_log";
    case TensorRole::kDecayBias: return "self_attn.dt_bias";
    case TensorRole::kBeta: return "self_attn.b_proj.weight";
    case TensorRole::kGateA: return "self_attn.g_a_proj.weight";
    case TensorRole::kGateB: return "self_attn.g_b_proj.weight";
    case TensorRole::kOutputNorm: return "self_attn.o_norm.weight";
    case TensorRole::kGate: return "self_attn.g_proj.weight";
    case TensorRole::kAttnResNorm: return "self_attention_res_norm.weight";
    case TensorRole::kAttnResProj: return "self_attention_res_proj.weight";
    case TensorRole::kMlpResNorm: return "mlp_res_norm.weight";
    case TensorRole::kMlpResProj: return "mlp_res_proj.weight";
    case TensorRole::kLatentDown: return "routed_expert_down_proj.weight";
    case TensorRole::kLatentNorm: return "routed_expert_norm.weight";
    case TensorRole::kLatentUp: return "routed_expert_up_proj.weight";
    case TensorRole::kDenseGate: return "mlp.gate_proj.weight";
    case TensorRole::kDenseUp: return "mlp.up_proj.weight";
    case TensorRole::kDenseDown: return "mlp.down_proj.weight";
    case TensorRole::kRouter: return "gate.weight";
    case TensorRole::kRouterBias: return "gate.e_score_correction_bias";
    case TensorRole::kSharedGate: return "shared_experts.gate_proj.weight";
    case TensorRole::kSharedUp: return "shared_experts.up_proj.weight";
    case TensorRole::kSharedDown: return "shared_experts.down_proj.weight";
    case TensorRole::kEmbed:
    case TensorRole::kFinalNorm:
    case TensorRole::kFinalResNorm:
    case TensorRole::kFinalResProj:
    case TensorRole::kLmHead: break;
    default: break;  // the vision tower's, named by vision_name
  }
  return "";
}

// K3's vision tower and projector: unprefixed HF names (k3.md §4.1).
std::string vision_name(TensorRole role, uint32_t block) {
  const auto in_block = [block](std::string_view name) {
    return fmt::format("vision_tower.encoder.blocks.{}.{}", block, name);
  };
  switch (role) {
    case TensorRole::kVisionPatchEmbed: return "vision_tower.patch_embed.proj.weight";
    case TensorRole::kVisionPosEmb: return "vision_tower.patch_embed.pos_emb.weight";
    case TensorRole::kVisionNorm0: return in_block("norm0.weight");
    case TensorRole::kVisionQkv: return in_block("wqkv.weight");
    case TensorRole::kVisionO: return in_block("wo.weight");
    case TensorRole::kVisionNorm1: return in_block("norm1.weight");
    case TensorRole::kVisionFc0: return in_block("mlp.fc0.weight");
    case TensorRole::kVisionFc1: return in_block("mlp.fc1.weight");
    case TensorRole::kVisionFinalNorm: return "vision_tower.encoder.final_layernorm.weight";
    case TensorRole::kProjectorIn: return "mm_projector.proj.0.weight";
    case TensorRole::kProjectorOut: return "mm_projector.proj.2.weight";
    case TensorRole::kProjectorNorm: return "mm_projector.post_norm.weight";
    default: return "";
  }
}

bool in_moe_block(TensorRole role) {
  return role == TensorRole::kRouter || role == TensorRole::kRouterBias || role == TensorRole::kSharedGate ||
         role == TensorRole::kSharedUp || role == TensorRole::kSharedDown || role == TensorRole::kLatentDown ||
         role == TensorRole::kLatentNorm || role == TensorRole::kLatentUp;
}

// AttnRes pseudo-queries are [1, hidden] vectors, kept f32 like the norms.
bool is_vector_role(TensorRole role) {
  return role == TensorRole::kAttnResProj || role == TensorRole::kMlpResProj || role == TensorRole::kFinalResProj;
}

TrunkFormat format_of(TensorRole role, size_t dims) {
  if (dims != 2 || role == TensorRole::kRouter || is_vector_role(role)) return TrunkFormat::kF32;
  if (role == TensorRole::kEmbed) return TrunkFormat::kQ8G128;
  if (role == TensorRole::kLmHead) return kDefaultLmHeadFormat;
  return TrunkFormat::kQ4G128;
}

class InventoryBuilder {
 public:
  explicit InventoryBuilder(const ModelConfig& config) : config_(config) {}
  void add(TensorRole role, uint32_t layer, std::vector<uint64_t> shape) {
    TensorSpec spec{tensor_name(config_, role, layer), role, layer, std::move(shape), TrunkFormat::kF32, {}};
    spec.format = format_of(role, spec.shape.size());
    tensors_.push_back(std::move(spec));
  }
  std::vector<TensorSpec> take() { return std::move(tensors_); }

 private:
  const ModelConfig& config_;
  std::vector<TensorSpec> tensors_;
};

void add_gqa(InventoryBuilder& b, const ModelConfig& c, uint32_t i) {
  const GqaConfig& g = c.gqa;
  const uint64_t q = uint64_t{g.heads} * g.head_dim, kv = uint64_t{g.kv_heads} * g.head_dim;
  b.add(TensorRole::kQ, i, {q, c.hidden});
  b.add(TensorRole::kK, i, {kv, c.hidden});
  b.add(TensorRole::kV, i, {kv, c.hidden});
  b.add(TensorRole::kO, i, {c.hidden, q});
  // OLMoE normalises the whole q/k vectors, Qwen3 each head (§1.3, §2.3).
  if (g.qk_norm == QkNorm::kWholeVector) {
    b.add(TensorRole::kQNorm, i, {q});
    b.add(TensorRole::kKNorm, i, {kv});
  } else if (g.qk_norm == QkNorm::kPerHead) {
    b.add(TensorRole::kQNorm, i, {g.head_dim});
    b.add(TensorRole::kKNorm, i, {g.head_dim});
  }
}

void add_mla(InventoryBuilder& b, const ModelConfig& c, uint32_t i) {
  const MlaConfig& m = c.mla;
  const uint64_t h = m.heads;
  if (m.q_lora_rank > 0) {
    b.add(TensorRole::kQA, i, {m.q_lora_rank, c.hidden});
    b.add(TensorRole::kQANorm, i, {m.q_lora_rank});
    b.add(TensorRole::kQB, i, {h * m.qk_dim(), m.q_lora_rank});
  } else {
    b.add(TensorRole::kQ, i, {h * m.qk_dim(), c.hidden});
  }
  b.add(TensorRole::kKVA, i, {m.cached_width(), c.hidden});
  b.add(TensorRole::kKVANorm, i, {m.kv_lora_rank});
  b.add(TensorRole::kKVB, i, {h * (m.nope_dim + m.v_dim), m.kv_lora_rank});
  if (m.output_gate) b.add(TensorRole::kGate, i, {h * m.v_dim, c.hidden});
  b.add(TensorRole::kO, i, {c.hidden, h * m.v_dim});
}

void add_kda(InventoryBuilder& b, const ModelConfig& c, uint32_t i) {
  const uint64_t p = c.kda.width(), d = c.kda.head_dim;
  b.add(TensorRole::kQ, i, {p, c.hidden});
  b.add(TensorRole::kK, i, {p, c.hidden});
  b.add(TensorRole::kV, i, {p, c.hidden});
  for (TensorRole conv : {TensorRole::kQConv, TensorRole::kKConv, TensorRole::kVConv}) {
    b.add(conv, i, {p, 1, c.kda.conv_kernel});
  }
  // The decay and output-gate bottlenecks have rank head_dim (§4.2).
  b.add(TensorRole::kDecayA, i, {d, c.hidden});
  b.add(TensorRole::kDecayB, i, {p, d});
  // K3 pads A_log to head_dim values, of which the first `heads` are read
  // (k3.md §2.2; the padded tensor's dims are unconfirmed).
  b.add(TensorRole::kDecayLog, i, {1, 1, c.kda.full_rank_gate ? d : c.kda.heads, 1});
  b.add(TensorRole::kDecayBias, i, {p});
  b.add(TensorRole::kBeta, i, {c.kda.heads, c.hidden});
  if (c.kda.full_rank_gate) {
    b.add(TensorRole::kGate, i, {p, c.hidden});
  } else {
    b.add(TensorRole::kGateA, i, {d, c.hidden});
    b.add(TensorRole::kGateB, i, {p, d});
  }
  b.add(TensorRole::kOutputNorm, i, {d});
  b.add(TensorRole::kO, i, {c.hidden, p});
}

}  // namespace

uint64_t TensorSpec::elements() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

std::string tensor_name(const ModelConfig& config, TensorRole role, uint32_t layer) {
  const TensorNaming& naming = family_of(config).naming;
  if (role >= TensorRole::kVisionPatchEmbed) return vision_name(role, layer);
  const auto global = [&](std::string_view name) { return fmt::format("{}{}", naming.prefix, name); };
  switch (role) {
    case TensorRole::kEmbed: return global("model.embed_tokens.weight");
    case TensorRole::kFinalNorm: return global("model.norm.weight");
    case TensorRole::kFinalResNorm: return global("model.output_attn_res_norm.weight");
    case TensorRole::kFinalResProj: return global("model.output_attn_res_proj.weight");
    case TensorRole::kLmHead: return global("lm_head.weight");
    default: break;
  }
  if (layer == kNoLayer) fail("tensor_name: a per-layer role needs a layer");
  if (in_moe_block(role)) {
    return fmt::format("{}model.layers.{}.{}.{}", naming.prefix, layer, naming.moe_block, role_suffix(role));
  }
  return fmt::format("{}model.layers.{}.{}", naming.prefix, layer, role_suffix(role));
}

std::string expert_tensor_name(const ModelConfig& config, uint32_t layer, uint32_t expert, MatrixKind kind) {
  const TensorNaming& naming = family_of(config).naming;
  return fmt::format("{}model.layers.{}.{}.experts.{}.{}.weight", naming.prefix, layer, naming.moe_block, expert,
                     naming.expert_matrix[static_cast<int>(kind)]);
}

bool is_vision_tensor(const ModelConfig& config, std::string_view name) {
  for (std::string_view prefix : family_of(config).vision_prefixes) {
    if (!prefix.empty() && name.starts_with(prefix)) return true;
  }
  return false;
}

bool is_unrun_part_tensor(const ModelConfig& config, std::string_view name) {
  return !config.vision && is_vision_tensor(config, name);
}

bool is_skipped_source_tensor(const ModelConfig& config, std::string_view name) {
  const std::string prefix = fmt::format("{}model.layers.", family_of(config).naming.prefix);
  if (config.skipped_source_layers == 0 || !name.starts_with(prefix)) return false;
  uint64_t layer = 0;
  size_t at = prefix.size();
  if (at >= name.size() || name[at] < '0' || name[at] > '9') return false;
  while (at < name.size() && name[at] >= '0' && name[at] <= '9') layer = layer * 10 + (name[at++] - '0');
  return layer >= config.layers && layer < uint64_t{config.layers} + config.skipped_source_layers;
}

std::vector<TensorSpec> trunk_inventory(const ModelConfig& c) {
  InventoryBuilder b(c);
  b.add(TensorRole::kEmbed, kNoLayer, {c.vocab, c.hidden});
  for (uint32_t i = 0; i < c.layers; ++i) {
    b.add(TensorRole::kInputNorm, i, {c.hidden});
    if (c.attn_res_block > 0) {
      b.add(TensorRole::kAttnResNorm, i, {c.hidden});
      b.add(TensorRole::kAttnResProj, i, {1, c.hidden});
      b.add(TensorRole::kMlpResNorm, i, {c.hidden});
      b.add(TensorRole::kMlpResProj, i, {1, c.hidden});
    }
    if (c.is_kda(i)) {
      add_kda(b, c, i);
    } else if (c.mixer == MixerKind::kGqa) {
      add_gqa(b, c, i);
    } else {
      add_mla(b, c, i);
    }
    b.add(TensorRole::kPostAttentionNorm, i, {c.hidden});
    if (c.layer_is_moe[i]) {
      b.add(TensorRole::kRouter, i, {c.experts, c.hidden});
      if (c.router.score_bias) b.add(TensorRole::kRouterBias, i, {c.experts});
      if (c.expert_latent > 0) {
        b.add(TensorRole::kLatentDown, i, {c.expert_latent, c.hidden});
        if (c.expert_latent_norm) b.add(TensorRole::kLatentNorm, i, {c.expert_latent});
        b.add(TensorRole::kLatentUp, i, {c.hidden, c.expert_latent});
      }
      if (c.shared_width > 0) {
        b.add(TensorRole::kSharedGate, i, {c.shared_width, c.hidden});
        b.add(TensorRole::kSharedUp, i, {c.shared_width, c.hidden});
        b.add(TensorRole::kSharedDown, i, {c.hidden, c.shared_width});
      }
    } else {
      b.add(TensorRole::kDenseGate, i, {c.dense_width, c.hidden});
      b.add(TensorRole::kDenseUp, i, {c.dense_width, c.hidden});
      b.add(TensorRole::kDenseDown, i, {c.hidden, c.dense_width});
    }
  }
  if (c.attn_res_block > 0) {
    b.add(TensorRole::kFinalResNorm, kNoLayer, {c.hidden});
    b.add(TensorRole::kFinalResProj, kNoLayer, {1, c.hidden});
  }
  b.add(TensorRole::kFinalNorm, kNoLayer, {c.hidden});
  if (!c.tie_embeddings) b.add(TensorRole::kLmHead, kNoLayer, {c.vocab, c.hidden});
  return b.take();
}

std::vector<TensorSpec> vision_inventory(const ModelConfig& c) {
  std::vector<TensorSpec> tensors;
  if (!c.vision) return tensors;
  const VisionConfig& v = *c.vision;
  // int8 for every matrix: 4 bits failed on this tower (k3.md §4.5).
  const auto add = [&](TensorRole role, uint32_t block, std::vector<uint64_t> shape,
                       std::vector<uint64_t> source_shape = {}) {
    const TrunkFormat format = shape.size() == 2 ? TrunkFormat::kQ8G128 : TrunkFormat::kF32;
    tensors.push_back({vision_name(role, block), role, block, std::move(shape), format, std::move(source_shape)});
  };
  const uint64_t width = v.hidden, patch = v.patch;
  // Groups run along a patch's 3p² values and along a grid cell's width.
  add(TensorRole::kVisionPatchEmbed, kNoLayer, {width, v.patch_values()}, {width, 3, patch, patch});
  add(TensorRole::kVisionPosEmb, kNoLayer, {uint64_t{v.pos_height} * v.pos_width, width},
      {v.pos_height, v.pos_width, width});
  for (uint32_t b = 0; b < v.blocks; ++b) {
    add(TensorRole::kVisionNorm0, b, {width});
    add(TensorRole::kVisionQkv, b, {3ull * v.qkv_width, width});
    add(TensorRole::kVisionO, b, {width, v.qkv_width});
    add(TensorRole::kVisionNorm1, b, {width});
    add(TensorRole::kVisionFc0, b, {v.intermediate, width});
    add(TensorRole::kVisionFc1, b, {width, v.intermediate});
  }
  add(TensorRole::kVisionFinalNorm, kNoLayer, {width});
  add(TensorRole::kProjectorIn, kNoLayer, {v.merged(), v.merged()});
  add(TensorRole::kProjectorOut, kNoLayer, {c.hidden, v.merged()});
  add(TensorRole::kProjectorNorm, kNoLayer, {c.hidden});
  return tensors;
}

std::vector<MoeLayerSpec> moe_inventory(const ModelConfig& c) {
  std::vector<MoeLayerSpec> layers;
  for (uint32_t i = 0; i < c.layers; ++i) {
    if (!c.layer_is_moe[i]) continue;
    const auto base = static_cast<uint32_t>(layers.size() * kRvqStages * kMatrixKinds.size());
    layers.push_back({i, c.experts, c.expert_hidden(), c.expert_width, base});
  }
  return layers;
}

void set_lm_head_format(std::vector<TensorSpec>& trunk, TrunkFormat format) {
  if (format == TrunkFormat::kF32) {
    fail("the LM head can be stored as q8g128, q6g128 or q4g128, not {}", trunk_format_name(format));
  }
  for (TensorSpec& tensor : trunk) {
    if (tensor.role == TensorRole::kLmHead) tensor.format = format;
  }
}

TrunkTensorInfo stored_geometry(const TensorSpec& tensor) {
  TrunkTensorInfo info;
  info.format = tensor.format;
  info.rows = tensor.elements() / tensor.shape.back();
  info.cols = tensor.shape.back();
  return info;
}

uint64_t trunk_tensor_bytes(const TensorSpec& tensor) {
  const TrunkTensorInfo info = stored_geometry(tensor);
  return info.expected_bytes() + info.expected_scale_bytes();
}

std::vector<TrunkPlacement> place_trunk(const std::vector<TensorSpec>& trunk, uint64_t& total) {
  auto align = [](uint64_t v) { return (v + kTrunkAlign - 1) / kTrunkAlign * kTrunkAlign; };
  std::vector<TrunkPlacement> placements;
  uint64_t cursor = 0;
  for (const TensorSpec& tensor : trunk) {
    const TrunkTensorInfo info = stored_geometry(tensor);
    TrunkPlacement p;
    p.offset = align(cursor);
    p.bytes = info.expected_bytes();
    cursor = p.offset + p.bytes;
    if (info.format != TrunkFormat::kF32) {
      p.scale_offset = align(cursor);
      p.scale_bytes = info.expected_scale_bytes();
      cursor = p.scale_offset + p.scale_bytes;
    }
    placements.push_back(p);
  }
  total = align(cursor);
  return placements;
}

uint64_t trunk_file_bytes(const std::vector<TensorSpec>& trunk) {
  uint64_t total = 0;
  place_trunk(trunk, total);
  return total;
}

}  // namespace sluice
