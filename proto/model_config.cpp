// proto/model_config.cpp: reading config.json through the family specs, and
// the arithmetic every room derives from a config (RoPE frequencies, state
// and scratch sizes, the attention scale).
#include "proto/model_config.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include <fmt/format.h>

#include "proto/error.h"
#include "proto/family_spec.h"

namespace sluice {
namespace {

// YaRN's attention-magnitude correction (architectures.md §0.6).
double yarn_mscale(double factor, double mscale) {
  return factor <= 1.0 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0;
}

// The rotary dimension pair index at which `rotations` full turns fit into
// the original context.
double yarn_correction_dim(double rotations, double dims, double base, double original) {
  return dims * std::log(original / (rotations * 2.0 * std::numbers::pi)) / (2.0 * std::log(base));
}

}  // namespace

std::string supported_architectures() {
  std::string names;
  for (const FamilySpec* family : all_families()) {
    if (!names.empty()) names += ", ";
    names += family->model_type;
  }
  return names;
}

ModelConfig ModelConfig::from_json(const std::string& arch, const nlohmann::json& config, const std::string& where) {
  const FamilySpec* family = find_family(arch);
  if (family == nullptr) fail("{}: model_type {} is not supported (supported: {})", where, arch, supported_architectures());
  const ConfigReader reader(config, where);
  ModelConfig c;
  c.arch = arch;
  family->read(reader, c);
  c.experts = c.router.experts;
  c.top_k = c.router.top_k;
  if (c.layer_is_kda.empty()) c.layer_is_kda.assign(c.layers, false);
  return c;
}

ModelConfig ModelConfig::from_json(const nlohmann::json& config, const std::string& where) {
  if (!config.is_object()) fail("{}: not a JSON object", where);
  // Kimi K3 nests its LM config and names it only by the outer class
  // (k3.md §1.1): its text_config says kimi_linear like Kimi-Linear's.
  const auto architectures = config.find("architectures");
  if (config.contains("text_config") && architectures != config.end() && architectures->is_array() &&
      !architectures->empty() && (*architectures)[0].is_string() &&
      (*architectures)[0].get<std::string>().find("KimiK3") != std::string::npos) {
    return from_json(std::string(kKimiK3Type), config, where);
  }
  const auto type = config.find("model_type");
  if (type == config.end() || !type->is_string()) fail("{}: key model_type is missing", where);
  return from_json(type->get<std::string>(), config, where);
}

uint32_t ModelConfig::context_or_default(uint32_t requested) const {
  if (requested == 0) return std::min<uint32_t>(max_positions, 4096);
  if (requested > max_positions) {
    fail("--ctx {} exceeds the model's max_position_embeddings {}", requested, max_positions);
  }
  return requested;
}

uint32_t ModelConfig::moe_layers() const {
  return static_cast<uint32_t>(std::count(layer_is_moe.begin(), layer_is_moe.end(), true));
}

uint32_t ModelConfig::kda_layers() const {
  return static_cast<uint32_t>(std::count(layer_is_kda.begin(), layer_is_kda.end(), true));
}

uint64_t ModelConfig::state_floats_per_token(bool half_latents) const {
  // MLA caches its entries as halves, two to a float, with int8 trunk
  // activations (compute/model/mla_mixer.cpp).
  const uint64_t width = mla.cached_width();
  const uint64_t per_layer = mixer == MixerKind::kGqa ? uint64_t{2} * gqa.kv_heads * gqa.head_dim
                             : half_latents          ? (width + 1) / 2
                                                     : width;
  return per_layer * (layers - kda_layers());
}

uint64_t ModelConfig::state_floats_fixed() const { return kda.state_floats() * kda_layers(); }

uint64_t ModelConfig::mixer_scratch_floats() const {
  if (mixer == MixerKind::kGqa) {
    const uint64_t q = uint64_t{gqa.heads} * gqa.head_dim, kv = uint64_t{gqa.kv_heads} * gqa.head_dim;
    return 2 * q + 2 * kv;
  }
  // The query (heads × qk), its absorbed latent form (heads × (latent + rope)),
  // the per-head latent read-out, the value heads, the latent row, and each
  // head's causal count.
  const uint64_t h = mla.heads;
  const uint64_t attention = std::max<uint64_t>(mla.q_lora_rank, 1) + h * mla.qk_dim() +
                             h * mla.cached_width() + h * mla.kv_lora_rank + h * mla.v_dim +
                             mla.cached_width() + h;
  // KDA: q, k, v, their convolved forms, the decay, the gate, the output.
  return std::max<uint64_t>(attention, kda_layers() > 0 ? uint64_t{9} * kda.width() + kda.heads : 0);
}

uint64_t ModelConfig::attention_worker_floats(uint32_t context, uint64_t rows) const {
  // KDA: one head's inputs, output and decays for every row, and the chunked
  // form's scratch (compute/model/kda.h: chunks of 64 tokens); each mixer
  // keeps its own, so they add up.
  const uint64_t chunk = 64, d = kda.head_dim;
  const uint64_t kda_head = kda_layers() > 0 ? rows * 7 * d + 3 * chunk * (d + chunk) : 0;
  // MLA: one head's read-outs and value outputs for a pass's tokens, a block
  // of 32 widened entries and its rows' counts (compute/model/mla_mixer.cpp).
  if (mixer != MixerKind::kGqa)
    return kda_head + rows * (uint64_t{mla.kv_lora_rank} + mla.v_dim) + 32 * uint64_t{mla.cached_width()} +
           rows * mla.heads;
  // A pass's scores (compute/model/attention.h's tokens_per_pass keeps them
  // within heads × context), one kv head's group of queries and outputs for
  // every row, and their causal counts.
  const uint64_t group = gqa.heads / std::max<uint32_t>(gqa.kv_heads, 1);
  return kda_head + uint64_t{gqa.heads} * context + rows * (2 * group * gqa.head_dim + group);
}

uint64_t ModelConfig::shared_attention_floats(uint32_t context) const {
  return mixer == MixerKind::kGqa ? 0 : uint64_t{mla.heads} * context;
}

float ModelConfig::attention_scale() const {
  const double dims = mixer == MixerKind::kGqa ? gqa.head_dim : mla.qk_dim();
  return static_cast<float>(rope.softmax_factor() / std::sqrt(dims));
}

std::vector<float> RopeConfig::inverse_frequencies() const {
  const uint32_t pairs = dims / 2;
  std::vector<float> inverse(pairs);
  for (uint32_t i = 0; i < pairs; ++i) {
    inverse[i] = 1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(dims));
  }
  if (!yarn) return inverse;
  double low = yarn_correction_dim(yarn->beta_fast, dims, theta, yarn->original_max_positions);
  double high = yarn_correction_dim(yarn->beta_slow, dims, theta, yarn->original_max_positions);
  if (yarn->truncate) low = std::floor(low), high = std::ceil(high);
  low = std::max(low, 0.0);
  high = std::min(high, double(dims) - 1.0);
  if (low == high) high += 0.001;
  for (uint32_t i = 0; i < pairs; ++i) {
    const auto ramp = static_cast<float>(std::clamp((i - low) / (high - low), 0.0, 1.0));
    inverse[i] = inverse[i] / yarn->factor * ramp + inverse[i] * (1.0f - ramp);
  }
  return inverse;
}

double RopeConfig::amplitude() const {
  if (!yarn) return 1.0;
  if (yarn->attention_factor) return *yarn->attention_factor;
  if (yarn->mscale != 0.0f && yarn->mscale_all_dim != 0.0f) {
    return yarn_mscale(yarn->factor, yarn->mscale) / yarn_mscale(yarn->factor, yarn->mscale_all_dim);
  }
  return yarn_mscale(yarn->factor, 1.0);
}

double RopeConfig::softmax_factor() const {
  if (!yarn || yarn->mscale_all_dim == 0.0f) return 1.0;
  const double m = yarn_mscale(yarn->factor, yarn->mscale_all_dim);
  return m * m;
}

}  // namespace sluice
