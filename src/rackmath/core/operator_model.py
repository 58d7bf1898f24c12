"""A model's operators as numbers: parameters and bytes by weight class, the shapes sharding
needs, and the rules that place experts on ranks. Built once per model and weight formats
(:func:`operator_model`); :mod:`rackmath.core.operators` times a pass over them.

Worked number: DeepSeek-V3 stores 256 routed experts; on EP = 72 with 32 redundant slots the
busiest rank holds ``ceil(288 / 72) = 4`` slots, ``4 x 72 / 256 = 1.125`` times the balanced
share (:func:`expert_slot_factor`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike, NDArray

from rackmath.core import architecture as arch
from rackmath.core import attention as attn
from rackmath.core.numeric import ceil, maximum, num
from rackmath.specs.model import WEIGHT_CLASSES, AttentionKind, MlpKind, ModelSpec
from rackmath.specs.precision import Precision

FloatArray = NDArray[np.float64]

#: The kernel family each attention kind's decode and prefill run on (its curves' ``kind``).
ATTENTION_FAMILY: dict[AttentionKind, str] = {
    AttentionKind.MLA: "mla",
    AttentionKind.DSA: "dsa",
}


@dataclass(frozen=True)
class OperatorModel:
    """A model's operators as numbers: parameters (for FLOPs) and bytes (for traffic) by
    weight class, all layers, plus the shapes sharding needs. Built once by :func:`operator_model`."""

    hidden: int
    num_layers: int
    num_moe_layers: int
    num_dense_layers: int
    kv_heads: int
    experts: int
    experts_per_token: int
    params: Mapping[str, float]  # per class, all layers (routed_experts: one expert, all MoE layers)
    weight_bytes: Mapping[str, float]  # same keys, bytes
    qkv_out_widths: tuple[float, float]  # output widths of the QKV and output projections
    mlp_widths: tuple[float, float, float]  # intermediate width of dense MLP, shared, one expert
    #: every operator's weight storage format, by the keys of ``params`` (it picks the kernel format)
    weight_precision: Mapping[str, Precision] = field(default_factory=dict)
    #: weight bytes over parameters, by the keys of ``params`` (scales included)
    bytes_per_param: Mapping[str, float] = field(default_factory=dict)
    #: query heads; a decode query's and output's width per head (MLA absorbed: 576 and 512)
    heads: float = 0.0
    decode_dims: tuple[float, float] = (0.0, 0.0)
    #: a prompt's query and output width per head, and the KV heads its kernel reads; whether
    #: it runs absorbed (DSA: every head against one latent, tiled by heads)
    prefill_dims: tuple[float, float, float] = (0.0, 0.0, 0.0)
    prefill_absorbed: bool = False
    #: the attention kernel family (``gqa``, ``mla``, ``dsa``: :data:`ATTENTION_FAMILY`)
    attention_kind: str = "gqa"
    #: DSA's top-k (tokens each query's sparse core attends); 0 without DSA
    top_k: float = 0.0
    #: an expert's and a dense MLP's weight matrices: 3 gated (gate, up, down), 2 non-gated (up, down)
    expert_matrices: float = 3.0
    dense_matrices: float = 3.0


def operator_model(model: ModelSpec, weights: Mapping[str, Precision] | Precision) -> OperatorModel:
    """Parameters and bytes by weight class (:data:`WEIGHT_CLASSES`), each class stored in
    ``weights`` (one format for every class, or a mapping per class: gpt-oss keeps attention,
    router, embedding and head in bf16 beside mxfp4 experts)."""
    p = arch.param_counts(model)
    per = dict(weights) if isinstance(weights, Mapping) else dict.fromkeys(WEIGHT_CLASSES, weights)
    a = model.attention
    out_params = arch.attention_out_params(model)  # per layer kind (hybrid and NAS models)
    params = {
        "embedding": float(p.embedding),
        "lm_head": float(p.lm_head or p.embedding),
        "attention_qkv": float(p.attention - out_params),
        "attention_out": float(out_params),
        "dense_mlp": float(p.dense_mlp),
        "routed_experts": float(p.per_expert * model.num_moe_layers),
        "shared_experts": float(p.shared_experts),
        "router": float(p.router),
        "norms": float(p.norms),
    }
    precision = {name: per[weight_class(name)] for name in params}
    weight_bytes = {name: count * precision[name].bytes_per_element for name, count in params.items()}
    moe = model.moe if model.is_moe else None
    dense = model.dense_mlp
    latent, latent_prefill = attn.rule(a).latent_decode, attn.rule(a).latent_prefill
    q_width = a.num_heads * (a.qk_nope_head_dim + a.qk_rope_head_dim if a.kv_lora_rank else a.head_dim)
    qkv_width = q_width + attn.kv_elements_per_token_per_layer(a)
    heads = float(a.num_heads)
    decode = (
        (float(a.kv_lora_rank + a.qk_rope_head_dim), float(a.kv_lora_rank))
        if latent
        else (
            float(a.head_dim),
            float(a.v_head_dim),
        )
    )
    prefill_kv = heads if latent else float(a.num_kv_heads)  # MLA prefill runs decompressed ...
    prefill = (float(q_width / a.num_heads), float(a.v_head_dim), prefill_kv)
    if latent_prefill:  # ... DSA's absorbed, one shared latent (the decode dims)
        prefill = (*decode, 1.0)
    return OperatorModel(
        hidden=model.hidden_size,
        num_layers=model.num_layers,
        num_moe_layers=model.num_moe_layers,
        num_dense_layers=model.num_dense_mlp_layers,
        kv_heads=attn.kv_shardable_heads(a),
        experts=moe.num_experts if moe else 1,
        experts_per_token=moe.experts_per_token if moe else 1,
        params=params,
        weight_bytes=weight_bytes,
        qkv_out_widths=(float(qkv_width), float(a.num_heads * a.v_head_dim)),
        mlp_widths=(
            float(dense.intermediate_size if dense else 0),
            float(moe.shared_intermediate_size if moe else 0),
            float(moe.expert_intermediate_size if moe else 0),
        ),
        weight_precision=precision,
        bytes_per_param={name: weight_bytes[name] / max(count, 1.0) for name, count in params.items()},
        heads=heads,
        decode_dims=decode,
        prefill_dims=prefill,
        prefill_absorbed=latent_prefill,
        attention_kind=ATTENTION_FAMILY.get(a.kind, "gqa"),
        top_k=float(a.index_top_k or 0),
        expert_matrices=3.0 if (moe is None or moe.gated) else 2.0,
        dense_matrices=3.0 if (dense is None or dense.gated) else 2.0,
    )


def weight_class(operator: str) -> str:
    """The weight class (:data:`WEIGHT_CLASSES`) an operator's weights belong to."""
    return "attention" if operator in ("attention_qkv", "attention_out") else operator


def expert_shards(tp: ArrayLike, ep: ArrayLike, moe_tp: ArrayLike = 0) -> FloatArray:
    """Ways the routed experts are split: ``moe_tp x ep`` when the plan states the experts'
    own tensor parallelism (``moe_tp > 0``), else ``max(ep, tp)`` (whole experts over ``ep``,
    then expert-TP when ``tp > ep``). The rest of a stage's chips replicate the experts."""
    e, mt, t = num(ep), num(moe_tp), num(tp)
    if type(mt) is not np.ndarray:  # one value for every point: one branch
        return mt * e if mt > 0 else maximum(e, t)
    return np.asarray(np.where(mt > 0, mt * e, np.maximum(e, t)), dtype=float)


def expert_slot_factor(ep: ArrayLike, experts: int, redundant_experts: ArrayLike = 0) -> FloatArray:
    """The busiest EP rank's expert slots over the balanced share: ``ceil((E + R)/ep) ep / E``.

    ``R`` redundant slots (EPLB replicates hot experts) and EP degrees that do not divide
    ``E`` leave some ranks with ``ceil((E + R)/ep)`` slots; a rank's weights (held and read)
    scale with its slots. 1 when ``R = 0`` and ``ep | E``; 256 + 32 on EP = 72: 4 x 72/256 = 1.125.
    """
    e, r = num(ep), num(redundant_experts)
    return ceil((experts + r) / e) * e / experts


def layer_kinds(model: ModelSpec) -> tuple[bool, ...]:
    """True for each MoE layer (for stage splits)."""
    return tuple(layer.mlp is MlpKind.MOE for layer in model.layers)


def top_k_gather_work(
    m: OperatorModel, length: ArrayLike, heads: ArrayLike, kv_bytes: float
) -> tuple[FloatArray, FloatArray]:
    """FLOPs and cache bytes one prompt of ``length`` tokens adds per layer on a chip holding
    ``heads`` query heads when its DSA prefill kernel runs every query over all top-k slots
    (:func:`rackmath.core.attention.top_k_gather`): the extra pairs at ``2 heads (d_qk + d_v)``
    FLOPs and every slot's ``d_qk``-wide latent at ``kv_bytes`` (shared by the chip's heads).
    Zero without DSA."""
    if not m.top_k:
        return np.zeros(()), np.zeros(())
    extra, slots = attn.top_k_gather(m.top_k, length)
    qk, v, _ = m.prefill_dims
    return np.asarray(extra * 2.0 * num(heads) * (qk + v)), np.asarray(slots * qk * kv_bytes)
