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
  against ``L = isl + step`` cached tokens, through
  :func:`~rackmath.core.work.decode_attention`; rows = batch x KV heads (MLA: 1), cols = query
  heads per KV head, depth = L. A sliding window ``w`` bounds the keys read (FLOPs and bytes on
  ``min(L, w)``), not the depth: the kernel splits the whole cache, as the step's work does.
  The dtype key is the KV-cache dtype.
* Prefill attention, GQA (``context_attention``) and MLA (``context_mla``, decompressed:
  192-wide queries and keys, 128-wide values, a KV head per head): causal over ``isl`` tokens
  through :func:`~rackmath.core.work.prefill_attention`; rows = batch x isl, cols = the query
  width, depth = isl. The dtype key is the attention (compute) dtype.
* DSA module tables (``dsa_generation_module``, ``dsa_context_module``): a whole attention
  module per row, the ``attention`` operator of family ``dsa`` with the module's projections
  as companion GEMMs timed on the chip's own GEMM curves
  (:mod:`rackmath.analyses.kernels.dsa_rows`).
* Collectives (NCCL all-reduce, all-gather, reduce-scatter and all-to-all; TensorRT-LLM's
  custom all-reduce; DeepEP low-latency and normal dispatch and combine): each row's wire
  bytes per chip from the step's own work functions (:mod:`rackmath.core.work`) over the
  chip's scale-up link -> ``latency_s``, ``hop_latency_s``, ``bandwidth_frac``, the pipelined
  collectives' ``pipeline_latency_s``, on the PCIe hosts (``kernel_tables.PCIE_HOSTS``)
  ``group_bandwidth_power`` and on DeepEP's low-latency kernels ``sm_token_s`` (one SM per
  expert walks the rank's tokens in turn) (:class:`~rackmath.specs.efficiency.CollectiveEfficiency`,
  timed by :func:`rackmath.core.efficiency.collective_timing`; fitted by
  :mod:`rackmath.analyses.kernels.comm_fit`; :func:`comm_rows` says how each table reads).

Rows that are not the operator's timing are recognised by physics and kept out of the fit (the
fit scores them apart, :class:`rackmath.analyses.kernels.fit.ChipData`): a call faster than its
bytes at the chip's HBM bandwidth did not stream them from HBM (operands L2-resident, or a kernel
that skipped work) unless its table replayed it warm within the L2, on a class whose tables show
the L2 as a step (MoE and prefill attention, not GEMM:
:data:`rackmath.analyses.kernels.op_rows.FASTER_FROM_L2_CLASSES`,
:meth:`~rackmath.analyses.kernels.op_rows.OpRows.possible`),
a MoE call slower than a call doing a superset of its work is not the kernel's time
(:func:`_moe_slower_than_superset`), and a kernel whose EP-1 rows take its EP-2 time did not
time EP-1 work (:func:`_moe_ep1_not_scaling`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from rackmath.analyses.kernels import attention_rows, dsa_rows
from rackmath.analyses.kernels.op_rows import OpRows, floats, op_rows_of, shape_hash
from rackmath.catalog import kernel_tables as kt
from rackmath.core import collectives as coll
from rackmath.core import work as wk
from rackmath.specs.efficiency import HEAD_SIZED, OpClass
from rackmath.specs.precision import kernel_format


def fit_groups(r: OpRows) -> list[tuple[str, str, int, np.ndarray]]:
    """``(dtype, kind, head_dim, mask)`` of each curve the rows are fitted as: one per format
    and kernel family (GQA and MLA attention apart; gated and non-gated grouped expert GEMMs
    apart: a non-gated table kernel, TensorRT-LLM's ``nongated`` MoE, fitted with the gated rows
    of its dtype is 23% slower than that curve at the median on B200 NVFP4), and for the
    families fitted per head size (:data:`rackmath.specs.efficiency.HEAD_SIZED`: GQA prefill,
    whose rows' columns are the head size) one per head size; ``head_dim`` 0 elsewhere."""
    groups: list[tuple[str, str, int, np.ndarray]] = []
    for dt in sorted(set(r.dtype.tolist())):
        for k in sorted(set(r.kind.tolist())):
            m = (r.dtype == dt) & (r.kind == k)
            if not m.any():
                continue
            cols = r.cols
            if (r.op_class, k) not in HEAD_SIZED or cols is None:
                groups.append((dt, k, 0, m))
                continue
            for size in np.unique(cols[m]):
                groups.append((dt, k, int(size), m & (cols == size)))
    return groups


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


def _moe_rows(df: Any) -> OpRows:
    """Grouped expert GEMM rows of a MoE table (one row per measured call)."""
    tok, h, inter = (
        floats(df, "num_tokens"),
        floats(df, "hidden_size"),
        floats(df, "inter_size"),
    )
    topk, e = floats(df, "topk"), floats(df, "num_experts")
    tp, ep = floats(df, "moe_tp_size"), floats(df, "moe_ep_size")
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
    return op_rows_of(
        OpClass.MOE, dt, kind, work, df, shape_hash(df, MOE_SHAPE), {"num_tokens": tok, "ep": ep}
    )


def _format_bytes(dtypes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Bytes per weight and per input activation element of each row's format (scales included,
    :data:`rackmath.specs.precision.FORMATS`)."""
    fmts = [kernel_format(str(d)) for d in dtypes]
    return np.array([f.weight_bytes for f in fmts]), np.array([f.activation_bytes for f in fmts])


# Tables whose one-GPU timing runs every token's top-k pairs on the rank's experts while
# ep <= topk (see :func:`_pairs_factor`): (framework, version), lower case.
LOCAL_TOPK_TABLES = frozenset({("sglang", "0.5.10")})
# Kernels whose timing runs every token's top-k pairs on the rank, at any EP (see
# :func:`_pairs_factor`).
EVERY_PAIR_KERNELS = frozenset({"moe_torch_flow_triton_fp8_block"})


def _pairs_factor(df: Any, ep: np.ndarray, topk: np.ndarray) -> np.ndarray:
    """How many times the rank's share ``num_tokens topk / ep`` of the pairs a row's kernel ran:
    ``ep`` (every pair) for the kernels of :data:`EVERY_PAIR_KERNELS`, ``min(ep, topk)`` in the
    tables of :data:`LOCAL_TOPK_TABLES`, 1 elsewhere.

    TensorRT-LLM 1.3.0rc20's Triton FP8-block MoE on the RTX PRO 6000 takes as long at EP 256 as
    at EP 1 once the pairs outweigh the weights (DeepSeek-V3's shape at 16,384 tokens: 60.9 ms at
    EP 1, 60.0 ms at EP 256; t(EP 1) / t(EP max) at >= 4,096 tokens, median over 70 shapes: 1.00,
    against 2.3-108 for every other kernel of every table), while its small calls still fall
    with EP (1 token: 379 us -> 83 us, the local experts' weights): its rows ran every pair on
    the rank's experts.

    SGLang 0.5.10's MoE tables (A100, H100, H200; every kernel) do not fall with EP while
    ep <= topk and halve per doubling after: at >= 4,096 tokens t(ep) / t(2 ep) is 1.00-1.10
    below topk, 1.59-1.61 from EP 8 to 16 at top-10 (law: (8/8) / (10/16) = 1.60), 1.33 from
    EP 4 to 8 at top-6 (law 1.33), 1.48-1.51 from 16 to 32 at top-22 (law 1.45) and 1.9-2.0
    beyond topk (law 2). TensorRT-LLM and SGLang 0.5.14 tables fall 1.5-1.9x per doubling
    from EP 1. Read as work, an A100 at EP 8 runs a DeepSeek-V3-shaped call of 16,384 tokens in
    149 ms, which is 25% of its bf16 peak with the factor and 3% without."""
    every = np.zeros(len(df), bool)
    if "kernel_source" in df:
        every = df["kernel_source"].astype(str).isin(EVERY_PAIR_KERNELS).to_numpy()
    if "framework" not in df or "version" not in df:
        return np.where(every, ep, 1.0)
    table = df["framework"].astype(str).str.lower() + " " + df["version"].astype(str)
    local = table.isin([f"{f} {v}" for f, v in LOCAL_TOPK_TABLES]).to_numpy()
    return np.where(every, ep, np.where(local, np.minimum(ep, topk), 1.0))


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
        tok, tp, ep = (
            floats(g, "num_tokens"),
            floats(g, "moe_tp_size"),
            floats(g, "moe_ep_size"),
        )
        lat = floats(g, "latency") * 1e-3
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


def _moe_candidates(df: Any, hbm_bytes_per_s: float, warm_bytes: float = 0.0) -> Any:
    """The balanced-routing rows a MoE timing may come from: without the EP-1 rows of a kernel
    that timed EP-2 work, and (with a bandwidth) without calls faster than HBM allows (from the
    L2 of ``warm_bytes`` where the table replayed them warm: :meth:`OpRows.possible`), so that an
    impossible timing never wins the fastest-kernel choice."""
    df = df[df["distribution"].astype(str) == "balanced"]
    df = df[~_moe_ep1_not_scaling(df)]
    df = df[_dispatched(df)]
    if hbm_bytes_per_s:
        r = replace(_moe_rows(df), warm_bytes=np.full(len(df), warm_bytes) if warm_bytes else None)
        df = df[r.possible(hbm_bytes_per_s)]
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
        keep &= ~(src.str.contains(name).to_numpy() & (floats(df, "num_tokens") > most))
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
    ep = floats(df, "moe_ep_size")
    d = df.assign(_i=np.arange(len(df)), _work=_pairs_factor(df, ep, floats(df, "topk")) / ep)
    for _, g in d.groupby(["kernel_source", "moe_dtype"], sort=False, observed=True):
        big = g[floats(g, "num_tokens") >= EP_SCALING_TOKENS]
        # a shape timed twice (vLLM 0.19.0's H200 table mixes 0.19.0 and 0.19.1 rows): its median
        ep1 = (
            big[floats(big, "moe_ep_size") == 1].groupby(shape, observed=True)[["latency", "_work"]].median()
        )
        ep2 = (
            big[floats(big, "moe_ep_size") == 2].groupby(shape, observed=True)[["latency", "_work"]].median()
        )
        ratio = (ep1["latency"] / ep2["latency"]).dropna()
        work = (ep1["_work"] / ep2["_work"]).reindex(ratio.index)
        if len(ratio) and float(np.median(ratio / work)) < EP_SCALING_MIN / 2:
            out[g["_i"].to_numpy()[floats(g, "moe_ep_size") == 1]] = True
    return out


def table_rows(
    df: Any,
    hbm_bytes_per_s: float = 0.0,
    physical: bool = True,
    dsa_gathers_top_k: bool = False,
    warm_bytes: float = 0.0,
) -> dict[OpClass, OpRows]:
    """Turn a checked table (see :func:`kernel_tables.read_table`) into operator rows.

    With ``hbm_bytes_per_s``, MoE timings faster than their bytes at that bandwidth (a call within
    an L2 of ``warm_bytes`` that the table replayed warm may be faster: :meth:`OpRows.possible`)
    are dropped before the fastest kernel of each shape is chosen (:class:`ChipData` drops them
    for every class); so are the EP-1 rows of a kernel that timed EP-2 work
    (:func:`_moe_ep1_not_scaling`) and, after the choice, MoE timings slower than a superset of
    their work (:func:`_moe_slower_than_superset`). ``physical=False`` keeps every row."""
    kind = df.attrs.get("kind")
    out: dict[OpClass, OpRows] = {}
    if kind == "gemm":
        m, n, k = floats(df, "m"), floats(df, "n"), floats(df, "k")
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
        key = shape_hash(df, ["gemm_dtype", "m", "n", "k"])
        out[OpClass.GEMM] = op_rows_of(OpClass.GEMM, dt, "", work, df, key, {"m": m})
    elif kind == "moe":
        if physical:
            df = _moe_candidates(df, hbm_bytes_per_s, warm_bytes)
        else:
            df = df[df["distribution"].astype(str) == "balanced"]
        df = _fastest_kernel(df)
        if physical:
            df = df[~_moe_slower_than_superset(df)]
        out[OpClass.MOE] = _moe_rows(df)
    elif kind == "memcpy":
        nbytes = floats(df, "bytes")
        work = wk.elementwise(2 * nbytes, nbytes / 2)
        dt = np.full(len(df), "bfloat16")
        out[OpClass.ELEMENTWISE] = op_rows_of(
            OpClass.ELEMENTWISE, dt, "", work, df, shape_hash(df, ["bytes"])
        )
    elif kind in ("generation_attention", "context_attention", "attention"):
        names = df["op_name"].astype(str).to_numpy() if "op_name" in df else None
        for name, cls in (
            ("generation_attention", OpClass.ATTENTION_DECODE),
            ("context_attention", OpClass.ATTENTION_PREFILL),
        ):
            sub = df if kind == name else (df[names == name] if names is not None else df.iloc[:0])
            if len(sub):
                out[cls] = attention_rows.attention_rows(sub, cls)
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
                out[cls] = attention_rows.mla_rows(sub, cls)
    elif kind in ("dsa_generation_module", "dsa_context_module", "dsa"):
        names = df["op_name"].astype(str).to_numpy() if "op_name" in df else np.full(len(df), kind)
        for name, cls in (
            ("dsa_generation_module", OpClass.ATTENTION_DECODE),
            ("dsa_context_module", OpClass.ATTENTION_PREFILL),
        ):
            sub = df if kind == name else df[names == name]
            if len(sub):
                r = dsa_rows.dsa_rows(sub, cls, dsa_gathers_top_k and cls is OpClass.ATTENTION_PREFILL)
                if len(r):
                    out[cls] = r
    return out


def moe_kernels(df: Any, hbm_bytes_per_s: float, warm_bytes: float = 0.0) -> dict[str, dict[str, OpRows]]:
    """Gated grouped-GEMM rows per kernel, for each MoE dtype timed with two or more gated
    kernels: ``{dtype: {kernel_source: rows}}``, each kernel's own physically possible rows (the
    rules of :func:`table_rows`, applied per kernel). The fit gives each kernel its curve and
    the operator runs the faster (:attr:`OpEfficiency.alternative`)."""
    if df.attrs.get("kind") != "moe" or "kernel_source" not in df:
        return {}
    df = _moe_candidates(df, hbm_bytes_per_s, warm_bytes)
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


@dataclass
class CommRows:
    """Measured calls of one collective implementation (``"<collective>:<implementation>"``):
    the bytes each chip puts on its link, the message each rank contributes, the group size
    and the latency (SI), one row per measured shape (repeated shapes as their median). Expert
    exchanges also carry their routed experts (``experts``; 0 elsewhere) and the tokens the
    busiest SM handles in turn (``sm_tokens``, DeepEP low-latency only; 0 elsewhere)."""

    name: str
    wire_bytes: np.ndarray
    latency_s: np.ndarray
    key: np.ndarray
    chips: np.ndarray
    message_bytes: np.ndarray
    experts: np.ndarray | None = None
    sm_tokens: np.ndarray | None = None

    def __post_init__(self) -> None:
        zero = np.zeros(len(self.latency_s))
        self.experts = zero if self.experts is None else self.experts
        self.sm_tokens = zero if self.sm_tokens is None else self.sm_tokens

    def take(self, mask: np.ndarray) -> CommRows:
        return CommRows(
            self.name,
            self.wire_bytes[mask],
            self.latency_s[mask],
            self.key[mask],
            self.chips[mask],
            self.message_bytes[mask],
            np.asarray(self.experts)[mask],
            np.asarray(self.sm_tokens)[mask],
        )


#: GPUs in one node of the DeepEP tables (``node_num`` 1), by chip: an 8-GPU HGX board, a
#: 4-GPU GB200 / GB300 compute tray (the same hosts' NCCL tables stop at 4 GPUs, and the
#: ``moe_a2a`` tables of these chips say ``ep_size`` 4).
DEEPEP_RANKS: dict[str, float] = {"gb200": 4.0, "gb300": 4.0}
DEEPEP_EP = 8.0  # every other chip with DeepEP tables (H100, H200, B200, B300)
#: A custom all-reduce row slower than this fraction of NCCL's time at the same shape did not
#: run the custom kernel: TensorRT-LLM's AUTO strategy hands large messages to NCCL, and there
#: the two tables agree (H100, 8 GPUs, 16 Mi elements: 0.197 ms custom, 0.200 ms NCCL).
CUSTOM_OWN_KERNEL_FRAC = 0.9
#: NCCL's ``op_name`` -> the collective's name (and the work that describes one call).
NCCL_OPS: dict[str, str] = {
    "all_reduce": "all_reduce",
    "all_gather": "all_gather",
    "reduce_scatter": "reduce_scatter",
    "alltoall": "all_to_all",
}
#: Each NCCL collective's work from its message and ranks (one description: ``core/work.py``).
_NCCL_WORK: dict[str, Callable[[Any, Any], wk.CommWork]] = {
    "all_reduce": wk.all_reduce,
    "all_gather": wk.all_gather,
    "reduce_scatter": wk.reduce_scatter,
    "alltoall": wk.all_to_all,
}


def _median_shapes(df: Any, shape: list[str], latency: list[str]) -> Any:
    """One row per shape, each latency column at its median over the shape's repeats (the
    NCCL 2.29.2 tables time several shapes 2-5 times, up to 1.35x apart)."""
    if df.empty:
        return df
    return df.groupby(shape, sort=True, observed=True, as_index=False)[latency].median()


def _comm(
    name: str, w: wk.CommWork, latency_s: np.ndarray, key: np.ndarray, experts: np.ndarray | None = None
) -> CommRows:
    zero = np.zeros(len(latency_s))
    return CommRows(
        name,
        np.asarray(w.wire_bytes, float),
        latency_s,
        key,
        np.asarray(w.ranks, float) + zero,
        np.asarray(w.message_bytes, float),
        experts,
        np.asarray(w.sm_tokens, float) + zero,
    )


def _element_bytes(dtypes: Any) -> np.ndarray:
    return np.array([kernel_format(d).activation_bytes for d in dtypes.astype(str)])


def custom_own_kernel(custom: Any, nccl: Any | None) -> np.ndarray:
    """Rows of a custom all-reduce table (its AUTO strategy, ``kernel_source`` TRTLLM) that ran
    the custom kernel: faster than :data:`CUSTOM_OWN_KERNEL_FRAC` of the NCCL all-reduce of the
    same GPU count, element count and dtype in ``nccl`` (the chip's NCCL table). A row with no
    NCCL twin is kept only below the largest message a twin shows the custom kernel running
    at. Without an NCCL table every row is kept."""
    if nccl is None or custom.empty:
        return np.ones(len(custom), bool)
    ref = nccl[nccl["op_name"].astype(str) == "all_reduce"]
    shape = ["dtype", "num_gpus", "message_size"]
    ref = _median_shapes(ref.rename(columns={"nccl_dtype": "dtype"}), shape, ["latency"])
    dtype = custom["allreduce_dtype"].astype(str).replace({"bfloat16": "half", "float16": "half"})
    twin = custom.assign(dtype=dtype.to_numpy()).merge(ref, on=shape, how="left", suffixes=("", "_nccl"))
    nccl_s = twin["latency_nccl"].to_numpy(float)
    own = twin["latency"].to_numpy(float) < CUSTOM_OWN_KERNEL_FRAC * nccl_s
    known = np.isfinite(nccl_s)
    size = floats(twin, "message_size")
    largest = size[own].max() if own.any() else 0.0
    return np.where(known, own, size <= largest)


def _destination_ranks(ranks: float, experts: np.ndarray, topk: np.ndarray) -> np.ndarray:
    """:func:`rackmath.core.collectives.expected_destination_ranks` per row (``k`` varies)."""
    out = np.empty(len(experts))
    for k in np.unique(topk):
        at = topk == k
        out[at] = coll.expected_destination_ranks(ranks, experts[at], int(k))
    return out


def comm_rows(df: Any, deepep_ranks: float = DEEPEP_EP, nccl: Any | None = None) -> dict[str, CommRows]:
    """A checked collective table (:func:`kernel_tables.read_table`) as collective calls, one
    :class:`CommRows` per ``"<collective>:<implementation>"``; every row's work is the step's
    (:mod:`rackmath.core.work`), its latency in seconds.

    * NCCL (``message_size`` elements of ``nccl_dtype``): ``all_reduce:nccl`` (ring),
      ``all_gather:nccl``, ``reduce_scatter:nccl``, ``all_to_all:nccl``.
    * TensorRT-LLM's custom all-reduce (AUTO strategy rows, ``kernel_source`` TRTLLM): the rows
      that ran the custom kernel (:func:`custom_own_kernel`, against the chip's ``nccl`` table),
      on one-shot bytes (:func:`rackmath.core.work.one_shot_all_reduce`): ``all_reduce:custom``.
    * DeepEP low-latency, one node of ``deepep_ranks`` GPUs (:data:`DEEPEP_RANKS`): ``num_token``
      tokens per rank, ``k`` copies each, an fp8 dispatch
      (:data:`~rackmath.core.work.FP8_DISPATCH_BYTES`) and a bf16 combine (times in us), the
      busiest SM's ``ceil(num_token / num_experts)`` tokens (:func:`~rackmath.core.work.sm_tokens`):
      ``dispatch:deepep_ll``, ``combine:deepep_ll``.
    * DeepEP normal, the same node: one copy per destination rank (``D`` of
      :func:`rackmath.core.collectives.expected_destination_ranks`), fp8 dispatch and bf16
      combine, the fastest of the SM counts timed per shape (a tuned configuration; transmit
      plus notify time): ``dispatch:deepep_normal``, ``combine:deepep_normal``.
    """
    kind = df.attrs.get("kind")
    out: dict[str, CommRows] = {}
    if kind == "nccl":
        shape = ["op_name", "nccl_dtype", "num_gpus", "message_size"]
        for op, name in NCCL_OPS.items():
            rows = _median_shapes(df[df["op_name"].astype(str) == op], shape, ["latency"])
            if rows.empty:
                continue
            s = floats(rows, "message_size") * _element_bytes(rows["nccl_dtype"])
            w = _NCCL_WORK[op](s, floats(rows, "num_gpus"))
            out[f"{name}:nccl"] = _comm(
                f"{name}:nccl", w, floats(rows, "latency") * 1e-3, shape_hash(rows, shape)
            )
    elif kind == "custom_allreduce":
        auto = df[df["kernel_source"].astype(str) == "TRTLLM"]
        shape = ["allreduce_dtype", "num_gpus", "message_size"]
        rows = _median_shapes(auto, shape, ["latency"])
        rows = rows[custom_own_kernel(rows, nccl)]
        s = floats(rows, "message_size") * _element_bytes(rows["allreduce_dtype"])
        w = wk.one_shot_all_reduce(s, floats(rows, "num_gpus"))
        latency_s = floats(rows, "latency") * 1e-3
        out["all_reduce:custom"] = _comm("all_reduce:custom", w, latency_s, shape_hash(rows, shape))
    elif kind in ("deepep_ll", "deepep_normal"):
        shape = ["hidden_size", "num_token", "num_topk", "num_experts"]
        one = df[floats(df, "node_num") == 1]
        if kind == "deepep_ll":
            impl, cols = "deepep_ll", ("dispatch_avg_t_us", "combine_avg_t_us")
            rows = _median_shapes(one, shape, list(cols))
            copies = floats(rows, "num_topk")  # one copy per selected expert
        else:
            impl, cols = "deepep_normal", ("dispatch_us", "combine_us")
            notify = {p: one.get(f"{p}_notify_us", 0.0) for p in ("dispatch", "combine")}
            timed = one.assign(
                dispatch_us=floats(one, "dispatch_transmit_us") + np.asarray(notify["dispatch"], float),
                combine_us=floats(one, "combine_transmit_us") + np.asarray(notify["combine"], float),
            )
            rows = timed.groupby(shape, sort=True, as_index=False)[list(cols)].min() if len(timed) else timed
            copies = _destination_ranks(deepep_ranks, floats(rows, "num_experts"), floats(rows, "num_topk"))
        key = shape_hash(rows, shape)
        tokens, hidden = floats(rows, "num_token"), floats(rows, "hidden_size")
        experts = floats(rows, "num_experts")
        per_sm = experts if kind == "deepep_ll" else None  # the low-latency kernels' SM per expert
        for phase, col, value_bytes in (
            ("dispatch", cols[0], wk.FP8_DISPATCH_BYTES),
            ("combine", cols[1], 2.0),
        ):
            turns = wk.sm_tokens(tokens, per_sm) if per_sm is not None else 0.0
            w = wk.expert_exchange(tokens, copies, hidden, value_bytes, deepep_ranks, sm_tokens=turns)
            name = f"{phase}:{impl}"
            out[name] = _comm(name, w, floats(rows, col) * 1e-6, key, experts)
    return out
