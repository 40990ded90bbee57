// tests/compute/convert/model_plan_test.cpp: config.json → what the
// checkpoint must hold: tensor names, shapes and trunk formats of both
// families, Qwen3's dense layers, and refusals naming the key at fault.
#include "compute/convert/model_plan.h"

#include <doctest/doctest.h>

#include "tests/compute/convert/test_util.h"

namespace sluice::convert {
namespace {

nlohmann::ordered_json olmoe_tiny() {
  return nlohmann::ordered_json::parse(R"({"model_type": "olmoe", "vocab_size": 512, "hidden_size": 128,
    "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "num_experts": 8, "num_experts_per_tok": 4, "tie_word_embeddings": false})");
}

nlohmann::ordered_json qwen_tiny() {
  return nlohmann::ordered_json::parse(R"({"model_type": "qwen3_moe", "vocab_size": 512, "hidden_size": 128,
    "intermediate_size": 256, "moe_intermediate_size": 48, "num_hidden_layers": 3, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 64, "decoder_sparse_step": 1, "mlp_only_layers": [],
    "num_experts": 8, "num_experts_per_tok": 2, "tie_word_embeddings": false})");
}

const TrunkTensorPlan* find(const ModelPlan& plan, const std::string& name) {
  for (const auto& t : plan.trunk) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

TEST_CASE("set_lm_head_format changes lm_head.weight alone and takes only a grouped format") {
  ModelPlan plan = plan_model(olmoe_tiny(), "config.json");
  const ModelPlan before = plan;
  set_lm_head_format(plan.trunk, TrunkFormat::kQ4G128);
  REQUIRE(plan.trunk.size() == before.trunk.size());
  for (size_t i = 0; i < plan.trunk.size(); ++i) {
    const bool head = plan.trunk[i].name == "lm_head.weight";
    CHECK(plan.trunk[i].format == (head ? TrunkFormat::kQ4G128 : before.trunk[i].format));
  }
  CHECK(trunk_file_bytes(plan.trunk) < trunk_file_bytes(before.trunk));
  set_lm_head_format(plan.trunk, TrunkFormat::kQ8G128);
  CHECK(find(plan, "lm_head.weight")->format == TrunkFormat::kQ8G128);
  CHECK_THROWS_WITH(set_lm_head_format(plan.trunk, TrunkFormat::kF32),
                    doctest::Contains("LM head can be stored as q8g128, q6g128 or q4g128, not f32"));
}

TEST_CASE("OLMoE: whole-vector q/k norms, every layer MoE, formats by role") {
  const ModelPlan plan = plan_model(olmoe_tiny(), "config.json");
  CHECK(plan.arch == "olmoe");
  REQUIRE(plan.moe_layers.size() == 2);
  CHECK(plan.moe_layers[1].layer == 1);
  CHECK(plan.moe_layers[1].codebook_base == 6);
  CHECK(plan.moe_layers[0].expert_width == 64);
  CHECK(find(plan, "model.layers.0.self_attn.k_proj.weight")->shape == std::vector<uint64_t>{64, 128});
  CHECK(find(plan, "model.layers.0.self_attn.q_norm.weight")->shape == std::vector<uint64_t>{128});
  CHECK(find(plan, "model.layers.0.self_attn.k_norm.weight")->shape == std::vector<uint64_t>{64});
  CHECK(find(plan, "model.embed_tokens.weight")->format == TrunkFormat::kQ8G128);
  CHECK(find(plan, "lm_head.weight")->format == TrunkFormat::kQ8G128);
  CHECK(find(plan, "model.layers.1.self_attn.o_proj.weight")->format == TrunkFormat::kQ4G128);
  CHECK(find(plan, "model.layers.1.mlp.gate.weight")->format == TrunkFormat::kF32);
  CHECK(find(plan, "model.layers.1.mlp.gate.weight")->shape == std::vector<uint64_t>{8, 128});
  CHECK(find(plan, "model.norm.weight")->format == TrunkFormat::kF32);
  CHECK(plan.trunk.size() == 1 + 2 * 9 + 2);
  CHECK(expert_tensor_name(plan.config, 1, 7, MatrixKind::kDown) == "model.layers.1.mlp.experts.7.down_proj.weight");
}

TEST_CASE("Qwen3: explicit head_dim, per-head norms, dense layers into the trunk") {
  auto config = qwen_tiny();
  ModelPlan plan = plan_model(config, "config.json");
  CHECK(find(plan, "model.layers.0.self_attn.q_proj.weight")->shape == std::vector<uint64_t>{256, 128});
  CHECK(find(plan, "model.layers.0.self_attn.o_proj.weight")->shape == std::vector<uint64_t>{128, 256});
  CHECK(find(plan, "model.layers.0.self_attn.q_norm.weight")->shape == std::vector<uint64_t>{64});
  CHECK(plan.moe_layers.size() == 3);
  CHECK(plan.moe_layers[0].expert_width == 48);

  config["mlp_only_layers"] = {1};
  plan = plan_model(config, "config.json");
  REQUIRE(plan.moe_layers.size() == 2);
  CHECK(plan.moe_layers[1].layer == 2);
  CHECK(plan.moe_layers[1].codebook_base == 6);
  CHECK(find(plan, "model.layers.1.mlp.gate.weight") == nullptr);
  const auto* dense = find(plan, "model.layers.1.mlp.down_proj.weight");
  REQUIRE(dense != nullptr);
  CHECK(dense->shape == std::vector<uint64_t>{128, 256});
  CHECK(dense->format == TrunkFormat::kQ4G128);

  config["mlp_only_layers"] = nlohmann::ordered_json::array();
  config["decoder_sparse_step"] = 2;
  plan = plan_model(config, "config.json");
  REQUIRE(plan.moe_layers.size() == 1);
  CHECK(plan.moe_layers[0].layer == 1);
}

TEST_CASE("tied embeddings drop lm_head") {
  auto config = olmoe_tiny();
  config["tie_word_embeddings"] = true;
  CHECK(find(plan_model(config, "config.json"), "lm_head.weight") == nullptr);
}

TEST_CASE("DeepSeek-V3: MLA tensors, a dense first layer, the router bias and shared expert in the trunk") {
  auto config = olmoe_tiny();
  config = nlohmann::ordered_json::parse(R"({"model_type": "deepseek_v3", "vocab_size": 512, "hidden_size": 256,
    "intermediate_size": 512, "moe_intermediate_size": 64, "num_hidden_layers": 4, "first_k_dense_replace": 1,
    "num_attention_heads": 4, "q_lora_rank": 96, "kv_lora_rank": 64, "qk_nope_head_dim": 32,
    "qk_rope_head_dim": 16, "v_head_dim": 32, "n_routed_experts": 16, "n_shared_experts": 1,
    "num_experts_per_tok": 4, "n_group": 4, "topk_group": 2, "routed_scaling_factor": 2.5,
    "max_position_embeddings": 2560, "num_nextn_predict_layers": 1})");
  const ModelPlan plan = plan_model(config, "config.json");
  CHECK(find(plan, "model.layers.1.self_attn.q_a_proj.weight")->shape == std::vector<uint64_t>{96, 256});
  CHECK(find(plan, "model.layers.1.self_attn.q_a_layernorm.weight")->shape == std::vector<uint64_t>{96});
  CHECK(find(plan, "model.layers.1.self_attn.q_b_proj.weight")->shape == std::vector<uint64_t>{192, 96});
  CHECK(find(plan, "model.layers.1.self_attn.kv_a_proj_with_mqa.weight")->shape == std::vector<uint64_t>{80, 256});
  CHECK(find(plan, "model.layers.1.self_attn.kv_b_proj.weight")->shape == std::vector<uint64_t>{256, 64});
  CHECK(find(plan, "model.layers.1.self_attn.o_proj.weight")->shape == std::vector<uint64_t>{256, 128});
  CHECK(find(plan, "model.layers.0.mlp.gate_proj.weight")->shape == std::vector<uint64_t>{512, 256});
  CHECK(find(plan, "model.layers.0.mlp.gate.weight") == nullptr);
  CHECK(find(plan, "model.layers.1.mlp.gate.e_score_correction_bias")->format == TrunkFormat::kF32);
  CHECK(find(plan, "model.layers.3.mlp.shared_experts.down_proj.weight")->shape == std::vector<uint64_t>{256, 64});
  CHECK(find(plan, "model.layers.3.mlp.shared_experts.down_proj.weight")->format == TrunkFormat::kQ4G128);
  CHECK(find(plan, "model.layers.1.self_attn.q_proj.weight") == nullptr);
  REQUIRE(plan.moe_layers.size() == 3);
  CHECK(plan.moe_layers[0].layer == 1);
  CHECK(plan.moe_layers[0].experts == 16);
  // The MTP layer (model.layers.4) is no part of the model.
  CHECK(is_skipped_source_tensor(plan.config, "model.layers.4.eh_proj.weight"));
  CHECK_FALSE(is_skipped_source_tensor(plan.config, "model.layers.3.mlp.gate.weight"));
  CHECK_FALSE(is_skipped_source_tensor(plan.config, "model.layers.5.eh_proj.weight"));
}

TEST_CASE("Mixtral: experts are w1/w3/w2 under block_sparse_moe, no q/k norms") {
  const auto config = nlohmann::ordered_json::parse(R"({"model_type": "mixtral", "vocab_size": 512,
    "hidden_size": 128, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "num_local_experts": 4, "num_experts_per_tok": 2})");
  const ModelPlan plan = plan_model(config, "config.json");
  CHECK(find(plan, "model.layers.1.block_sparse_moe.gate.weight")->shape == std::vector<uint64_t>{4, 128});
  CHECK(find(plan, "model.layers.0.self_attn.q_norm.weight") == nullptr);
  CHECK(expert_tensor_name(plan.config, 1, 3, MatrixKind::kGate) == "model.layers.1.block_sparse_moe.experts.3.w1.weight");
  CHECK(expert_tensor_name(plan.config, 1, 3, MatrixKind::kUp) == "model.layers.1.block_sparse_moe.experts.3.w3.weight");
  CHECK(expert_tensor_name(plan.config, 1, 3, MatrixKind::kDown) == "model.layers.1.block_sparse_moe.experts.3.w2.weight");
}

TEST_CASE("bad configs are refused naming the key") {
  auto config = olmoe_tiny();
  config["model_type"] = "gpt2";
  CHECK(test::contains(test::error_of([&] { plan_model(config, "c.json"); }), "c.json: model_type gpt2 is not supported"));
  config = olmoe_tiny();
  config.erase("hidden_size");
  CHECK(test::contains(test::error_of([&] { plan_model(config, "c.json"); }), "key hidden_size is missing"));
  config = olmoe_tiny();
  config["num_experts"] = 5000;
  CHECK(test::contains(test::error_of([&] { plan_model(config, "c.json"); }), "key num_experts is 5000"));
  config = olmoe_tiny();
  config["intermediate_size"] = 60;
  CHECK(test::contains(test::error_of([&] { plan_model(config, "c.json"); }), "multiples of 8"));
  config = qwen_tiny();
  config["decoder_sparse_step"] = 0;
  CHECK(test::contains(test::error_of([&] { plan_model(config, "c.json"); }), "decoder_sparse_step"));
  CHECK(test::contains(test::error_of([&] { plan_model(nlohmann::ordered_json::array(), "c.json"); }), "not a JSON object"));
}

}  // namespace
}  // namespace sluice::convert
