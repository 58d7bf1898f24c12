"""Measured kernel tables as operator rows: the physics quantities of one kernel call.

Every row becomes the :class:`~rackmath.core.work.Work` of one call through the functions the
per-operator step uses (:mod:`rackmath.core.work`; attention FLOPs and cache bytes from the
attention registry, :mod:`rackmath.core.attention`), so a fitted curve is a fraction of exactly
the work the step charges (``tests/test_work_parity.py``). Per table kind (units SI; latencies
in the tables are ms):

* GEMM (m, n, k, dtype): :func:`~rackmath.core.work.gemm` of ``m`` rows through ``n k``
  weights stored at the format's bytes, reading ``k`` values (at its activation bytes, scales
  included) and writing ``n`` per row; rows = m, cols = n, depth = k.
* MoE grouped GEMM: ``num_tokens`` counts the whole EP group, so one GPU computes
  ``num_tokens * topk / ep`` token-expert pairs over ``mats`` matrices (3 gated, 2 non-gated)
  of ``hidden x inter / tp`` (:func:`~rackmath.core.work.grouped_gemm`); SGLang 0.5.10's
  tables timed ``min(ep, topk)`` times that many pairs (:func:`_pairs_factor`).
  ``balanced`` routing deals the ``num_tokens topk`` pairs out evenly, so ``min(E, num_tokens
  topk) / ep`` local experts are hit (2 tokens with top-2 of 8 experts hit 4, and the H100
  table's time doubles from 1 to 2 tokens), not the ``E/ep (1 - (1 - topk/E)^num_tokens)``
  that random routing hits (3.5), which the serving model uses for real traffic.
  rows = tokens per expert = ``num_tokens topk / E``; cols = inter/tp; depth = hidden.
  Only ``balanced`` routing rows are used (power-law rows measure a skewed load that the
  per-operator model does not describe, and the GB200 power-law rows run faster than the
  balanced ones, which a skewed load cannot do); where a shape is timed with several kernels
  only the fastest is kept (what the framework dispatches).
* Decode attention, GQA (``generation_attention``) and MLA (``generation_mla``, DeepSeek's
  latent of 512 + 64 read by every head): ``batch`` queries of ``num_heads`` local heads
  against ``L = isl + step`` cached tokens (or the window), through
  :func:`~rackmath.core.work.decode_attention`; rows = batch x KV heads (MLA: 1), cols = query
  heads per KV head, depth = L. The dtype key is the KV-cache dtype.
* Prefill attention, GQA (``context_attention``) and MLA (``context_mla``, decompressed:
  192-wide queries and keys, 128-wide values, a KV head per head): causal over ``isl`` tokens
  through :func:`~rackmath.core.work.prefill_attention`; rows = batch x isl, cols = the query
  width, depth = isl. The dtype key is the attention (compute) dtype.
* NCCL all-reduce on n GPUs of S = message_size x element bytes: ring wire bytes
  ``2 (n-1)/n S`` over the chip's scale-up link -> ``latency_s`` + ``bandwidth_frac``.
* DeepEP low-latency dispatch (fp8: 1 byte) / combine (bf16: 2 bytes) of
  ``num_token x topk x hidden`` elements, ``(ep-1)/ep`` of them leave the GPU (ep = 8 in
  one node) -> ``latency_s`` + ``bandwidth_frac`` of the scale-up link.

Rows that are not the operator's timing are recognised by physics and kept out of the fit (the
fit scores them apart, :class:`rackmath.analyses.kernel_fit.ChipData`): a call faster than its
bytes at the chip's HBM bandwidth did not stream them from HBM (operands L2-resident, or a kernel
that skipped work), a MoE call slower than a call doing a superset of its work is not the
kernel's time (:func:`_moe_slower_than_superset`), and a kernel whose EP-1 rows take its EP-2
time did not time EP-1 work (:func:`_moe_ep1_not_scaling`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rackmath.catalog import kernel_tables as kt
from rackmath.core import attention as attn
from rackmath.core import work as wk
from rackmath.core.efficiency import OpClass
from rackmath.specs.model import AttentionKind, AttentionSpec
from rackmath.specs.precision import kernel_format

DEEPEP_EP = 8  # DeepEP low-latency tables are one node (node_num 1) of 8 GPUs


@dataclass
class OpRows:
    """Measured kernel calls of one operator class: each call's work (every field an array over
    the rows, :class:`~rackmath.core.work.Work`), its format (``dtype``, a table dtype name) and
    kernel family (``kind``: ``gqa``/``mla`` attention, ``gated``/``nongated`` experts), its
    latency and a shape hash for the deterministic hold-out split. ``dims`` holds the table's
    shape dimensions whose whole values a validation holds out (:data:`HELD_OUT_DIMS`: a GEMM's
    ``m``; a MoE call's ``num_tokens`` and ``ep``; attention's ``batch`` and ``context``, a
    prompt's ``isl``), as the table states them."""

    op_class: OpClass
    dtype: np.ndarray
    kind: np.ndarray
    work: wk.Work
    latency_s: np.ndarray
    key: np.ndarray  # shape hash (uint64)
    dims: dict[str, np.ndarray] = field(default_factory=dict)

    def take(self, mask: np.ndarray) -> OpRows:
        parts = [None if x is None else np.asarray(x)[mask] for x in self.work]
        return OpRows(
            self.op_class,
            self.dtype[mask],
            self.kind[mask],
            wk.Work(*parts),  # type: ignore[arg-type]  # optional fields stay None
            self.latency_s[mask],
            self.key[mask],
            {k: v[mask] for k, v in self.dims.items()},
        )

    @staticmethod
    def concat(a: OpRows, b: OpRows) -> OpRows:
        def cat(x: np.ndarray | None, y: np.ndarray | None) -> np.ndarray | None:
            return None if x is None or y is None else np.concatenate([x, y])

        return OpRows(
            a.op_class,
            np.concatenate([a.dtype, b.dtype]),
            np.concatenate([a.kind, b.kind]),
            wk.Work(*(cat(x, y) for x, y in zip(a.work, b.work, strict=True))),  # type: ignore[arg-type]
            np.concatenate([a.latency_s, b.latency_s]),
            np.concatenate([a.key, b.key]),
            {k: np.concatenate([a.dims[k], b.dims[k]]) for k in a.dims if k in b.dims},
        )

    def __len__(self) -> int:
        return len(self.latency_s)

    # the work's fields, for readers of a row
    @property
    def rows(self) -> np.ndarray:
        return self.work.rows

    @property
    def cols(self) -> np.ndarray | None:
        return self.work.cols

    @property
    def depth(self) -> np.ndarray | None:
        return self.work.depth

    @property
    def flops(self) -> np.ndarray:
        return self.work.flops

    @property
    def bytes(self) -> np.ndarray:
        return self.work.bytes

    @property
    def routed(self) -> np.ndarray | None:
        return self.work.routed

    @property
    def tokens(self) -> np.ndarray | None:
        return self.work.tokens

    @property
    def ep(self) -> np.ndarray | None:
        return self.work.ep


def _rows_of(n: int, w: wk.Work) -> wk.Work:
    """``w`` with every field an array of ``n`` rows (scalars broadcast), so rows can be taken."""
    parts = (None if x is None else np.broadcast_to(np.asarray(x, float), (n,)).copy() for x in w)
    return wk.Work(*parts)  # type: ignore[arg-type]  # the optional fields stay None


def _op_rows(
    cls: OpClass,
    dtype: np.ndarray,
    kind: str | np.ndarray,
    w: wk.Work,
    df: Any,
    key: np.ndarray,
    dims: dict[str, np.ndarray] | None = None,
) -> OpRows:
    n = len(dtype)
    kinds = np.broadcast_to(np.asarray(kind, dtype=object), (n,)).astype(str)
    shape = {k: np.broadcast_to(np.asarray(v, float), (n,)).copy() for k, v in (dims or {}).items()}
    return OpRows(cls, dtype, kinds, _rows_of(n, w), _f(df, "latency") * 1e-3, key, shape)


#: The shape dimensions of each class whose whole values a validation holds out (one token
#: count, one EP degree, one context, one batch, one prompt length), as :attr:`OpRows.dims`
#: names them.
HELD_OUT_DIMS: dict[OpClass, tuple[str, ...]] = {
    OpClass.GEMM: ("m",),
    OpClass.MOE: ("num_tokens", "ep"),
    OpClass.ATTENTION_DECODE: ("context", "batch"),
    OpClass.ATTENTION_PREFILL: ("isl",),
}


def fit_groups(r: OpRows) -> list[tuple[str, str, np.ndarray]]:
    """``(dtype, kind, mask)`` of each curve the rows are fitted as: one per format and kernel
    family (GQA and MLA attention apart; gated and non-gated grouped expert GEMMs apart: a
    non-gated table kernel, TensorRT-LLM's ``nongated`` MoE, fitted with the gated rows of its
    dtype is 23% slower than that curve at the median on B200 NVFP4)."""
    return [
        (dt, k, m)
        for dt in sorted(set(r.dtype.tolist()))
        for k in sorted(set(r.kind.tolist()))
        if (m := (r.dtype == dt) & (r.kind == k)).any()
    ]


def _hash(df: Any, cols: list[str]) -> np.ndarray:
    import pandas as pd

    return pd.util.hash_pandas_object(df[cols].astype(str), index=False).to_numpy(np.uint64)


MOE_SHAPE = [c for c in kt.REQUIRED["moe"] if c not in ("distribution", "latency")]  # one MoE call's shape


def _fastest_kernel(df: Any) -> Any:
    """One row per MoE shape: the fastest of the kernels measured for it (Blackwell NVFP4 tables
    time ~70% of their shapes with two kernels, a throughput and a min-latency one, up to 11x
    apart; the framework dispatches the faster, so that is the operator's time). Gated and
    non-gated kernels are different operators and stay apart."""
    if "kernel_source" not in df or df.empty:
        return df
    gated = ~df["kernel_source"].astype(str).str.contains("nongated")
    keep = df.assign(_gated=gated).groupby([*MOE_SHAPE, "_gated"], sort=True)["latency"].idxmin()
    return df.loc[np.sort(keep.to_numpy())]


def _f(df: Any, col: str) -> np.ndarray:
    return df[col].to_numpy(float)


def _moe_rows(df: Any) -> OpRows:
    """Grouped expert GEMM rows of a MoE table (one row per measured call)."""
    tok, h, inter = _f(df, "num_tokens"), _f(df, "hidden_size"), _f(df, "inter_size")
    topk, e = _f(df, "topk"), _f(df, "num_experts")
    tp, ep = _f(df, "moe_tp_size"), _f(df, "moe_ep_size")
    src = df["kernel_source"].astype(str).to_numpy() if "kernel_source" in df else np.full(len(df), "")
    mats = np.where(np.char.find(src.astype(str), "nongated") >= 0, 2.0, 3.0)
    dt = df["moe_dtype"].astype(str).to_numpy()
    w, a = _format_bytes(dt)
    pairs_local = tok * topk * _pairs_factor(df, ep, topk) / ep
    # balanced routing deals the pairs out evenly, so min(E, pairs) distinct experts are hit
    work = wk.grouped_gemm(
        pairs_local,
        np.minimum(e, tok * topk) / ep,
        h,
        inter / tp,
        matrices=mats,
        weight_bytes_per_param=w,
        activation_bytes=a,
        tokens_per_expert=pairs_local * ep / e,
        routed=pairs_local * ep * h,  # every rank permutes and finalizes the EP group's pairs
        group_tokens=pairs_local * ep / topk,  # the EP group's tokens the rank's pairs come from
        ep=ep,
    )
    kind = np.where(mats == 3.0, "gated", "nongated")
    return _op_rows(
        OpClass.MOE, dt, kind, work, df, _hash(df, MOE_SHAPE), {"num_tokens": tok, "ep": ep}
    )


def _format_bytes(dtypes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Bytes per weight and per input activation element of each row's format (scales included,
    :data:`rackmath.specs.precision.FORMATS`)."""
    fmts = [kernel_format(str(d)) for d in dtypes]
    return np.array([f.weight_bytes for f in fmts]), np.array([f.activation_bytes for f in fmts])


# Tables whose one-GPU timing runs every token's top-k pairs on the rank's experts while
# ep <= topk (see :func:`_pairs_factor`): (framework, version), lower case.
LOCAL_TOPK_TABLES = frozenset({("sglang", "0.5.10")})


def _pairs_factor(df: Any, ep: np.ndarray, topk: np.ndarray) -> np.ndarray:
    """How many times the rank's share ``num_tokens topk / ep`` of the pairs a row's kernel ran:
    ``min(ep, topk)`` in the tables of :data:`LOCAL_TOPK_TABLES`, 1 elsewhere.

    SGLang 0.5.10's MoE tables (A100, H100, H200; every kernel) do not fall with EP while
    ep <= topk and halve per doubling after: at >= 4,096 tokens t(ep) / t(2 ep) is 1.00-1.10
    below topk, 1.59-1.61 from EP 8 to 16 at top-10 (law: (8/8) / (10/16) = 1.60), 1.33 from
    EP 4 to 8 at top-6 (law 1.33), 1.48-1.51 from 16 to 32 at top-22 (law 1.45) and 1.9-2.0
    beyond topk (law 2). TensorRT-LLM and SGLang 0.5.14 tables fall 1.5-1.9x per doubling
    from EP 1. Read as work, an A100 at EP 8 runs a DeepSeek-V3-shaped call of 16,384 tokens in
    149 ms, which is 25% of its bf16 peak with the factor and 3% without."""
    if "framework" not in df or "version" not in df:
        return np.ones(len(df))
    table = df["framework"].astype(str).str.lower() + " " + df["version"].astype(str)
    local = table.isin([f"{f} {v}" for f, v in LOCAL_TOPK_TABLES]).to_numpy()
    return np.where(local, np.minimum(ep, topk), 1.0)


SUPERSET_TOLERANCE = 1.3  # x the fastest superset's latency ...
SUPERSET_SLACK_S = 10e-6  # ... plus this, before a row counts as slower than work it contains


def _moe_slower_than_superset(df: Any) -> np.ndarray:
    """Rows that take longer than a call doing all of their work and more (same kernel and
    model shape, at least as many tokens, no more TP and no more EP ways: every local expert,
    column and token pair of the row is also there), by more than
    ``SUPERSET_TOLERANCE x + SUPERSET_SLACK_S``. Such a timing is not the operator's (an H100
    bf16 table has EP 4 at 5.0 ms where EP 2, which holds twice the experts, takes 2.1 ms)."""
    out = np.zeros(len(df), bool)
    if df.empty:
        return out
    gated = ~df["kernel_source"].astype(str).str.contains("nongated") if "kernel_source" in df else True
    d = df.assign(_gated=gated, _i=np.arange(len(df)))
    shape = ["moe_dtype", "_gated", "hidden_size", "inter_size", "num_experts", "topk"]
    for _, g in d.groupby(shape, sort=False):
        tok, tp, ep = _f(g, "num_tokens"), _f(g, "moe_tp_size"), _f(g, "moe_ep_size")
        lat = _f(g, "latency") * 1e-3
        superset = (
            (tok[None, :] >= tok[:, None]) & (tp[None, :] <= tp[:, None]) & (ep[None, :] <= ep[:, None])
        )
        np.fill_diagonal(superset, False)
        fastest = np.where(superset, lat[None, :], np.inf).min(axis=1)
        out[g["_i"].to_numpy()] = lat > SUPERSET_TOLERANCE * fastest + SUPERSET_SLACK_S
    return out


# The median t(EP 1) / t(EP 2) a kernel's EP-1 rows must reach at >= EP_SCALING_TOKENS tokens
# (every expert hit, so the weights or FLOPs dominate the floor) where EP 1 runs twice the pairs
# of EP 2; w / 2 of it where it runs w times (:func:`_moe_ep1_not_scaling`).
EP_SCALING_MIN = 1.2
EP_SCALING_TOKENS = 256.0


def _moe_candidates(df: Any, hbm_bytes_per_s: float) -> Any:
    """The balanced-routing rows a MoE timing may come from: without the EP-1 rows of a kernel
    that timed EP-2 work, and (with a bandwidth) without calls faster than HBM allows, so that an
    impossible timing never wins the fastest-kernel choice."""
    df = df[df["distribution"].astype(str) == "balanced"]
    df = df[~_moe_ep1_not_scaling(df)]
    df = df[_dispatched(df)]
    if hbm_bytes_per_s:
        r = _moe_rows(df)
        df = df[r.latency_s >= r.bytes / hbm_bytes_per_s]
    return df


# Kernels a framework dispatches only up to a number of tokens per call (an EP group's, after
# attention-DP gathering): TensorRT-LLM takes its NVFP4 min-latency MoE at <= 128 tokens
# (``DeepseekV3DecoderLayer._enable_min_latency_mode``); its tables time it up to 16,384.
DISPATCH_MAX_TOKENS = {"min_latency": 128.0}


def _dispatched(df: Any) -> np.ndarray:
    """Rows of a kernel the framework runs at the row's token count (:data:`DISPATCH_MAX_TOKENS`).
    A kernel timed beyond its dispatch range is not what the operator runs there: kept, it
    wins the fastest-kernel choice at shapes where the framework runs the other kernel."""
    keep = np.ones(len(df), bool)
    if df.empty or "kernel_source" not in df:
        return keep
    src = df["kernel_source"].astype(str)
    for name, most in DISPATCH_MAX_TOKENS.items():
        keep &= ~(src.str.contains(name).to_numpy() & (_f(df, "num_tokens") > most))
    return keep


def _moe_ep1_not_scaling(df: Any) -> np.ndarray:
    """EP-1 rows of a kernel whose EP-1 timings do not measure EP-1 work: at >= 256 tokens
    every expert is hit, so EP 1 streams twice the weights of EP 2 and runs ``w = pairs(EP 1) /
    pairs(EP 2)`` times its pairs (2 where ``num_tokens`` counts the EP group's tokens, 1 in a
    table whose rank runs every token's top-k pairs, :func:`_pairs_factor`), and a kernel that
    does its work takes at least ``EP_SCALING_MIN w / 2`` as long (every kernel of the Blackwell
    tables, w = 2: median 1.74-1.81). A kernel whose median ratio over its shapes falls short
    timed the EP-2 work at EP 1 (TensorRT-LLM 1.3's NVFP4 min-latency kernel on B200 and GB200:
    1.00 over 1,944 shape pairs), so its EP-1 rows are not the operator's timing."""
    out = np.zeros(len(df), bool)
    if df.empty or "kernel_source" not in df:
        return out
    shape = [c for c in MOE_SHAPE if c != "moe_ep_size"]
    ep = _f(df, "moe_ep_size")
    d = df.assign(_i=np.arange(len(df)), _work=_pairs_factor(df, ep, _f(df, "topk")) / ep)
    for _, g in d.groupby(["kernel_source", "moe_dtype"], sort=False, observed=True):
        big = g[_f(g, "num_tokens") >= EP_SCALING_TOKENS]
        # a shape timed twice (vLLM 0.19.0's H200 table mixes 0.19.0 and 0.19.1 rows): its median
        ep1 = big[_f(big, "moe_ep_size") == 1].groupby(shape, observed=True)[["latency", "_work"]].median()
        ep2 = big[_f(big, "moe_ep_size") == 2].groupby(shape, observed=True)[["latency", "_work"]].median()
        ratio = (ep1["latency"] / ep2["latency"]).dropna()
        work = (ep1["_work"] / ep2["_work"]).reindex(ratio.index)
        if len(ratio) and float(np.median(ratio / work)) < EP_SCALING_MIN / 2:
            out[g["_i"].to_numpy()[_f(g, "moe_ep_size") == 1]] = True
    return out


def table_rows(df: Any, hbm_bytes_per_s: float = 0.0, physical: bool = True) -> dict[OpClass, OpRows]:
    """Turn a checked table (see :func:`kernel_tables.read_table`) into operator rows.

    With ``hbm_bytes_per_s``, MoE timings faster than their bytes at that bandwidth are dropped
    before the fastest kernel of each shape is chosen (:class:`ChipData` drops them for every
    class); so are the EP-1 rows of a kernel that timed EP-2 work (:func:`_moe_ep1_not_scaling`)
    and, after the choice, MoE timings slower than a superset of their work
    (:func:`_moe_slower_than_superset`). ``physical=False`` keeps every row."""
    kind = df.attrs.get("kind")
    out: dict[OpClass, OpRows] = {}
    if kind == "gemm":
        m, n, k = _f(df, "m"), _f(df, "n"), _f(df, "k")
        dt = df["gemm_dtype"].astype(str).to_numpy()
        w, a = _format_bytes(dt)
        work = wk.gemm(
            m,
            n * k,
            n,
            k,
            weight_bytes_per_param=w,
            activation_bytes=a,
            in_values=k,
            out_values=n,
        )
        key = _hash(df, ["gemm_dtype", "m", "n", "k"])
        out[OpClass.GEMM] = _op_rows(OpClass.GEMM, dt, "", work, df, key, {"m": m})
    elif kind == "moe":
        if physical:
            df = _moe_candidates(df, hbm_bytes_per_s)
        else:
            df = df[df["distribution"].astype(str) == "balanced"]
        df = _fastest_kernel(df)
        if physical:
            df = df[~_moe_slower_than_superset(df)]
        out[OpClass.MOE] = _moe_rows(df)
    elif kind == "memcpy":
        nbytes = _f(df, "bytes")
        work = wk.elementwise(2 * nbytes, nbytes / 2)
        dt = np.full(len(df), "bfloat16")
        out[OpClass.ELEMENTWISE] = _op_rows(OpClass.ELEMENTWISE, dt, "", work, df, _hash(df, ["bytes"]))
    elif kind in ("generation_attention", "context_attention", "attention"):
        names = df["op_name"].astype(str).to_numpy() if "op_name" in df else None
        for name, cls in (
            ("generation_attention", OpClass.ATTENTION_DECODE),
            ("context_attention", OpClass.ATTENTION_PREFILL),
        ):
            sub = df if kind == name else (df[names == name] if names is not None else df.iloc[:0])
            if len(sub):
                out[cls] = _attention_rows(sub, cls)
    elif kind in ("generation_mla", "context_mla", "mla"):
        names = (
            df["op_name"].astype(str).to_numpy() if "op_name" in df else np.full(len(df), "mla_generation")
        )
        for name, cls in (
            ("generation_mla", OpClass.ATTENTION_DECODE),
            ("context_mla", OpClass.ATTENTION_PREFILL),
        ):
            sub = (
                df
                if kind == name
                else df[names == {"generation_mla": "mla_generation"}.get(name, "mla_context")]
            )
            if len(sub):
                out[cls] = _mla_rows(sub, cls)
    return out


def moe_kernels(df: Any, hbm_bytes_per_s: float) -> dict[str, dict[str, OpRows]]:
    """Gated grouped-GEMM rows per kernel, for each MoE dtype timed with two or more gated
    kernels: ``{dtype: {kernel_source: rows}}``, each kernel's own physically possible rows (the
    rules of :func:`table_rows`, applied per kernel). The fit gives each kernel its curve and
    the operator runs the faster (:attr:`OpEfficiency.alternative`)."""
    if df.attrs.get("kind") != "moe" or "kernel_source" not in df:
        return {}
    df = _moe_candidates(df, hbm_bytes_per_s)
    df = df[~df["kernel_source"].astype(str).str.contains("nongated")]
    out: dict[str, dict[str, OpRows]] = {}
    for dt, by_dtype in df.groupby("moe_dtype", sort=True, observed=True):
        sources = sorted(by_dtype["kernel_source"].astype(str).unique())
        if len(sources) < 2:
            continue
        for source in sources:
            k = by_dtype[by_dtype["kernel_source"].astype(str) == source]
            out.setdefault(str(dt), {})[source] = _moe_rows(k[~_moe_slower_than_superset(k)])
    return out


def _attention_rows(df: Any, cls: OpClass) -> OpRows:
    """GQA/MHA rows: each distinct (heads, KV heads, head dim) is an attention spec of the
    registry, whose FLOPs per visible key and cache values per token the rows use."""
    b, isl = _f(df, "batch_size"), _f(df, "isl")
    heads, kvh, hd, win = (
        _f(df, "num_heads"),
        _f(df, "num_key_value_heads"),
        _f(df, "head_dim"),
        _f(df, "window_size"),
    )
    kv_bytes = np.array([kernel_format(d).activation_bytes for d in df["kv_cache_dtype"].astype(str)])
    cols = [c for c in kt.REQUIRED["context_attention"] if c != "latency"]  # one call's shape
    decode = cls is OpClass.ATTENTION_DECODE
    # beyond the group the kernel shares a KV head over, every query head reads its own
    read_heads = np.where(_unshared_group(df, heads / kvh), heads, kvh) if decode else kvh
    per_key_flops, per_key_values = _per_key(heads, read_heads, hd, decode)
    if decode:
        ctx = isl + (_f(df, "step") if "step" in df else 0.0)
        ctx = np.where(win > 0, np.minimum(ctx, win), ctx)
        work = wk.decode_attention(
            b,
            heads,
            read_heads,
            hd,
            hd,
            ctx,
            flops=b * ctx * per_key_flops,
            kv_read_bytes=b * ctx * per_key_values * kv_bytes,
        )
        dt = df["kv_cache_dtype"].astype(str).to_numpy()
        shape = {"context": isl + (_f(df, "step") if "step" in df else 0.0), "batch": b}  # as timed
        return _op_rows(cls, dt, "gqa", work, df, _hash(df, [*cols, "step"]), shape)
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
    )
    dt = df["attn_dtype"].astype(str).to_numpy()
    return _op_rows(cls, dt, "gqa", work, df, _hash(df, cols), {"isl": isl})


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


def _mla_rows(df: Any, cls: OpClass) -> OpRows:
    """MLA rows (``generation_mla``, ``context_mla``): ``num_heads`` is the local head count
    (``tp_size`` only labels the row), the attended context ``isl + step``. Decode is absorbed:
    every head scores the 576-wide cached latent and sums 512-wide values, one latent read per
    sequence (:func:`rackmath.core.attention.flops_per_visible_token`); prefill runs
    decompressed (192-wide queries and keys, 128-wide values, one KV head per head)."""
    b, isl, heads = _f(df, "batch_size"), _f(df, "isl"), _f(df, "num_heads")
    step = _f(df, "step")
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
        return _op_rows(cls, dt, "mla", work, df, _hash(df, cols), {"context": ctx, "batch": b})
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
    )
    dt = df["mla_dtype"].astype(str).to_numpy()
    return _op_rows(cls, dt, "mla", work, df, _hash(df, cols), {"isl": isl})


# The most query heads per KV head TensorRT-LLM's decode attention reads one KV head for
# (:func:`_unshared_group`).
TRTLLM_SHARED_GROUP_MAX = 32.0


def _unshared_group(df: Any, group: np.ndarray) -> np.ndarray:
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


@dataclass
class CommRows:
    """Measured collective calls: bytes each chip sends over its link, and the latency."""

    name: str
    wire_bytes: np.ndarray
    latency_s: np.ndarray
    key: np.ndarray
    chips: np.ndarray

    def take(self, mask: np.ndarray) -> CommRows:
        return CommRows(
            self.name, self.wire_bytes[mask], self.latency_s[mask], self.key[mask], self.chips[mask]
        )


def comm_rows(df: Any) -> dict[str, CommRows]:
    kind = df.attrs.get("kind")
    out: dict[str, CommRows] = {}
    if kind == "nccl":
        ar = df[df["op_name"].astype(str) == "all_reduce"]
        n = _f(ar, "num_gpus")
        elem = np.array([kt.DTYPE_BYTES[d][1] for d in ar["nccl_dtype"].astype(str)])
        s = _f(ar, "message_size") * elem
        out["all_reduce"] = CommRows(
            "all_reduce",
            2 * (n - 1) / n * s,
            _f(ar, "latency") * 1e-3,
            _hash(ar, ["nccl_dtype", "num_gpus", "message_size"]),
            n,
        )
    elif kind == "deepep_ll":
        one = df[_f(df, "node_num") == 1]
        elems = _f(one, "num_token") * _f(one, "num_topk") * _f(one, "hidden_size")
        leave = (DEEPEP_EP - 1) / DEEPEP_EP
        key = _hash(one, ["hidden_size", "num_token", "num_topk", "num_experts"])
        ep = np.full(len(one), float(DEEPEP_EP))
        dispatch_s, combine_s = _f(one, "dispatch_avg_t_us") * 1e-6, _f(one, "combine_avg_t_us") * 1e-6
        out["dispatch"] = CommRows("dispatch", elems * 1.0 * leave, dispatch_s, key, ep)  # fp8
        out["combine"] = CommRows("combine", elems * 2.0 * leave, combine_s, key, ep)  # bf16
    return out
