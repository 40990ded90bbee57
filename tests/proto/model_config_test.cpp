// Reading config.json: family differences, dense-layer rules, refusals by key.
#include <doctest/doctest.h>

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
}  // namespace

TEST_CASE("qwen3: explicit head_dim, per-head q/k norm, expert width from moe_intermediate_size") {
  const ModelConfig c = ModelConfig::from_json("qwen3_moe", qwen3_tiny());
  CHECK(c.head_dim == 64);
  CHECK(c.qk_norm == QkNorm::kPerHead);
  CHECK(c.expert_width == 48);
  CHECK(c.dense_width == 256);
  CHECK(c.norm_topk_prob);
  CHECK(c.layer_is_moe == std::vector<bool>{true, true, true});
  CHECK(c.eos_ids == std::vector<int32_t>{2});
}

TEST_CASE("qwen3: mlp_only_layers and decoder_sparse_step make dense layers") {
  json config = qwen3_tiny();
  config["mlp_only_layers"] = {1};
  CHECK(ModelConfig::from_json("qwen3_moe", config).layer_is_moe == std::vector<bool>{true, false, true});
  config["mlp_only_layers"] = json::array();
  config["decoder_sparse_step"] = 2;
  CHECK(ModelConfig::from_json("qwen3_moe", config).layer_is_moe == std::vector<bool>{false, true, false});
  config["mlp_only_layers"] = {7};
  CHECK_THROWS_WITH_AS(ModelConfig::from_json("qwen3_moe", config), doctest::Contains("mlp_only_layers"), Error);
}

TEST_CASE("olmoe: head_dim from hidden/heads, whole-vector q/k norm, expert width is intermediate_size") {
  json config = qwen3_tiny();
  config.erase("head_dim");
  config.erase("moe_intermediate_size");
  config["intermediate_size"] = 64;
  config["norm_topk_prob"] = false;
  const ModelConfig c = ModelConfig::from_json("olmoe", config);
  CHECK(c.head_dim == 32);
  CHECK(c.qk_norm == QkNorm::kWholeVector);
  CHECK(c.expert_width == 64);
  CHECK_FALSE(c.norm_topk_prob);
}

TEST_CASE("bad configs are refused naming the key") {
  CHECK_THROWS_WITH_AS(ModelConfig::from_json("mixtral", qwen3_tiny()), doctest::Contains("mixtral"), Error);
  json config = qwen3_tiny();
  config["num_experts_per_tok"] = 9;
  CHECK_THROWS_WITH_AS(ModelConfig::from_json("qwen3_moe", config), doctest::Contains("num_experts_per_tok"), Error);
  config = qwen3_tiny();
  config["num_key_value_heads"] = 3;
  CHECK_THROWS_WITH_AS(ModelConfig::from_json("qwen3_moe", config), doctest::Contains("num_key_value_heads"), Error);
  config = qwen3_tiny();
  config["hidden_size"] = "128";
  CHECK_THROWS_WITH_AS(ModelConfig::from_json("qwen3_moe", config), doctest::Contains("hidden_size"), Error);
  config = qwen3_tiny();
  config["rope_scaling"] = {{"type", "yarn"}};
  CHECK_THROWS_WITH_AS(ModelConfig::from_json("qwen3_moe", config), doctest::Contains("rope_scaling"), Error);
}
