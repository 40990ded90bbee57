// tests/proto/model_config_test.cpp: reading config.json through each family
// spec: layer patterns, mixers, router kinds, the class defaults a missing or
// null key takes (key by key, as the Hugging Face config classes read them),
// YaRN's frequencies and scale, and refusals naming the key.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numbers>

#include "proto/error.h"
#include "proto/model_config.h"

using namespace sluice;
using nlohmann::json;

namespace {

json qwen3_tiny() {
  return json::parse(R"({"model_type": "qwen3_moe", "vocab_size": 512, "hidden_size": 128,
    "intermediate_size": 256, "moe_intermediate_size": 48, "num_hidden_layers": 3,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "max_position_embeddings": 512,
    "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "rope_scaling": null, "decoder_sparse_step": 1,
    "mlp_only_layers": [], "num_experts": 8, "num_experts_per_tok": 2, "norm_topk_prob": true,
    "tie_word_embeddings": false, "eos_token_id": 2})");
}

json olmoe_tiny() {
  return json::parse(R"({"model_type": "olmoe", "vocab_size": 512, "hidden_size": 128, "intermediate_size": 64,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4, "hidden_act": "silu",
    "max_position_embeddings": 256, "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "rope_scaling": null,
    "attention_bias": false, "clip_qkv": null, "num_experts": 8, "num_experts_per_tok": 4,
    "norm_topk_prob": false, "tie_word_embeddings": false, "eos_token_id": 2, "pad_token_id": 1})");
}

json mixtral_tiny() {
  return json::parse(R"({"model_type": "mixtral", "vocab_size": 512, "hidden_size": 128, "intermediate_size": 96,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_act": "silu",
    "max_position_embeddings": 512, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "sliding_window": null,
    "num_local_experts": 4, "num_experts_per_tok": 2, "tie_word_embeddings": false, "eos_token_id": 2})");
}

// architectures.md §7.3.
json deepseek_tiny() {
  return json::parse(R"({"model_type": "deepseek_v3", "vocab_size": 512, "hidden_size": 256,
    "intermediate_size": 512, "moe_intermediate_size": 64, "num_hidden_layers": 4, "first_k_dense_replace": 1,
    "moe_layer_freq": 1, "num_attention_heads": 4, "num_key_value_heads": 4, "q_lora_rank": 96,
    "kv_lora_rank": 64, "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32,
    "n_routed_experts": 16, "n_shared_experts": 1, "num_experts_per_tok": 4, "n_group": 4, "topk_group": 2,
    "topk_method": "noaux_tc", "scoring_func": "sigmoid", "norm_topk_prob": true, "routed_scaling_factor": 2.5,
    "hidden_act": "silu", "rms_norm_eps": 1e-06, "rope_theta": 10000.0,
    "rope_scaling": {"type": "yarn", "factor": 40.0, "original_max_position_embeddings": 64, "beta_fast": 32,
      "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0},
    "max_position_embeddings": 2560, "num_nextn_predict_layers": 0, "attention_bias": false,
    "tie_word_embeddings": false, "bos_token_id": 0, "eos_token_id": 1})");
}

std::string error_of(const json& config) {
  try {
    ModelConfig::from_json(config);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("qwen3: explicit head_dim, per-head q/k norm, expert width from moe_intermediate_size") {
  const ModelConfig c = ModelConfig::from_json(qwen3_tiny());
  CHECK(c.mixer == MixerKind::kGqa);
  CHECK(c.gqa.head_dim == 64);
  CHECK(c.gqa.qk_norm == QkNorm::kPerHead);
  CHECK(c.expert_width == 48);
  CHECK(c.dense_width == 256);
  CHECK(c.router.kind == RouterKind::kSoftmax);
  CHECK(c.router.normalize);
  CHECK(c.layer_is_moe == std::vector<bool>{true, true, true});
  CHECK(c.eos_ids == std::vector<int32_t>{2});
  CHECK(c.state_floats_per_token() == 3 * 2 * 2 * 64);
}

TEST_CASE("qwen3: mlp_only_layers and decoder_sparse_step make dense layers") {
  json config = qwen3_tiny();
  config["mlp_only_layers"] = {1};
  CHECK(ModelConfig::from_json(config).layer_is_moe == std::vector<bool>{true, false, true});
  config["mlp_only_layers"] = json::array();
  config["decoder_sparse_step"] = 2;
  CHECK(ModelConfig::from_json(config).layer_is_moe == std::vector<bool>{false, true, false});
  config["mlp_only_layers"] = {7};
  CHECK(doctest::String(error_of(config).c_str()) == doctest::Contains("mlp_only_layers"));
}

TEST_CASE("class defaults for absent or null keys, key by key") {
  // Qwen3MoeConfig: norm_topk_prob false, rms_norm_eps 1e-6, rope_theta 1e4,
  // max_position_embeddings 32768, head_dim hidden/heads, no dense layers.
  json q = qwen3_tiny();
  for (const char* key : {"norm_topk_prob", "rms_norm_eps", "rope_theta", "max_position_embeddings", "head_dim",
                          "decoder_sparse_step", "mlp_only_layers"}) {
    q.erase(key);
  }
  ModelConfig c = ModelConfig::from_json(q);
  CHECK_FALSE(c.router.normalize);
  CHECK(c.rms_eps == 1e-6f);
  CHECK(c.rope.theta == 10000.0f);
  CHECK(c.max_positions == 32768);
  CHECK(c.gqa.head_dim == 32);
  CHECK(c.layer_is_moe == std::vector<bool>{true, true, true});
  // num_key_value_heads null means the head count (transformers), for every GQA family.
  q = qwen3_tiny();
  q["num_key_value_heads"] = nullptr;
  CHECK(ModelConfig::from_json(q).gqa.kv_heads == 4);

  // OlmoeConfig: rms_norm_eps 1e-5, norm_topk_prob false, 4096 positions.
  json o = olmoe_tiny();
  for (const char* key : {"rms_norm_eps", "norm_topk_prob", "max_position_embeddings", "rope_theta", "clip_qkv"}) {
    o.erase(key);
  }
  c = ModelConfig::from_json(o);
  CHECK(c.rms_eps == 1e-5f);
  CHECK_FALSE(c.router.normalize);
  CHECK(c.max_positions == 4096);
  CHECK(c.rope.theta == 10000.0f);
  CHECK(c.gqa.clip_qkv == 0.0f);

  // MixtralConfig: rms_norm_eps 1e-5, rope_theta 1e6, top-2, 131072 positions.
  json m = mixtral_tiny();
  for (const char* key : {"rms_norm_eps", "rope_theta", "num_experts_per_tok", "max_position_embeddings"}) {
    m.erase(key);
  }
  c = ModelConfig::from_json(m);
  CHECK(c.rms_eps == 1e-5f);
  CHECK(c.rope.theta == 1e6f);
  CHECK(c.top_k == 2);
  CHECK(c.max_positions == 131072);

  // DeepseekV3Config: 3 dense layers first, 8 groups keep 4, scaling 2.5,
  // renormalised, one shared expert, q_lora_rank 1536.
  json d = deepseek_tiny();
  d["n_routed_experts"] = 32;
  d["num_hidden_layers"] = 5;
  for (const char* key : {"first_k_dense_replace", "n_group", "topk_group", "routed_scaling_factor", "norm_topk_prob",
                          "n_shared_experts", "rope_scaling", "q_lora_rank"}) {
    d.erase(key);
  }
  c = ModelConfig::from_json(d);
  CHECK(c.layer_is_moe == std::vector<bool>{false, false, false, true, true});
  CHECK(c.router.groups == 8);
  CHECK(c.router.topk_groups == 4);
  CHECK(c.router.scaling == 2.5f);
  CHECK(c.router.normalize);
  CHECK(c.shared_width == 64);
  CHECK(c.mla.q_lora_rank == 1536);
  CHECK_FALSE(c.rope.yarn.has_value());
  // q_lora_rank null: queries from one projection.
  d["q_lora_rank"] = nullptr;
  CHECK(ModelConfig::from_json(d).mla.q_lora_rank == 0);
}

TEST_CASE("olmoe: head_dim from hidden/heads, whole-vector q/k norm, expert width is intermediate_size") {
  const ModelConfig c = ModelConfig::from_json(olmoe_tiny());
  CHECK(c.gqa.head_dim == 32);
  CHECK(c.gqa.qk_norm == QkNorm::kWholeVector);
  CHECK(c.expert_width == 64);
  CHECK(c.top_k == 4);
  CHECK_FALSE(c.router.normalize);
}

TEST_CASE("mixtral: no q/k norm, softmax top-2 renormalised, every layer MoE") {
  const ModelConfig c = ModelConfig::from_json(mixtral_tiny());
  CHECK(c.gqa.qk_norm == QkNorm::kNone);
  CHECK(c.experts == 4);
  CHECK(c.expert_width == 96);
  CHECK(c.router.normalize);
  CHECK(c.layer_is_moe == std::vector<bool>{true, true});
  json config = mixtral_tiny();
  config["sliding_window"] = 128;
  CHECK(doctest::String(error_of(config).c_str()) == doctest::Contains("sliding_window"));
  config["sliding_window"] = 512;  // never shorter than the context: plain attention
  CHECK(error_of(config).empty());
}

TEST_CASE("deepseek_v3: MLA, sigmoid grouped routing, shared expert, dense first layer") {
  const ModelConfig c = ModelConfig::from_json(deepseek_tiny());
  CHECK(c.mixer == MixerKind::kMla);
  CHECK(c.mla.heads == 4);
  CHECK(c.mla.q_lora_rank == 96);
  CHECK(c.mla.cached_width() == 80);
  CHECK(c.mla.qk_dim() == 48);
  CHECK(c.rope.dims == 16);
  CHECK(c.rope.pairing == RotaryPairing::kAdjacent);
  CHECK(c.router.kind == RouterKind::kSigmoid);
  CHECK(c.router.score_bias);
  CHECK(c.router.groups == 4);
  CHECK(c.router.topk_groups == 2);
  CHECK(c.router.group_mask == GroupMask::kZero);
  CHECK(c.shared_width == 64);
  CHECK(c.layer_is_moe == std::vector<bool>{false, true, true, true});
  // Four MLA layers of 80-wide entries: f32, or two halves to a float (int8 activations).
  CHECK(c.state_floats_per_token(false) == 4 * 80);
  CHECK(c.state_floats_per_token() == 4 * 40);
  json k2 = deepseek_tiny();
  k2["model_type"] = "kimi_k2";
  k2["sluice_group_mask"] = "-inf";
  CHECK(ModelConfig::from_json(k2).router.group_mask == GroupMask::kNegativeInfinity);
}

TEST_CASE("kimi_linear: 1-based KDA and MLA layer lists, NoPE latent attention, the routing-weight switch") {
  json k = json::parse(R"({"model_type": "kimi_linear", "vocab_size": 512, "hidden_size": 128,
    "intermediate_size": 256, "moe_intermediate_size": 64, "num_hidden_layers": 4, "first_k_dense_replace": 1,
    "num_attention_heads": 4, "q_lora_rank": null, "kv_lora_rank": 32, "qk_nope_head_dim": 16,
    "qk_rope_head_dim": 8, "v_head_dim": 16, "mla_use_nope": true, "num_experts": 8, "num_experts_per_token": 2,
    "num_shared_experts": 1, "moe_renormalize": true, "moe_router_activation_func": "sigmoid",
    "routed_scaling_factor": 2.446, "rms_norm_eps": 1e-05, "model_max_length": 4096,
    "linear_attn_config": {"kda_layers": [1, 2, 4], "full_attn_layers": [3], "num_heads": 4, "head_dim": 32,
      "short_conv_kernel_size": 4}})");
  const ModelConfig c = ModelConfig::from_json(k);
  CHECK(c.layer_is_kda == std::vector<bool>{true, true, false, true});
  CHECK(c.layer_is_moe == std::vector<bool>{false, true, true, true});
  CHECK(c.mixer == MixerKind::kMla);
  CHECK(c.rope.dims == 0);
  CHECK(c.attention_scale() == doctest::Approx(1.0 / std::sqrt(24.0)));
  CHECK(c.router.weights_from_biased);
  CHECK(c.max_positions == 4096);
  // Per token only the MLA layer caches; KDA's state is fixed: heads × d² + 3 × 3 × width per layer.
  CHECK(c.state_floats_per_token(false) == 40);
  CHECK(c.state_floats_per_token() == 20);
  CHECK(c.state_floats_fixed() == 3 * (4 * 32 * 32 + 3 * 3 * 128));
  k["sluice_moe_weights"] = "unbiased";
  CHECK_FALSE(ModelConfig::from_json(k).router.weights_from_biased);
  for (auto [key, value] : std::vector<std::pair<const char*, json>>{{"attn_res_block_size", 4},
                                                                   {"routed_expert_hidden_size", 64},
                                                                   {"q_lora_rank", 16},
                                                                   {"mla_use_nope", false},
                                                                   {"sluice_moe_weights", "both"}}) {
    json bad = k;
    bad[key] = value;
    CAPTURE(key);
    CHECK(doctest::String(error_of(bad).c_str()) == doctest::Contains(key));
  }
  // Absent, mla_use_nope takes the class default false (attention with RoPE): refused too.
  json absent = k;
  absent.erase("mla_use_nope");
  CHECK(doctest::String(error_of(absent).c_str()) == doctest::Contains("mla_use_nope is absent"));
  json gap = k;
  gap["linear_attn_config"]["full_attn_layers"] = json::array();
  CHECK(doctest::String(error_of(gap).c_str()) == doctest::Contains("layer 3 (1-based)"));
  json later = k;
  later["linear_attn_config"]["gate_lower_bound"] = -5.0;
  CHECK(doctest::String(error_of(later).c_str()) == doctest::Contains("gate_lower_bound"));
}

TEST_CASE("YaRN: which pairs keep, blend and divide their frequency, and the softmax scale") {
  // §7.3: d = 16, L0 = 64, factor 40, β 32/1: correction range [0, 3].
  const ModelConfig c = ModelConfig::from_json(deepseek_tiny());
  const std::vector<float> inverse = c.rope.inverse_frequencies();
  REQUIRE(inverse.size() == 8);
  for (uint32_t i = 0; i < 8; ++i) {
    const double plain = std::pow(10000.0, -2.0 * i / 16);
    if (i == 0) {
      CHECK(inverse[i] == doctest::Approx(plain).epsilon(1e-6));
    } else if (i <= 2) {
      CHECK(inverse[i] < plain * 0.999);
      CHECK(inverse[i] > plain / 40 * 1.001);
    } else {
      CHECK(inverse[i] == doctest::Approx(plain / 40).epsilon(1e-6));
    }
  }
  const double mscale = 0.1 * std::log(40.0) + 1.0;
  CHECK(c.attention_scale() == doctest::Approx(mscale * mscale / std::sqrt(48.0)).epsilon(1e-6));
  CHECK(c.rope.amplitude() == doctest::Approx(1.0));
  // §7.4 (K2): β 1/1, base 5e4, factor 32: range [1, 2], a hard step after pair 1.
  json k2 = deepseek_tiny();
  k2["model_type"] = "kimi_k2";
  k2["rope_theta"] = 50000.0;
  k2["rope_scaling"] = {{"type", "yarn"}, {"factor", 32.0}, {"original_max_position_embeddings", 64},
                        {"beta_fast", 1.0}, {"beta_slow", 1.0}, {"mscale", 1.0}, {"mscale_all_dim", 1.0}};
  const std::vector<float> step = ModelConfig::from_json(k2).rope.inverse_frequencies();
  for (uint32_t i = 0; i < 8; ++i) {
    const double plain = std::pow(50000.0, -2.0 * i / 16);
    CHECK(step[i] == doctest::Approx(i <= 1 ? plain : plain / 32).epsilon(1e-6));
  }
  // The real DeepSeek-V3 (§0.6): softmax scale 0.135234.
  json real = deepseek_tiny();
  real["qk_nope_head_dim"] = 128;
  real["qk_rope_head_dim"] = 64;
  real["rope_scaling"]["factor"] = 40.0;
  real["rope_scaling"]["original_max_position_embeddings"] = 4096;
  CHECK(ModelConfig::from_json(real).attention_scale() == doctest::Approx(0.135234).epsilon(1e-5));
}

TEST_CASE("DeepSeek's rope_scaling keys as transformers reads them") {
  const double mscale_40 = 0.1 * std::log(40.0) + 1.0;  // get_mscale(40): 1.3689
  const auto with = [](const std::function<void(json&)>& edit) {
    json config = deepseek_tiny();
    edit(config);
    return ModelConfig::from_json(config);
  };
  // mscale_all_dim without mscale: the amplitude is get_mscale(factor), not the ratio's 1.
  ModelConfig c = with([](json& j) { j["rope_scaling"].erase("mscale"); });
  CHECK(c.rope.amplitude() == doctest::Approx(mscale_40).epsilon(1e-6));
  CHECK(c.attention_scale() == doctest::Approx(mscale_40 * mscale_40 / std::sqrt(48.0)).epsilon(1e-6));
  // mscale without mscale_all_dim: get_mscale(factor) again (not get_mscale(40, 0.707) = 1.26), no softmax factor.
  c = with([](json& j) {
    j["rope_scaling"]["mscale"] = 0.707;
    j["rope_scaling"].erase("mscale_all_dim");
  });
  CHECK(c.rope.amplitude() == doctest::Approx(mscale_40).epsilon(1e-6));
  CHECK(c.attention_scale() == doctest::Approx(1.0 / std::sqrt(48.0)).epsilon(1e-6));
  // Both set: the ratio.
  c = with([](json& j) { j["rope_scaling"]["mscale"] = 0.707; });
  CHECK(c.rope.amplitude() == doctest::Approx((0.0707 * std::log(40.0) + 1.0) / mscale_40).epsilon(1e-6));
  // attention_factor is the amplitude itself; the softmax factor still comes from mscale_all_dim.
  c = with([](json& j) { j["rope_scaling"]["attention_factor"] = 0.8; });
  CHECK(c.rope.amplitude() == doctest::Approx(0.8).epsilon(1e-6));
  CHECK(c.attention_scale() == doctest::Approx(mscale_40 * mscale_40 / std::sqrt(48.0)).epsilon(1e-6));
  // truncate false: the correction range [max(-0.99, 0), 2.016] is not floored/ceiled to [0, 3].
  c = with([](json& j) { j["rope_scaling"]["truncate"] = false; });
  const double high = 16 * std::log(64 / (2 * std::numbers::pi)) / (2 * std::log(10000.0));
  const std::vector<float> blended = c.rope.inverse_frequencies();
  for (uint32_t i = 0; i < 8; ++i) {
    const double plain = std::pow(10000.0, -2.0 * i / 16), ramp = std::clamp(i / high, 0.0, 1.0);
    CHECK(blended[i] == doctest::Approx(plain / 40 * ramp + plain * (1 - ramp)).epsilon(1e-5));
  }
  // truncate null reads as false (transformers' `if truncate:`).
  c = with([](json& j) { j["rope_scaling"]["truncate"] = nullptr; });
  CHECK(c.rope.inverse_frequencies()[1] == doctest::Approx(blended[1]).epsilon(1e-6));
  // Absent original_max_position_embeddings: max_position_embeddings; betas 0 or absent: 32 and 1.
  c = with([](json& j) {
    j["rope_scaling"].erase("original_max_position_embeddings");
    j["rope_scaling"]["beta_fast"] = 0;
    j["rope_scaling"].erase("beta_slow");
  });
  CHECK(c.rope.yarn->original_max_positions == 2560.0f);
  CHECK(c.rope.yarn->beta_fast == 32.0f);
  CHECK(c.rope.yarn->beta_slow == 1.0f);
  // rope_type before the legacy type.
  c = with([](json& j) {
    j["rope_scaling"]["type"] = "linear";
    j["rope_scaling"]["rope_type"] = "yarn";
  });
  CHECK(c.rope.yarn.has_value());
  // rope_interleave: adjacent pairs by default and when true, halves when false.
  CHECK(with([](json&) {}).rope.pairing == RotaryPairing::kAdjacent);
  CHECK(with([](json& j) { j["rope_interleave"] = true; }).rope.pairing == RotaryPairing::kAdjacent);
  CHECK(with([](json& j) { j["rope_interleave"] = false; }).rope.pairing == RotaryPairing::kHalfSplit);
  // Values sluice cannot honour are refused by name.
  for (auto [key, edit] : std::vector<std::pair<const char*, std::function<void(json&)>>>{
           {"factor", [](json& j) { j["rope_scaling"].erase("factor"); }},
           {"factor", [](json& j) { j["rope_scaling"]["factor"] = 0.5; }},
           {"attention_factor", [](json& j) { j["rope_scaling"]["attention_factor"] = 0; }},
           {"mscale", [](json& j) { j["rope_scaling"]["mscale"] = -1; }},
           {"truncate", [](json& j) { j["rope_scaling"]["truncate"] = "no"; }},
           {"partial_rotary_factor", [](json& j) { j["rope_scaling"]["partial_rotary_factor"] = 0.5; }},
           {"rope_scaling.type", [](json& j) { j["rope_scaling"]["type"] = "dynamic"; }},
           {"rope_interleave", [](json& j) { j["rope_interleave"] = nullptr; }},
           {"rope_interleave", [](json& j) { j["rope_interleave"] = 1; }}}) {
    json config = deepseek_tiny();
    edit(config);
    CAPTURE(config.dump());
    CHECK(doctest::String(error_of(config).c_str()) == doctest::Contains(key));
  }
}

TEST_CASE("bad configs are refused naming the key") {
  CHECK(doctest::String(error_of(json{{"model_type", "gpt2"}}).c_str()) == doctest::Contains("gpt2"));
  json config = qwen3_tiny();
  config["num_experts_per_tok"] = 9;
  CHECK(doctest::String(error_of(config).c_str()) == doctest::Contains("num_experts_per_tok"));
  config = qwen3_tiny();
  config["num_key_value_heads"] = 3;
  CHECK(doctest::String(error_of(config).c_str()) == doctest::Contains("num_key_value_heads"));
  config = qwen3_tiny();
  config["hidden_size"] = "128";
  CHECK(doctest::String(error_of(config).c_str()) == doctest::Contains("hidden_size"));
  config = qwen3_tiny();
  config.erase("hidden_size");
  CHECK(doctest::String(error_of(config).c_str()) == doctest::Contains("hidden_size is missing"));
  // Keys that change the math and are not implemented.
  for (auto [key, value] : std::vector<std::pair<const char*, json>>{
           {"rope_scaling", {{"type", "yarn"}}},
           {"use_sliding_window", true},
           {"attention_bias", true},
           {"hidden_act", "gelu"},
           {"partial_rotary_factor", 0.5},
           {"rope_parameters", {{"rope_type", "llama3"}}},
           {"rms_norm_eps", -1e-6},
           {"rope_theta", 0},
           {"max_position_embeddings", -4},
           {"eos_token_id", "2"}}) {
    config = qwen3_tiny();
    config[key] = value;
    CAPTURE(key);
    CHECK(doctest::String(error_of(config).c_str()) == doctest::Contains(key));
  }
  // rope_parameters holding plain RoPE is what transformers 5 writes.
  config = qwen3_tiny();
  config["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 5e5}};
  CHECK(ModelConfig::from_json(config).rope.theta == 5e5f);
}

TEST_CASE("bad DeepSeek configs are refused naming the key") {
  for (auto [key, value] : std::vector<std::pair<const char*, json>>{
           {"scoring_func", "softmax"},
           {"topk_method", "greedy"},
           {"n_group", 3},
           {"topk_group", 5},
           {"sluice_group_mask", "nan"}}) {
    json config = deepseek_tiny();
    config[key] = value;
    CAPTURE(key);
    CHECK(doctest::String(error_of(config).c_str()) == doctest::Contains(key));
  }
  json config = deepseek_tiny();
  config["n_routed_experts"] = 4;
  CHECK(doctest::String(error_of(config).c_str()) == doctest::Contains("n_group"));
  config = deepseek_tiny();
  config["rope_scaling"]["type"] = "dynamic";
  CHECK(doctest::String(error_of(config).c_str()) == doctest::Contains("rope_scaling"));
}
