// tests/proto/kimi_k3_config_test.cpp: Kimi K3's config and tensor inventory
// (k3.md §1, §2.6, §6): detection by the outer architectures, the nested
// text_config, each feature on its own key with booleans read by value, the
// language_model. prefix, the experts' latent width, and refusals by key.
#include <doctest/doctest.h>

#include <algorithm>

#include "proto/error.h"
#include "proto/model_config.h"
#include "proto/record_format.h"
#include "proto/tensor_inventory.h"

using namespace sluice;
using nlohmann::json;

namespace {

json k3_tiny() {
  return json::parse(
      R"({"architectures": ["KimiK3ForConditionalGeneration"], "media_placeholder_token_id": 509,
 "text_config": {"architectures": ["KimiLinearForCausalLM"], "model_type": "kimi_linear",
  "vocab_size": 512, "hidden_size": 128, "num_hidden_layers": 4, "intermediate_size": 256,
  "first_k_dense_replace": 1, "moe_layer_freq": 1, "num_experts": 8,
  "num_experts_per_token": 3, "num_shared_experts": 2, "moe_intermediate_size": 96,
  "routed_expert_hidden_size": 64, "latent_moe_use_norm": true,
  "moe_router_activation_func": "sigmoid", "moe_renormalize": true, "use_grouped_topk": true,
  "num_expert_group": 1, "topk_group": 1, "routed_scaling_factor": 1.0,
  "num_attention_heads": 4, "num_key_value_heads": 4, "q_lora_rank": 48, "kv_lora_rank": 32,
  "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16,
  "mla_use_nope": true, "mla_use_output_gate": true, "hidden_act": "situ",
  "activation_situ_beta": 4.0, "activation_situ_linear_beta": 25.0, "attn_res_block_size": 3,
  "linear_attn_config": {"kda_layers": [1, 3], "full_attn_layers": [2, 4], "num_heads": 4,
   "head_dim": 32, "short_conv_kernel_size": 4, "use_full_rank_gate": true,
   "gate_lower_bound": -5.0},
  "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "rope_scaling": null,
  "tie_word_embeddings": false, "num_nextn_predict_layers": 0, "model_max_length": 4096,
  "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16"},
 "vision_config": {"patch_size": 14, "vt_hidden_size": 64, "vt_num_attention_heads": 2,
  "qkv_hidden_size": 96, "vt_intermediate_size": 128, "vt_num_hidden_layers": 2,
  "init_pos_emb_height": 8, "init_pos_emb_width": 8, "text_hidden_size": 128}})");
}

std::string error_of(const json& config) {
  try {
    ModelConfig::from_json(config);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

const TensorSpec* find(const std::vector<TensorSpec>& trunk, const std::string& name) {
  const auto it =
      std::find_if(trunk.begin(), trunk.end(), [&](const TensorSpec& t) { return t.name == name; });
  return it == trunk.end() ? nullptr : &*it;
}

}  // namespace

TEST_CASE("K3-tiny: detected by its outer class, every feature read from text_config") {
  const ModelConfig c = ModelConfig::from_json(k3_tiny());
  CHECK(c.arch == "kimi_k3");
  CHECK(c.hidden == 128);
  CHECK(c.layer_is_kda == std::vector<bool>{true, false, true, false});
  CHECK(c.layer_is_moe == std::vector<bool>{false, true, true, true});
  CHECK(c.expert_latent == 64);
  CHECK(c.expert_hidden() == 64);
  CHECK(c.expert_latent_norm);
  CHECK(c.attn_res_block == 3);
  CHECK(c.activation.kind == Activation::kSitu);
  CHECK(c.activation.beta == 4.0f);
  CHECK(c.activation.linear_beta == 25.0f);
  CHECK(c.kda.full_rank_gate);
  CHECK(c.kda.bounded_decay);
  CHECK(c.kda.gate_lower_bound == -5.0f);
  CHECK(c.mla.output_gate);
  CHECK(c.mla.q_lora_rank == 48);
  CHECK(c.mla.latent_norm_eps == c.rms_eps);
  CHECK(c.top_k == 3);
  CHECK(c.shared_width == 192);
  CHECK_FALSE(c.router.weights_from_biased);  // K3 weighs by the unbiased scores
  // The same text_config without the outer class is Kimi-Linear, which refuses K3's keys.
  json inner = k3_tiny()["text_config"];
  inner["hidden_act"] = "silu";
  CHECK(doctest::String(error_of(inner).c_str()) == doctest::Contains("routed_expert_hidden_size"));
}

TEST_CASE("K3 booleans are read by value, each feature on its own key") {
  json config = k3_tiny();
  json& t = config["text_config"];
  t["latent_moe_use_norm"] = false;
  t["mla_use_output_gate"] = false;
  t["linear_attn_config"]["use_full_rank_gate"] = false;
  t.erase("attn_res_block_size");
  t.erase("activation_situ_linear_beta");
  const ModelConfig c = ModelConfig::from_json(config);
  CHECK_FALSE(c.expert_latent_norm);
  CHECK_FALSE(c.mla.output_gate);
  CHECK_FALSE(c.kda.full_rank_gate);
  CHECK(c.kda.bounded_decay);  // still on: gate_lower_bound is its own key
  CHECK(c.attn_res_block == 0);
  CHECK(c.activation.linear_beta == 0.0f);
  const std::vector<TensorSpec> trunk = trunk_inventory(c);
  CHECK(find(trunk, "language_model.model.layers.1.block_sparse_moe.routed_expert_norm.weight") ==
        nullptr);
  CHECK(find(trunk, "language_model.model.layers.1.self_attn.g_proj.weight") == nullptr);
  CHECK(find(trunk, "language_model.model.layers.0.self_attn.g_a_proj.weight") != nullptr);
  CHECK(find(trunk, "language_model.model.output_attn_res_norm.weight") == nullptr);
}

TEST_CASE("K3-tiny's inventory: 100 LM tensors under language_model., experts in the latent") {
  const ModelConfig c = ModelConfig::from_json(k3_tiny());
  const std::vector<TensorSpec> trunk = trunk_inventory(c);
  CHECK(trunk.size() == 100);  // k3.md §6
  for (const TensorSpec& t : trunk) CHECK(t.name.rfind("language_model.", 0) == 0);
  const TensorSpec* query = find(trunk, "language_model.model.output_attn_res_proj.weight");
  REQUIRE(query != nullptr);
  CHECK(query->shape == std::vector<uint64_t>{1, 128});
  CHECK(query->format == TrunkFormat::kF32);
  const TensorSpec* a_log = find(trunk, "language_model.model.layers.2.self_attn.A_log");
  REQUIRE(a_log != nullptr);
  CHECK(a_log->shape == std::vector<uint64_t>{1, 1, 32, 1});  // padded to head_dim
  const TensorSpec* gate = find(trunk, "language_model.model.layers.0.self_attn.g_proj.weight");
  REQUIRE(gate != nullptr);
  CHECK(gate->shape == std::vector<uint64_t>{128, 128});
  const TensorSpec* mla_gate = find(trunk, "language_model.model.layers.3.self_attn.g_proj.weight");
  REQUIRE(mla_gate != nullptr);
  CHECK(mla_gate->shape == std::vector<uint64_t>{64, 128});
  const TensorSpec* down =
      find(trunk, "language_model.model.layers.2.block_sparse_moe.routed_expert_down_proj.weight");
  REQUIRE(down != nullptr);
  CHECK(down->shape == std::vector<uint64_t>{64, 128});
  CHECK(find(trunk, "language_model.model.layers.1.mlp_res_proj.weight") != nullptr);
  CHECK(expert_tensor_name(c, 1, 3, MatrixKind::kDown) ==
        "language_model.model.layers.1.block_sparse_moe.experts.3.w2.weight");
  const std::vector<MoeLayerSpec> moe = moe_inventory(c);
  REQUIRE(moe.size() == 3);
  CHECK(moe[0].hidden == 64);
  CHECK(moe[0].expert_width == 96);
  CHECK_FALSE(is_unrun_part_tensor(c, "vision_tower.patch_embed.proj.weight"));  // it has a vision_config
  json text_only = k3_tiny();
  text_only.erase("vision_config");
  const ModelConfig t = ModelConfig::from_json(text_only);
  CHECK_FALSE(t.vision);
  CHECK(vision_inventory(t).empty());
  CHECK(is_unrun_part_tensor(t, "vision_tower.patch_embed.proj.weight"));
  CHECK(is_unrun_part_tensor(t, "mm_projector.proj.0.weight"));
  CHECK_FALSE(is_unrun_part_tensor(t, "language_model.lm_head.weight"));
}

TEST_CASE("K3-tiny's vision tower: 18 tensors, int8 matrices, the kernel and the grid stored as rows") {
  const ModelConfig c = ModelConfig::from_json(k3_tiny());
  REQUIRE(c.vision);
  CHECK(c.vision->head_dim() == 48);
  CHECK(c.vision->media_pad_id == 509);
  CHECK(c.vision->patch_values() == 588);
  const std::vector<TensorSpec> vision = vision_inventory(c);
  CHECK(vision.size() == 18);  // k3.md §6
  for (const TensorSpec& t : vision) {
    CAPTURE(t.name);
    CHECK(is_vision_tensor(c, t.name));
    CHECK(t.format == (t.shape.size() == 2 ? TrunkFormat::kQ8G128 : TrunkFormat::kF32));
  }
  const TensorSpec* kernel = find(vision, "vision_tower.patch_embed.proj.weight");
  REQUIRE(kernel != nullptr);
  CHECK(kernel->shape == std::vector<uint64_t>{64, 588});
  CHECK(kernel->checkpoint_shape() == std::vector<uint64_t>{64, 3, 14, 14});
  const TensorSpec* grid = find(vision, "vision_tower.patch_embed.pos_emb.weight");
  REQUIRE(grid != nullptr);
  CHECK(grid->shape == std::vector<uint64_t>{64, 64});
  CHECK(grid->checkpoint_shape() == std::vector<uint64_t>{8, 8, 64});
  const TensorSpec* qkv = find(vision, "vision_tower.encoder.blocks.1.wqkv.weight");
  REQUIRE(qkv != nullptr);
  CHECK(qkv->shape == std::vector<uint64_t>{288, 64});
  const TensorSpec* projector = find(vision, "mm_projector.proj.2.weight");
  REQUIRE(projector != nullptr);
  CHECK(projector->shape == std::vector<uint64_t>{128, 256});
  CHECK(find(vision, "mm_projector.post_norm.weight")->format == TrunkFormat::kF32);
  // The text model's inventory leaves the tower out: it is resident only for images.
  for (const TensorSpec& t : trunk_inventory(c)) CHECK_FALSE(is_vision_tensor(c, t.name));
}

TEST_CASE("vision_config values the tower cannot run are refused naming the key") {
  json odd = k3_tiny();
  odd["vision_config"]["qkv_hidden_size"] = 90;  // 2 heads of 45: not quarters
  CHECK(doctest::String(error_of(odd).c_str()) == doctest::Contains("qkv_hidden_size"));
  json wide = k3_tiny();
  wide["vision_config"]["text_hidden_size"] = 256;
  CHECK(doctest::String(error_of(wide).c_str()) == doctest::Contains("text_hidden_size"));
  json missing = k3_tiny();
  missing["vision_config"].erase("vt_num_hidden_layers");
  CHECK(doctest::String(error_of(missing).c_str()) == doctest::Contains("vt_num_hidden_layers"));
  json pad = k3_tiny();
  pad["media_placeholder_token_id"] = 512;
  CHECK(doctest::String(error_of(pad).c_str()) == doctest::Contains("media_placeholder_token_id"));
}

TEST_CASE("K3 configs the engine cannot run are refused naming the key") {
  for (auto [key, value] :
       std::vector<std::pair<const char*, json>>{{"hidden_act", "gelu"},
                                                 {"mla_use_nope", false},
                                                 {"model_type", "deepseek_v3"},
                                                 {"routed_expert_hidden_size", 3}}) {
    json bad = k3_tiny();
    bad["text_config"][key] = value;
    CAPTURE(key);
    CHECK(doctest::String(error_of(bad).c_str()) == doctest::Contains(key));
  }
  json bound = k3_tiny();
  bound["text_config"]["linear_attn_config"]["gate_lower_bound"] = 0.0;
  CHECK(doctest::String(error_of(bound).c_str()) == doctest::Contains("gate_lower_bound"));
  json no_text = k3_tiny();
  no_text["text_config"] = 5;
  CHECK(doctest::String(error_of(no_text).c_str()) == doctest::Contains("text_config"));
  json stray = k3_tiny();
  stray["text_config"]["latent_moe_use_norm"] = true;
  stray["text_config"].erase("routed_expert_hidden_size");
  CHECK(doctest::String(error_of(stray).c_str()) == doctest::Contains("latent_moe_use_norm"));
}

TEST_CASE("the real K3 (k3.md §1.2): experts of 3584 x 3072 in records of 12,406,784 bytes") {
  json config = k3_tiny();
  json& t = config["text_config"];
  json kda = json::array(), mla = json::array();
  for (int layer = 1; layer <= 93; ++layer)
    (layer % 4 == 0 || layer == 93 ? mla : kda).push_back(layer);
  t.update(json{{"vocab_size", 163840},
                {"hidden_size", 7168},
                {"num_hidden_layers", 93},
                {"intermediate_size", 32768},
                {"num_experts", 896},
                {"num_experts_per_token", 16},
                {"moe_intermediate_size", 3072},
                {"routed_expert_hidden_size", 3584},
                {"num_attention_heads", 96},
                {"num_key_value_heads", 96},
                {"q_lora_rank", 1536},
                {"kv_lora_rank", 512},
                {"qk_nope_head_dim", 128},
                {"qk_rope_head_dim", 64},
                {"v_head_dim", 128},
                {"attn_res_block_size", 12},
                {"model_max_length", 1048576}});
  t["linear_attn_config"].update(
      json{{"kda_layers", kda}, {"full_attn_layers", mla}, {"num_heads", 96}, {"head_dim", 128}});
  config["media_placeholder_token_id"] = 163605;
  config["vision_config"] = json{{"patch_size", 14},           {"vt_hidden_size", 1024},
                                 {"vt_num_attention_heads", 12}, {"qkv_hidden_size", 1536},
                                 {"vt_intermediate_size", 4096}, {"vt_num_hidden_layers", 27},
                                 {"init_pos_emb_height", 64},   {"init_pos_emb_width", 64},
                                 {"text_hidden_size", 7168}};
  const ModelConfig c = ModelConfig::from_json(config);
  CHECK(c.kda_layers() == 69);
  CHECK(c.moe_layers() == 92);
  CHECK(c.shared_width == 6144);
  const std::vector<MoeLayerSpec> moe = moe_inventory(c);
  REQUIRE(moe.size() == 92);
  CHECK(moe[0].hidden == 3584);
  CHECK(RecordLayout::compute(moe[0].hidden, moe[0].expert_width).stride ==
        12406784);  // k3.md §7.1
  // 69 KDA + 24 MLA + 92 MoE + 3 dense + 5 global tensors, and 4 AttnRes vectors per layer (§2.6).
  CHECK(trunk_inventory(c).size() == 2460);
  // The state: KDA 69 × 96 × 128² + conv 69 × 3 × 3 × 12288 fixed; MLA 24 × 576 per token (§7.3).
  CHECK(c.state_floats_fixed() == 69ull * (96 * 128 * 128 + 9 * 12288));
  CHECK(c.state_floats_per_token(false) == 24 * 576);
  CHECK(c.state_floats_per_token() == 24 * 288);
  // The tower's and the projector's parameters (k3.md §4.1).
  uint64_t tower = 0, projector = 0;
  for (const TensorSpec& v : vision_inventory(c)) (v.name.rfind("mm_projector.", 0) == 0 ? projector : tower) += v.elements();
  CHECK(tower == 401214464);
  CHECK(projector == 46144512);
  CHECK(c.vision->head_dim() == 128);
}
