# scripts/sluicepy/tiny_configs.py: the tiny test configurations of
# architectures.md §7, verbatim (key order as printed there). Data only.
_DEEPSEEK_TINY = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
    "vocab_size": 512, "hidden_size": 256, "intermediate_size": 512,
    "moe_intermediate_size": 64, "num_hidden_layers": 4,
    "first_k_dense_replace": 1, "moe_layer_freq": 1,
    "num_attention_heads": 4, "num_key_value_heads": 4,
    "q_lora_rank": 96, "kv_lora_rank": 64, "qk_nope_head_dim": 32,
    "qk_rope_head_dim": 16, "v_head_dim": 32,
    "n_routed_experts": 16, "n_shared_experts": 1, "num_experts_per_tok": 4,
    "n_group": 4, "topk_group": 2, "topk_method": "noaux_tc",
    "scoring_func": "sigmoid", "norm_topk_prob": True,
    "routed_scaling_factor": 2.5, "hidden_act": "silu", "rms_norm_eps": 1e-06,
    "rope_theta": 10000.0,
    "rope_scaling": {"type": "yarn", "factor": 40.0,
                     "original_max_position_embeddings": 64, "beta_fast": 32, "beta_slow": 1,
                     "mscale": 1.0, "mscale_all_dim": 1.0},
    "max_position_embeddings": 2560, "num_nextn_predict_layers": 0,
    "attention_bias": False, "tie_word_embeddings": False,
    "bos_token_id": 0, "eos_token_id": 1, "torch_dtype": "bfloat16"}

TINY = {
    "olmoe": {
        "architectures": ["OlmoeForCausalLM"], "model_type": "olmoe",
        "vocab_size": 512, "hidden_size": 128, "intermediate_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
        "hidden_act": "silu", "max_position_embeddings": 256, "rms_norm_eps": 1e-05,
        "rope_theta": 10000.0, "rope_scaling": None, "attention_bias": False,
        "clip_qkv": None, "num_experts": 8, "num_experts_per_tok": 4,
        "norm_topk_prob": False, "tie_word_embeddings": False,
        "bos_token_id": None, "eos_token_id": 2, "pad_token_id": 1,
        "torch_dtype": "bfloat16"},
    "qwen3_moe": {
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
        "vocab_size": 512, "hidden_size": 128, "intermediate_size": 256,
        "moe_intermediate_size": 48, "num_hidden_layers": 3,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
        "hidden_act": "silu", "max_position_embeddings": 512, "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0, "rope_scaling": None, "attention_bias": False,
        "use_sliding_window": False, "sliding_window": None,
        "decoder_sparse_step": 1, "mlp_only_layers": [],
        "num_experts": 8, "num_experts_per_tok": 2, "norm_topk_prob": True,
        "tie_word_embeddings": False, "bos_token_id": None, "eos_token_id": 2,
        "torch_dtype": "bfloat16"},
    "deepseek_v3": _DEEPSEEK_TINY,
    # §7.4: as 7.3 with K2 semantics (12 experts, one group, K2's scaling and YaRN), and
    # max_position_embeddings 2048 = 64 x 32: transformers 4.5x replaced the YaRN factor by
    # max_position_embeddings / original_max_position_embeddings, v5 and the remote code keep
    # `factor`; with the ratio equal to the factor (as in the real checkpoints) all agree.
    "kimi_k2": dict(_DEEPSEEK_TINY, model_type="kimi_k2", n_routed_experts=12, n_group=1, topk_group=1,
                    routed_scaling_factor=2.827, rope_theta=50000.0, max_position_embeddings=2048,
                    rope_scaling={"type": "yarn", "factor": 32.0, "original_max_position_embeddings": 64,
                                  "beta_fast": 1.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0}),
    "mixtral": {
        "architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
        "vocab_size": 512, "hidden_size": 128, "intermediate_size": 96,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "hidden_act": "silu", "max_position_embeddings": 512, "rms_norm_eps": 1e-05,
        "rope_theta": 1000000.0, "sliding_window": None, "num_local_experts": 4,
        "num_experts_per_tok": 2, "tie_word_embeddings": False,
        "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16"},
}
