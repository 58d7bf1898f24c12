"""Readers for the families supported before 2026: Llama/Mistral/Qwen dense, Mixtral, Qwen MoE,
DeepSeek-V3 (and V3.2's sparse attention), GLM-4 MoE, gpt-oss, Gemma 3."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rackmath.specs.hf_readers.fields import (
    Fields,
    layers,
    mla_attention,
    qwen_moe,
    standard_attention,
    windows,
)
from rackmath.specs.model import AttentionSpec, DenseMlpSpec, MoeSpec


def _read_llama(f: Fields) -> dict[str, Any]:
    """llama, mistral, qwen2, qwen3: dense decoder with a gated MLP."""
    qwen2 = f.family == "qwen2"
    n = f.integer("num_hidden_layers")
    attention = standard_attention(
        f,
        qkv_bias=qwen2 or f.flag("attention_bias", False),
        output_bias=f.flag("attention_bias", False),
        qk_norm=f.family == "qwen3",
    )
    return {
        "attention": attention,
        "layers": layers(windows(f, n), lambda i: False),
        "dense_mlp": DenseMlpSpec(f.integer("intermediate_size"), bias=f.flag("mlp_bias", False)),
        "moe": None,
    }


def _every_layer_moe(f: Fields, attention: AttentionSpec, bias: bool = False) -> dict[str, Any]:
    """Mixtral's layout (gpt-oss shares it): every layer MoE over ``num_local_experts`` of
    ``intermediate_size``, sliding windows where the config sets them; ``bias`` on the
    experts and the router (gpt-oss)."""
    return {
        "attention": attention,
        "layers": layers(windows(f, f.integer("num_hidden_layers")), lambda i: True),
        "dense_mlp": None,
        "moe": MoeSpec(
            num_experts=f.integer("num_local_experts"),
            experts_per_token=f.integer("num_experts_per_tok"),
            expert_intermediate_size=f.integer("intermediate_size"),
            expert_bias=bias,
            router_bias=bias,
        ),
    }


def _read_mixtral(f: Fields) -> dict[str, Any]:
    return _every_layer_moe(f, standard_attention(f, qkv_bias=False, output_bias=False))


def _read_qwen_moe(f: Fields) -> dict[str, Any]:
    """qwen2_moe / qwen3_moe: MoE every decoder_sparse_step layers, except mlp_only_layers."""
    n = f.integer("num_hidden_layers")
    step = f.integer("decoder_sparse_step", default=1)
    dense_only = set(f.int_list("mlp_only_layers"))
    return {
        "attention": standard_attention(
            f,
            qkv_bias=f.family == "qwen2_moe" or f.flag("attention_bias", False),
            output_bias=False,
            qk_norm=f.family == "qwen3_moe",
        ),
        "layers": layers(windows(f, n), lambda i: i not in dense_only and (i + 1) % step == 0),
        "dense_mlp": DenseMlpSpec(f.integer("intermediate_size")),
        "moe": qwen_moe(f),
    }


def _read_deepseek(f: Fields) -> dict[str, Any]:
    """deepseek_v3 / kimi_k2 (MLA), deepseek_v32 (MLA + DSA) and glm4_moe (GQA): leading dense
    layers, then MoE."""
    n = f.integer("num_hidden_layers")
    first_moe = f.integer("first_k_dense_replace", default=0, minimum=0)
    freq = f.integer("moe_layer_freq", default=1)
    mla = "kv_lora_rank" in f.config
    attention = (
        mla_attention(f)
        if mla
        else standard_attention(
            f,
            qkv_bias=f.flag("attention_bias", False),
            output_bias=False,
            qk_norm=f.flag("use_qk_norm", False),
        )
    )
    shared = f.integer("n_shared_experts", default=0, minimum=0)
    expert_width = f.integer("moe_intermediate_size")
    return {
        "attention": attention,
        "layers": layers(windows(f, n), lambda i: i >= first_moe and i % freq == 0),
        "dense_mlp": DenseMlpSpec(f.integer("intermediate_size")),
        "moe": MoeSpec(
            num_experts=f.integer("n_routed_experts"),
            experts_per_token=f.integer("num_experts_per_tok"),
            expert_intermediate_size=expert_width,
            num_shared_experts=shared,
            shared_intermediate_size=shared * expert_width,
            router_bias=f.config.get("topk_method") == "noaux_tc" or f.family == "glm4_moe",
        ),
        "num_mtp_layers": f.integer("num_nextn_predict_layers", default=0, minimum=0),
    }


def _read_gpt_oss(f: Fields) -> dict[str, Any]:
    return _every_layer_moe(f, standard_attention(f, qkv_bias=True, output_bias=True, sinks=True), bias=True)


def _read_gemma3(f: Fields) -> dict[str, Any]:
    n = f.integer("num_hidden_layers")
    return {
        "attention": standard_attention(f, qkv_bias=False, output_bias=False, qk_norm=True),
        "layers": layers(windows(f, n), lambda i: False),
        "dense_mlp": DenseMlpSpec(f.integer("intermediate_size")),
        "moe": None,
        "norms_per_layer": 4,  # pre/post attention and pre/post feed-forward
    }


READERS: dict[str, Callable[[Fields], dict[str, Any]]] = {
    "llama": _read_llama,
    "mistral": _read_llama,
    "qwen2": _read_llama,
    "qwen3": _read_llama,
    "mixtral": _read_mixtral,
    "qwen2_moe": _read_qwen_moe,
    "qwen3_moe": _read_qwen_moe,
    "deepseek_v3": _read_deepseek,
    "deepseek_v32": _read_deepseek,
    "kimi_k2": _read_deepseek,
    "kimi_k25": _read_deepseek,  # the text tower of a Kimi K2.5 / K2.6 config (hf_readers.unwrap)
    "glm4_moe": _read_deepseek,
    "gpt_oss": _read_gpt_oss,
    "gemma3": _read_gemma3,
    "gemma3_text": _read_gemma3,
}
