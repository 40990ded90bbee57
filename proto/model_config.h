// proto/model_config.h: the hyperparameters of one model, read from the
// checkpoint's config.json (kept verbatim in the container manifest) by its
// family spec (proto/families/) and checked. A model is a stack of layers,
// each a mixer (GQA or MLA) plus an FFN (dense SwiGLU or MoE). Nothing here
// touches weights.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace sluice {

enum class MixerKind { kGqa, kMla };

enum class QkNorm {
  kNone,         // Mixtral
  kWholeVector,  // OLMoE: one RMSNorm over all heads' concatenated q (and k)
  kPerHead,      // Qwen3: one RMSNorm of head_dim applied to every head
};

enum class RotaryPairing {
  kHalfSplit,  // element i with i + d/2 (OLMoE, Qwen3, Mixtral)
  kAdjacent,   // element 2i with 2i + 1 (the RoPE part of MLA)
};

// YaRN frequency blending (architectures.md §0.6), its keys read as
// transformers' _compute_yarn_parameters reads them: 0 stands for an absent
// (or null, or 0) mscale / mscale_all_dim, as its truthiness tests do.
struct Yarn {
  float factor = 1.0f;
  float original_max_positions = 0.0f;
  float beta_fast = 32.0f;
  float beta_slow = 1.0f;
  float mscale = 0.0f;
  float mscale_all_dim = 0.0f;
  std::optional<float> attention_factor;  // the cos/sin amplitude itself, when given
  bool truncate = true;                   // floor/ceil the correction range's ends
};

struct RopeConfig {
  float theta = 10000.0f;
  uint32_t dims = 0;  // rotated dimensions per head
  RotaryPairing pairing = RotaryPairing::kHalfSplit;
  std::optional<Yarn> yarn;
  // The inverse frequency of each rotated pair in f32 as transformers
  // computes it, with YaRN's blend applied.
  std::vector<float> inverse_frequencies() const;
  // What cos/sin are multiplied by: YaRN's attention_factor when given, else
  // mscale(f, mscale) / mscale(f, mscale_all_dim) when both are set, else
  // mscale(f, 1); 1 without YaRN.
  double amplitude() const;
  // What the attention softmax scale is multiplied by (YaRN's mscale² of
  // mscale_all_dim; 1 without YaRN).
  double softmax_factor() const;
};

struct GqaConfig {
  uint32_t heads = 0;
  uint32_t kv_heads = 0;
  uint32_t head_dim = 0;
  QkNorm qk_norm = QkNorm::kNone;
  float clip_qkv = 0.0f;  // 0: no clamping
};

// Multi-head latent attention, run in its absorbed form: the cache holds
// the normed latent and the rotated shared key per token (§3.4).
struct MlaConfig {
  uint32_t heads = 0;
  uint32_t q_lora_rank = 0;  // 0: queries from one q_proj
  uint32_t kv_lora_rank = 0;
  uint32_t nope_dim = 0;     // qk_nope_head_dim
  uint32_t rope_dim = 0;     // qk_rope_head_dim
  uint32_t v_dim = 0;        // v_head_dim
  float latent_norm_eps = 1e-6f;  // q_a_layernorm / kv_a_layernorm
  bool output_gate = false;       // Kimi K3: heads' output ⊙ σ(g_proj x) before o_proj
  uint32_t qk_dim() const { return nope_dim + rope_dim; }
  uint32_t cached_width() const { return kv_lora_rank + rope_dim; }
};

// Kimi Delta Attention (architectures.md §4.3): a gated delta-rule linear
// attention whose per-sequence state is fixed (a d × d matrix per head and
// the short convolutions' last inputs), independent of the context.
struct KdaConfig {
  uint32_t heads = 0;
  uint32_t head_dim = 0;     // key and value width per head
  uint32_t conv_kernel = 4;  // short causal convolution taps
  // Kimi K3 (k3.md §2.2): the output gate is one full-rank g_proj (else the
  // g_a/g_b bottleneck); the decay is lb·σ(e^A_log · z) when bounded (else
  // −e^A_log · softplus(z)).
  bool full_rank_gate = false;
  bool bounded_decay = false;
  float gate_lower_bound = 0.0f;
  uint32_t width() const { return heads * head_dim; }
  // f32 values of one layer's state: recurrent matrices and conv inputs.
  uint64_t state_floats() const {
    return uint64_t{heads} * head_dim * head_dim + uint64_t{3} * (conv_kernel - 1) * width();
  }
};

enum class RouterKind {
  kSoftmax,  // softmax over all experts, top-k of the probabilities
  kSigmoid,  // sigmoid scores, selection on score + bias within the best groups
};

// What the group-limited selection gives the experts of excluded groups
// (§3.5, §10.2): DeepSeek's inference code masks with −∞ (the default),
// transformers with 0.
enum class GroupMask { kNegativeInfinity, kZero };

struct RouterConfig {
  RouterKind kind = RouterKind::kSoftmax;
  uint32_t experts = 0;
  uint32_t top_k = 0;
  bool normalize = false;   // renormalise the chosen weights to sum to 1
  float scaling = 1.0f;     // routed_scaling_factor
  bool score_bias = false;  // e_score_correction_bias, for selection only
  uint32_t groups = 1;      // n_group
  uint32_t topk_groups = 1;
  GroupMask group_mask = GroupMask::kNegativeInfinity;
  // Weigh the chosen experts by their biased selection scores (the released
  // Kimi-Linear modeling code) instead of the unbiased sigmoid scores.
  bool weights_from_biased = false;
};

// The gate half of every gated FFN (dense, shared, routed experts).
enum class Activation {
  kSilu,  // silu(g) · u
  kSitu,  // β·tanh(g/β)·σ(g) · β_L·tanh(u/β_L) (k3.md §2.5; u unchanged without β_L)
};

struct ActivationConfig {
  Activation kind = Activation::kSilu;
  float beta = 4.0f;
  float linear_beta = 0.0f;  // 0: the up half is used unchanged
};

// The most patches one image gets (WASTE's max_patches, k3.md §4.4; the
// release allows 65536): the preprocessing's cap and what the plan sizes
// the vision tower's activations for.
inline constexpr uint32_t kMaxImagePatches = 1024;

// Kimi K3's vision tower and projector (k3.md §4.1, vision_config): a ViT over
// 14×14 patches whose 2×2-merged output the projector maps to text_hidden.
struct VisionConfig {
  uint32_t patch = 14;
  uint32_t hidden = 0;        // vt_hidden_size
  uint32_t heads = 0;         // vt_num_attention_heads
  uint32_t qkv_width = 0;     // qkv_hidden_size: heads × head_dim, may exceed hidden
  uint32_t intermediate = 0;  // vt_intermediate_size
  uint32_t blocks = 0;        // vt_num_hidden_layers
  uint32_t pos_height = 0, pos_width = 0;  // init_pos_emb_height/width: the learned grid
  uint32_t media_pad_id = 0;  // media_placeholder_token_id: the pad one image's rows replace
  uint32_t head_dim() const { return qkv_width / heads; }
  uint32_t patch_values() const { return 3 * patch * patch; }  // one patch, [channel][row][col]
  uint32_t merged() const { return 4 * hidden; }                // one 2×2 merge of patches
  // f32 values the tower holds at once for one image of `patches` patches
  // (compute/vision/vision_tower.cpp: pixels, patch rows, x, its norm and
  // projection, q/k/v, heads' output and the MLP's inner rows in a block,
  // then the merge, the projector's inner rows and its output).
  uint64_t activation_floats(uint64_t patches, uint32_t text_hidden) const {
    const uint64_t pixels = patches * patch_values(), block = patches * (3ull * hidden + 4ull * qkv_width + intermediate);
    const uint64_t projector = patches / 4 * (2ull * merged() + text_hidden);
    return 2 * pixels + block + projector;
  }
};

struct ModelConfig {
  std::string arch;  // model_type, as the family spec registers it
  uint32_t vocab = 0;
  uint32_t hidden = 0;
  uint32_t layers = 0;
  uint32_t dense_width = 0;   // intermediate_size of dense MLP layers
  uint32_t expert_width = 0;  // width of each routed expert
  uint32_t shared_width = 0;  // width of the shared expert FFN; 0: none
  // Kimi K3's latent MoE (k3.md §2.4): routed experts read and write this
  // width (routed_expert_hidden_size) through the latent down/up projections;
  // 0: the experts see the hidden state itself.
  uint32_t expert_latent = 0;
  bool expert_latent_norm = false;  // RMSNorm of the routed sum before the up projection
  // Kimi K3's Attention Residuals (k3.md §2.1): layers per stored block; 0: plain residual.
  uint32_t attn_res_block = 0;
  ActivationConfig activation;
  uint32_t experts = 0;       // router.experts and router.top_k, set by from_json
  uint32_t top_k = 0;
  float rms_eps = 1e-6f;
  bool tie_embeddings = false;
  uint32_t max_positions = 0;
  std::vector<int32_t> eos_ids;
  // Source tensors the model does not use (DeepSeek's multi-token
  // prediction layers): the converter skips them and says so once.
  uint32_t skipped_source_layers = 0;

  MixerKind mixer = MixerKind::kGqa;  // the softmax-attention layers' mixer
  GqaConfig gqa;  // when mixer is kGqa
  MlaConfig mla;  // when mixer is kMla
  RopeConfig rope;  // dims 0: no rotation (Kimi-Linear's NoPE MLA)
  KdaConfig kda;    // when any layer is KDA
  RouterConfig router;
  std::vector<bool> layer_is_moe;
  std::vector<bool> layer_is_kda;  // else the layer's mixer is `mixer`
  std::optional<VisionConfig> vision;  // Kimi K3 with a vision_config

  // Reads config.json with the family spec registered for `arch`. Throws
  // Error naming the key when a value is missing, of the wrong type, out of
  // range or not implemented, or when no family runs `arch`.
  static ModelConfig from_json(const std::string& arch, const nlohmann::json& config,
                               const std::string& where = "config.json");
  // From config.json alone, the architecture being its model_type.
  static ModelConfig from_json(const nlohmann::json& config, const std::string& where = "config.json");

  // The context length every command uses when --ctx is not given (0): the
  // model's max_position_embeddings, at most 4096. A larger request is an
  // Error naming --ctx.
  uint32_t context_or_default(uint32_t requested) const;

  // The width routed experts read and write: the latent, or the hidden size.
  uint32_t expert_hidden() const { return expert_latent > 0 ? expert_latent : hidden; }
  uint32_t moe_layers() const;
  uint32_t kda_layers() const;
  bool is_kda(uint32_t layer) const { return layer < layer_is_kda.size() && layer_is_kda[layer]; }
  // f32 values the mixers keep per token of context, over all layers; with
  // half_latents (int8 trunk activations) MLA keeps two halves to a float.
  uint64_t state_floats_per_token(bool half_latents = true) const;
  // f32 values of per-sequence state whatever the context (KDA).
  uint64_t state_floats_fixed() const;
  // Widest per-token activations of the mixer: queries and attention output.
  uint64_t mixer_scratch_floats() const;
  // Attention's scratch per thread of the pool (GQA splits its kv heads over
  // it, MLA its heads) for `rows` query tokens at once over `context`
  // positions, and the scratch the threads share (MLA's scores).
  uint64_t attention_worker_floats(uint32_t context, uint64_t rows) const;
  uint64_t shared_attention_floats(uint32_t context) const;
  // The attention softmax scale.
  float attention_scale() const;
};

// The model types a family spec runs, for messages.
std::string supported_architectures();

}  // namespace sluice
