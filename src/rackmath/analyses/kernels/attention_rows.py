"""Attention tables as operator rows (GQA/MHA ``generation_attention`` and
``context_attention``; MLA ``generation_mla`` and ``context_mla``).

Each distinct head shape of a table is an attention spec of the registry
(:mod:`rackmath.core.attention`), whose FLOPs per visible key and cache values per token the
rows take, and each row is a :func:`rackmath.core.work.decode_attention` or
:func:`~rackmath.core.work.prefill_attention` call: the description the step uses.
The row conventions are in :mod:`rackmath.analyses.kernels.rows`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rackmath.analyses.kernels.op_rows import OpRows, floats, op_rows_of, shape_hash
from rackmath.catalog import kernel_tables as kt
from rackmath.core import attention as attn
from rackmath.core import work as wk
from rackmath.specs.efficiency import OpClass
from rackmath.specs.model import AttentionKind, AttentionSpec
from rackmath.specs.precision import kernel_format


def attention_rows(df: Any, cls: OpClass) -> OpRows:
    """GQA/MHA rows: each distinct (heads, KV heads, head dim) is an attention spec of the
    registry, whose FLOPs per visible key and cache values per token the rows use."""
    b, isl = floats(df, "batch_size"), floats(df, "isl")
    heads, kvh, hd, win = (
        floats(df, "num_heads"),
        floats(df, "num_key_value_heads"),
        floats(df, "head_dim"),
        floats(df, "window_size"),
    )
    kv_bytes = np.array([kernel_format(d).activation_bytes for d in df["kv_cache_dtype"].astype(str)])
    cols = [c for c in kt.REQUIRED["context_attention"] if c != "latency"]  # one call's shape
    decode = cls is OpClass.ATTENTION_DECODE
    # beyond the group the kernel shares a KV head over, every query head reads its own
    read_heads = np.where(unshared_group(df, heads / kvh), heads, kvh) if decode else kvh
    per_key_flops, per_key_values = _per_key(heads, read_heads, hd, decode)
    if decode:
        # a sliding window bounds the keys read, not the kernel's grid: it splits the whole
        # cache as the step's work does (depth = the context, FLOPs and bytes on the window)
        ctx = isl + (floats(df, "step") if "step" in df else 0.0)
        seen = np.where(win > 0, np.minimum(ctx, win), ctx)
        work = wk.decode_attention(
            b,
            heads,
            read_heads,
            hd,
            hd,
            ctx,
            flops=b * seen * per_key_flops,
            kv_read_bytes=b * seen * per_key_values * kv_bytes,
        )
        dt = df["kv_cache_dtype"].astype(str).to_numpy()
        shape = {"context": ctx, "batch": b}  # as timed
        family = wk.decode_family("gqa", heads / read_heads)  # masked MHA where no KV head is shared
        return op_rows_of(cls, dt, family, work, df, shape_hash(df, [*cols, "step"]), shape)
    # causal pairs: sum_{i=1..isl} min(i, w)
    w = np.where(win > 0, np.minimum(win, isl), isl)
    pairs = w * (w + 1) / 2 + (isl - w) * w
    a_bytes = np.array([kernel_format(d).activation_bytes for d in df["attn_dtype"].astype(str)])
    work = wk.prefill_attention(
        b * isl,
        heads,
        kvh,
        hd,
        hd,
        isl,
        flops=b * pairs * per_key_flops,
        input_bytes=a_bytes,
        sequences=b,
    )
    dt = df["attn_dtype"].astype(str).to_numpy()
    return op_rows_of(cls, dt, "gqa", work, df, shape_hash(df, cols), {"isl": isl})


def _per_key(
    heads: np.ndarray, kv_heads: np.ndarray, head_dim: np.ndarray, decode: bool
) -> tuple[np.ndarray, np.ndarray]:
    """FLOPs per visible key and cache values per token of each row's attention, from the
    registry (:func:`rackmath.core.attention.flops_per_visible_token`,
    :func:`~rackmath.core.attention.kv_elements_per_token_per_layer`) of a GQA spec per distinct shape."""
    shapes = np.stack([heads, kv_heads, head_dim], axis=1)
    flops, values = np.empty(len(heads)), np.empty(len(heads))
    for shape in np.unique(shapes, axis=0):
        h, k, d = (int(x) for x in shape)
        a = AttentionSpec(AttentionKind.GQA, h, k, d, d)
        at = (shapes == shape).all(axis=1)
        flops[at] = attn.flops_per_visible_token(a, decode=decode)
        values[at] = attn.kv_elements_per_token_per_layer(a)
    return flops, values


#: DeepSeek's MLA, the shape the MLA tables time (aiconfigurator-core's collector, with the
#: DeepSeek-V3 config): a 512-wide latent, 64-wide RoPE key, 128-wide nope and value heads,
#: a 1,536-wide query latent.
MLA_TABLE_SHAPE = {"kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128}


def mla_spec(heads: int) -> AttentionSpec:
    """The MLA attention the tables time, with ``heads`` local query heads."""
    s = MLA_TABLE_SHAPE
    return AttentionSpec(
        AttentionKind.MLA,
        heads,
        heads,
        s["qk_nope_head_dim"] + s["qk_rope_head_dim"],
        s["v_head_dim"],
        q_lora_rank=1536,
        kv_lora_rank=s["kv_lora_rank"],
        qk_nope_head_dim=s["qk_nope_head_dim"],
        qk_rope_head_dim=s["qk_rope_head_dim"],
    )


def mla_rows(df: Any, cls: OpClass) -> OpRows:
    """MLA rows (``generation_mla``, ``context_mla``): ``num_heads`` is the local head count
    (``tp_size`` only labels the row), the attended context ``isl + step``. Decode is absorbed:
    every head scores the 576-wide cached latent and sums 512-wide values, one latent read per
    sequence (:func:`rackmath.core.attention.flops_per_visible_token`); prefill runs
    decompressed (192-wide queries and keys, 128-wide values, one KV head per head)."""
    b, isl, heads = floats(df, "batch_size"), floats(df, "isl"), floats(df, "num_heads")
    step = floats(df, "step")
    kv_bytes = np.array([kernel_format(d).activation_bytes for d in df["kv_cache_dtype"].astype(str)])
    decode = cls is OpClass.ATTENTION_DECODE
    flops_per_key, latent = np.empty(len(b)), 0.0
    for h in np.unique(heads):
        a = mla_spec(int(h))
        flops_per_key[heads == h] = attn.flops_per_visible_token(a, decode=decode)
        latent = float(attn.kv_elements_per_token_per_layer(a))
    cols = ["mla_dtype", "kv_cache_dtype", "num_heads", "batch_size", "isl", "step"]
    dt = df["kv_cache_dtype"].astype(str).to_numpy()
    s = MLA_TABLE_SHAPE
    if decode:
        ctx = isl + step
        work = wk.decode_attention(
            b,
            heads,
            1.0,
            float(s["kv_lora_rank"] + s["qk_rope_head_dim"]),
            float(s["kv_lora_rank"]),
            ctx,
            flops=b * ctx * flops_per_key,
            kv_read_bytes=b * ctx * latent * kv_bytes,
        )
        return op_rows_of(cls, dt, "mla", work, df, shape_hash(df, cols), {"context": ctx, "batch": b})
    pairs = isl * (isl + 1) / 2 + step * isl  # a cached prefix of ``step`` tokens
    qk = float(s["qk_nope_head_dim"] + s["qk_rope_head_dim"])
    work = wk.prefill_attention(
        b * isl,
        heads,
        heads,
        qk,
        float(s["v_head_dim"]),
        isl + step,
        flops=b * pairs * flops_per_key,
        kv_write_bytes=b * isl * latent * kv_bytes,
        input_bytes=2.0,
        sequences=b,
    )
    dt = df["mla_dtype"].astype(str).to_numpy()
    return op_rows_of(cls, dt, "mla", work, df, shape_hash(df, cols), {"isl": isl})


# The most query heads per KV head TensorRT-LLM's decode attention reads one KV head for
# (:func:`unshared_group`).
TRTLLM_SHARED_GROUP_MAX = 32.0


def unshared_group(df: Any, group: np.ndarray) -> np.ndarray:
    """Decode rows whose kernel read the KV cache once per query head, not once per KV head.

    TensorRT-LLM's generation attention shares a KV head over at most 32 query heads: every
    chip's table (A100 1.0.0, Hopper and Blackwell 1.3.0rc20) is flat in the query heads up to
    32 per KV head and then costs what full multi-head attention of that many heads costs on
    Blackwell (B200, 32 sequences at 2,048 tokens, head dim 128: 0.015 ms at 32 query heads on
    1 KV head, 0.300 ms at 64 on 1, 0.302 ms at 64 on 64), and 0.45-0.75 of it on Hopper, where
    part of the repeated reads come from L2 (``tests/test_kernel_fit.py`` checks both). Other
    frameworks' tables are read as sharing. The serving model assumes a sharing kernel at every
    group size (FlashInfer, FlashAttention); of the catalog's models only PaLM (48 query heads
    on 1 KV head) lies beyond 32."""
    if "framework" not in df:
        return np.zeros(len(df), bool)
    trtllm = df["framework"].astype(str).str.lower().str.replace("-", "").isin(["trtllm", "tensorrtllm"])
    return trtllm.to_numpy() & (group > TRTLLM_SHARED_GROUP_MAX)
