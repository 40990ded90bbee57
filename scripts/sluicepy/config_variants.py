# scripts/sluicepy/config_variants.py: the tiny configs' variants, one per
# math-changing config key and value (proto/families/README.md's audit): each
# sets or drops keys of a family's tiny config, so engine and reference can be
# compared on every way transformers reads that key. Data and one edit; no math.
import copy

from . import SluiceError

DROP = object()  # the key is removed: the config class's default applies

_GENERIC = {
    "rms_norm_eps_absent": {"rms_norm_eps": DROP},
    "rope_theta_absent": {"rope_theta": DROP},
    "rope_theta_500": {"rope_theta": 500.0},
    "tie_word_embeddings": {"tie_word_embeddings": True},
}
# DeepSeek-V3's rope_scaling and rope_interleave, read as transformers'
# _compute_yarn_parameters and modeling_deepseek_v3.py read them.
_MLA_ROPE = {
    # mscale_all_dim alone: the amplitude is mscale(factor), not the ratio's 1.
    "yarn_mscale_all_dim_only": {"rope_scaling.mscale": DROP},
    # mscale alone: again mscale(factor), and no softmax factor.
    "yarn_mscale_only": {"rope_scaling.mscale": 0.707, "rope_scaling.mscale_all_dim": DROP},
    "yarn_attention_factor": {"rope_scaling.attention_factor": 0.8},
    "yarn_no_truncate": {"rope_scaling.truncate": False},
    "yarn_original_max_absent": {"rope_scaling.original_max_position_embeddings": DROP},
    "yarn_betas_zero": {"rope_scaling.beta_fast": 0, "rope_scaling.beta_slow": 0},
    "rope_scaling_null": {"rope_scaling": None},
    "rope_interleave_false": {"rope_interleave": False},
}
_NORM_TOPK = {
    "norm_topk_prob_absent": {"norm_topk_prob": DROP},
    "norm_topk_prob_false": {"norm_topk_prob": False},
    "norm_topk_prob_true": {"norm_topk_prob": True},
}

VARIANTS = {
    "olmoe": {**_GENERIC, **_NORM_TOPK},
    "qwen3_moe": {**_GENERIC, **_NORM_TOPK},
    "mixtral": dict(_GENERIC),
    # Unrenormalised sigmoid weights sum to about twice one: the scaling is halved so the
    # logits keep the base's size (and f32 rounding its 1e-4 bar; at 2.5 it reached 1.1e-4).
    "deepseek_v3": {**_GENERIC, **_NORM_TOPK, **_MLA_ROPE,
                    "norm_topk_prob_false": {"norm_topk_prob": False, "routed_scaling_factor": 1.25}},
    "kimi_k2": dict(_MLA_ROPE),
    # NoPE attention: rope_theta changes nothing, so its variants are not listed.
    "kimi_linear": {"rms_norm_eps_absent": _GENERIC["rms_norm_eps_absent"],
                    "tie_word_embeddings": _GENERIC["tie_word_embeddings"],
                    "moe_renormalize_false": {"moe_renormalize": False},
                    "routed_scaling_factor_absent": {"routed_scaling_factor": DROP}},
}


def names(family):
    return sorted(VARIANTS.get(family, {}))


def apply(config, family, variant):
    """A copy of `config` with `variant`'s keys set or dropped (dotted keys reach into rope_scaling)."""
    if variant not in VARIANTS.get(family, {}):
        raise SluiceError(f"--variant {variant!r} is not one of {family}'s: {', '.join(names(family)) or 'none'}")
    out = copy.deepcopy(config)
    for key, value in VARIANTS[family][variant].items():
        *parents, leaf = key.split(".")
        node = out
        for parent in parents:
            if not isinstance(node.get(parent), dict):
                raise SluiceError(f"--variant {variant}: {family}'s tiny config has no object {parent}")
            node = node[parent]
        if value is DROP:
            node.pop(leaf, None)
        else:
            node[leaf] = value
    return out
