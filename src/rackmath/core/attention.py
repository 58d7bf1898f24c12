"""Attention kinds as one registry: weights, KV cache held, KV cache read, FLOPs.

Each :class:`~rackmath.specs.model.AttentionKind` has one :class:`AttentionRule`; a new
kind is one entry here, not branches across files. Per layer and per token:

* ``params(a, h)``: weights of one attention block;
* ``kv_elements(a)``: values one token adds to the cache of one layer;
* ``flops_per_visible(a, decode)``: FLOPs one query token spends per key it attends to,
  ``2 * H * (d_qk + d_v)`` (scores ``Q K^T`` plus the weighted sum ``A V``, 2 per MAC).

What a layer *holds* and what a decode step *reads* differ (:func:`held_tokens`,
:func:`read_tokens`): a sliding window bounds both at ``w``; DeepSeek-V3.2's sparse attention
(DSA) holds the whole context but reads only the ``top_k`` tokens its indexer selects,
plus the indexer's own small key for every token (DeepSeek-V3.2-Exp report, 2025: top-k =
2,048, one 128-value FP8 indexer key per token).

Sources: Vaswani et al. 2017 (MHA), Ainslie et al. 2023 (GQA), Shazeer 2019 (MQA),
DeepSeek-V2 report §2.1 (MLA; absorbed decode as in DeepSeek's inference code and FlashMLA).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from rackmath.specs.model import AttentionKind, AttentionSpec
from rackmath.units import FLOPS_PER_MAC

FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class AttentionRule:
    """The three facts every attention kind must state (see the module docstring)."""

    params: Callable[[AttentionSpec, int], int]
    kv_elements: Callable[[AttentionSpec], int]
    flops_per_visible: Callable[[AttentionSpec, bool], int]
    #: heads tensor parallelism can split the cache over (MLA's latent is shared: 1)
    kv_shardable_heads: Callable[[AttentionSpec], int]


def _standard_params(a: AttentionSpec, hidden: int) -> int:
    """``W_q: h x (H d)``, ``W_k, W_v: h x (H_kv d)``, ``W_o: (H d) x h`` + biases, q/k norms, sinks."""
    q_width = a.num_heads * a.head_dim
    kv_width = a.num_kv_heads * a.head_dim
    weights = hidden * q_width + 2 * hidden * kv_width + q_width * hidden
    biases = (q_width + 2 * kv_width if a.qkv_bias else 0) + (hidden if a.output_bias else 0)
    norms = 2 * a.head_dim if a.qk_norm else 0
    sinks = a.num_heads if a.sinks else 0
    return weights + biases + norms + sinks


def _mla_params(a: AttentionSpec, hidden: int) -> int:
    """MLA (DeepSeek-V2 §2.1): queries through a rank-``r_q`` bottleneck (direct when
    ``q_lora_rank`` is null), keys and values through the cached latent ``r_kv + d_rope``
    then ``r_kv x H (d_nope + d_v)``, RMSNorm scales on both latents, output ``H d_v x h``."""
    heads = a.num_heads
    q_out = heads * (a.qk_nope_head_dim + a.qk_rope_head_dim)
    q = hidden * a.q_lora_rank + a.q_lora_rank + a.q_lora_rank * q_out if a.q_lora_rank else hidden * q_out
    kv = (
        hidden * (a.kv_lora_rank + a.qk_rope_head_dim)
        + a.kv_lora_rank
        + a.kv_lora_rank * heads * (a.qk_nope_head_dim + a.v_head_dim)
    )
    indexer = _indexer_params(a, hidden)
    return q + kv + heads * a.v_head_dim * hidden + indexer


def _indexer_params(a: AttentionSpec, hidden: int) -> int:
    """DSA's lightning indexer: query, key and head-weight projections (0 without DSA)."""
    if not a.index_top_k:
        return 0
    q_src = a.q_lora_rank or hidden
    return q_src * a.index_n_heads * a.index_head_dim + hidden * a.index_head_dim + hidden * a.index_n_heads


def _standard_flops(a: AttentionSpec, decode: bool) -> int:
    return FLOPS_PER_MAC * a.num_heads * (a.head_dim + a.v_head_dim)


def _mla_flops(a: AttentionSpec, decode: bool) -> int:
    """Absorbed decode: every head scores against the latent (``d_qk = r_kv + d_rope = 576``)
    and sums latent values (``d_v = r_kv = 512``); prefill runs decompressed
    (``d_qk = d_nope + d_rope = 192``, ``d_v = 128``)."""
    if decode:
        return FLOPS_PER_MAC * a.num_heads * (2 * a.kv_lora_rank + a.qk_rope_head_dim)
    return FLOPS_PER_MAC * a.num_heads * (a.head_dim + a.v_head_dim)


REGISTRY: dict[AttentionKind, AttentionRule] = {
    # A key and a value per KV head: 2 H_kv d (Llama-3.1-70B: 2 x 8 x 128 = 2,048).
    AttentionKind.MHA: AttentionRule(
        _standard_params, lambda a: 2 * a.num_kv_heads * a.head_dim, _standard_flops, lambda a: a.num_kv_heads
    ),
    AttentionKind.GQA: AttentionRule(
        _standard_params, lambda a: 2 * a.num_kv_heads * a.head_dim, _standard_flops, lambda a: a.num_kv_heads
    ),
    AttentionKind.MQA: AttentionRule(
        _standard_params, lambda a: 2 * a.num_kv_heads * a.head_dim, _standard_flops, lambda a: a.num_kv_heads
    ),
    # The latent and the shared RoPE key: r_kv + d_rope (DeepSeek-V3: 512 + 64 = 576).
    AttentionKind.MLA: AttentionRule(
        _mla_params, lambda a: a.kv_lora_rank + a.qk_rope_head_dim, _mla_flops, lambda a: 1
    ),
}


def rule(a: AttentionSpec) -> AttentionRule:
    return REGISTRY[a.kind]


def params(a: AttentionSpec, hidden: int) -> int:
    """Weights of one attention block (see each kind's rule)."""
    return rule(a).params(a, hidden)


def kv_elements_per_token_per_layer(a: AttentionSpec) -> int:
    """Cached values per token per layer (the indexer's key excluded: :func:`indexer_elements`)."""
    return rule(a).kv_elements(a)


def indexer_elements_per_token_per_layer(a: AttentionSpec) -> int:
    """DSA's indexer key per token per layer (``index_head_dim``; 0 without DSA)."""
    return a.index_head_dim if a.index_top_k else 0


def flops_per_visible_token(a: AttentionSpec, *, decode: bool) -> int:
    """``2 H (d_qk + d_v)``: FLOPs per query token per visible key, one layer."""
    return rule(a).flops_per_visible(a, decode)


def kv_shardable_heads(a: AttentionSpec) -> int:
    """KV heads tensor parallelism can split: ``H_kv`` (MLA: 1, one latent for all heads)."""
    return rule(a).kv_shardable_heads(a)


def held_tokens(context: ArrayLike, window: float | None) -> FloatArray:
    """Tokens one layer caches at ``context``: ``min(context, window)``."""
    c = np.asarray(context, float)
    return c if window is None else np.minimum(c, float(window))


def read_tokens(context: ArrayLike, window: float | None, top_k: float | None) -> FloatArray:
    """Tokens one decode query reads in one layer: ``min(context, window, top_k)``."""
    held = held_tokens(context, window)
    return held if not top_k else np.minimum(held, float(top_k))
