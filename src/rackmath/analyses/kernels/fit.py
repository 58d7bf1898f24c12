"""Fit and validate the per-operator efficiency model on measured kernel latency tables.

Each measured kernel call becomes one row of (rows, cols, depth, FLOPs, bytes, latency); the
operator time of :func:`rackmath.core.efficiency.operator_time_s` is fitted per chip x operator
class x dtype by least squares on the log of predicted / measured latency (a soft-L1 loss so a
few odd rows do not steer the fit). Parameters are fitted in log space inside bounds that keep
every fraction in (0, 1]; the start point and the row subsample are fixed, so the fit is
deterministic.

How each table row becomes an operator row (FLOPs, bytes, shape) is in
:mod:`rackmath.analyses.kernels.rows`.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from rackmath.analyses.kernels.comm_fit import comm_efficiency, pipelined
from rackmath.analyses.kernels.op_rows import MODULE_KINDS, OpRows, take_work
from rackmath.analyses.kernels.params import LOG_HI, LOG_LO, START, curve_of
from rackmath.analyses.kernels.rows import (
    DEEPEP_EP,
    DEEPEP_RANKS,
    CommRows,
    comm_rows,
    fit_groups,
    moe_kernels,
    table_rows,
)
from rackmath.catalog import kernel_tables as kt
from rackmath.core import operators as ops
from rackmath.core.chip_rates import ChipRates
from rackmath.core.efficiency import operator_time_s
from rackmath.errors import PrecisionUnavailableError
from rackmath.specs.efficiency import (
    CollectiveEfficiency,
    Curve,
    CurveKey,
    EfficiencyTable,
    OpClass,
    OpEfficiency,
)
from rackmath.specs.precision import Precision, kernel_format

MAX_FIT_ROWS = 6000  # rows per fit (a fixed hash-ordered subsample): keeps the full fit < 60 s
MIN_FIT_ROWS = 3  # fewer rows than this leave the class unfitted (pure roofline)
HOLDOUT_MOD = 5  # shape hash % 5 == 0 -> held out (20%)
# Transfer rule for catalog chips without tables: the nearest measured chip of the same
# vendor generation; non-NVIDIA parts (no tables at all) take the H100's curves as the
# best-characterised mature HBM3 accelerator. Stated in docs/calibration.md.
TRANSFER: dict[str, str] = {
    "h800": "h100-sxm",
    "h100-pcie": "h100-sxm",
    "h100-nvl": "h100-sxm",
    "rubin": "gb300",
    "mi300x": "h100-sxm",
    "mi325x": "h100-sxm",
    "mi355x": "h100-sxm",
    "tpu-v4": "h100-sxm",
    "tpu-v5e": "h100-sxm",
    "tpu-v5p": "h100-sxm",
    "tpu-v6e": "h100-sxm",
    "tpu7x": "h100-sxm",
    "trn1": "h100-sxm",
    "trn2": "h100-sxm",
}
HELD_OUT_CHIPS: dict[str, str] = {"h200": "h100-sxm", "gb300": "gb200"}


@dataclass(frozen=True)
class ChipPeaks:
    """The catalog figures a fraction is a fraction of."""

    chip_id: str
    peak_flops_per_s: dict[Precision, float]
    hbm_bytes_per_s: float
    scale_up_bytes_per_s: float  # 0 when the chip has no scale-up link: collectives are not fitted
    cache_bytes: float = 0.0  # the chip's L2 (0: unstated): where a causal prefill spills

    @classmethod
    def of(cls, chip_id: str) -> ChipPeaks:
        from rackmath.catalog.loader import chip

        c = chip(chip_id)
        peaks: dict[Precision, float] = {}
        for p in Precision:
            try:
                peaks[p] = c.peak_flops(p)
            except PrecisionUnavailableError:
                continue
        return cls(
            chip_id,
            peaks,
            c.hbm_bandwidth_bytes_per_s,
            c.scale_up_bandwidth_bytes_per_s_per_direction or 0.0,
            c.l2_cache_bytes or 0.0,
        )


# ------------------------------------------------------------------ fitting


#: Classes whose tables the package timed warm (:func:`table_bytes`) and whose curves keep the
#: DRAM rate: GEMM and the grouped expert GEMM (a serving step reads each layer's weights once,
#: cold) and prefill attention (the context-attention and context-MLA collectors replay one CUDA
#: graph of the call too, ai-dynamo/aiconfigurator ``collector/trtllm/collect_attn.py`` and
#: ``collect_mla.py``; the step reads its queries, keys and values at the curve's DRAM rate).
WARM_CLASSES = frozenset({OpClass.GEMM, OpClass.MOE, OpClass.ATTENTION_PREFILL})


def table_bytes(e: OpEfficiency, r: OpRows) -> np.ndarray:
    """The bytes each measured call read at the curve's DRAM rate: all of them, except that a
    call of at most ``calls x warm_bytes`` bytes whose table replayed it back to back (the
    package's collector runs one CUDA graph of the call over and over with no flush between:
    ai-dynamo/aiconfigurator ``collector/helper.py``, ``benchmark_with_power``) found them in the
    L2 and read them ``warm_speedup`` times faster. All or nothing: a call larger than the L2
    replayed cyclically evicts each line before it comes round again. Worked number: 60 MB in
    one call, an L2 of 96 MiB, speedup 4 -> 15 MB; 200 MB -> 200 MB."""
    moved = r.work.bytes
    if not e.warm_speedup or r.warm_bytes is None:
        return moved
    return np.where(r.within_warm_l2, moved / e.warm_speedup, moved)


def predict(e: OpEfficiency, r: OpRows, peak: float, bw: float) -> np.ndarray:
    """The time of each measured call on curve ``e``: its work through
    :func:`rackmath.core.efficiency.operator_time_s`, as the step times an operator
    (:func:`rackmath.core.operators.timed`), its bytes as its table read them
    (:func:`table_bytes`), plus the time of the operators the table timed with it on their own
    curves (``r.fixed_s``, :func:`with_companions`)."""
    w = r.work
    t = operator_time_s(
        e,
        w.flops,
        table_bytes(e, r),
        peak,
        bw,
        w.rows,
        w.cols,
        w.depth,
        w.calls,
        routed=w.routed,
        tokens=w.tokens,
        ep=w.ep,
        sequence_heads=w.sequence_heads,
    )
    return t if r.fixed_s is None else t + r.fixed_s


def gemm_table(fits: list[OpFit], chip_id: str) -> EfficiencyTable:
    """The GEMM curves of a chip's fit as the table a step picks them from (with its
    fallbacks): what a module table's projections are timed on."""
    curves = tuple(
        (CurveKey(f.op_class, f.dtype, f.kind, f.head_dim), Curve(f.efficiency, f.precision.value, f.source))
        for f in fits
        if f.op_class is OpClass.GEMM
    )
    return EfficiencyTable(
        curves=curves, chip=chip_id, dsa_prefill_gathers_top_k=chip_id in kt.DSA_PREFILL_GATHERS_TOP_K
    )


def companion_s(r: OpRows, gemms: EfficiencyTable, peaks: ChipPeaks) -> np.ndarray | None:
    """The time, per row, of the operators a module table timed beside ``r``'s own
    (:class:`~rackmath.analyses.kernels.op_rows.Companion`), each on the curve the step would
    run it on (:func:`rackmath.core.operators.timed` with ``gemms``); None without companions.
    A row without a companion adds nothing."""
    if not r.companions:
        return None
    rates = ChipRates({p.value: f for p, f in peaks.peak_flops_per_s.items()}, peaks.hbm_bytes_per_s, gemms)
    total = np.zeros(len(r))
    for c in r.companions:
        for formats in sorted({f for f in c.formats.tolist() if f}):
            at = np.array([f == formats for f in c.formats.tolist()], dtype=bool)
            op = ops.timed(c.name, c.op_class, rates, take_work(c.work, at), formats)
            total[at] += np.asarray(op.time_s, float)
    return total


def with_companions(r: OpRows, fits: list[OpFit], peaks: ChipPeaks) -> OpRows:
    """``r`` with the time of its companions on ``fits``' GEMM curves (``fixed_s``); ``r``
    itself when it has none."""
    if not r.companions:
        return r
    return r.with_fixed(companion_s(r, gemm_table(fits, peaks.chip_id), peaks))


def _subsample(r: OpRows) -> OpRows:
    if len(r.latency_s) <= MAX_FIT_ROWS:
        return r
    order = np.argsort(r.key * np.uint64(2654435761), kind="stable")[:MAX_FIT_ROWS]
    return r.take(np.sort(order))


# KV block sizes tried for decode attention's tile quantization (0 = none); the best fit wins.
DECODE_TILES = (0.0, 16.0, 32.0, 64.0, 128.0, 256.0)
# Row tiles tried for the grouped expert GEMM (0 = none); the best fit wins.
MOE_ROW_TILES = (0.0, 16.0, 32.0, 64.0, 128.0)
# Output-tile edges tried for a dense GEMM's bandwidth parallelism (0 = saturate in rows).
GEMM_BANDWIDTH_TILES = (0.0, 128.0)
# One fit's discrete choices: the decode KV tile, the MoE row tile, the GEMM output tile, the
# module column tile and the prefill query tile.
_Shape = tuple[float, float, float, float, float]
# Query tiles tried for prefill attention's thread blocks (FlashAttention-2/3-style kernels run
# 64 or 128 query rows per block): the best fit wins.
PREFILL_BLOCK_TILES = (64.0, 128.0)
# Head tiles tried for a module table's absorbed attention (0 = none; Hopper's sparse MLA
# runs heads in tiles of 64): the families of MODULE_KINDS, whose tables vary the local heads.
MODULE_COL_TILES = (0.0, 64.0)
# Head tiles tried for MLA decode (absorbed: a call's columns are its query heads). The generic
# kernel TensorRT-LLM runs on the L40S and the RTX PRO 6000 takes as long for 1 query head as
# for 128 (RTX PRO 6000, bf16, 16 sequences at 131,072 tokens: 11.9-12.0 ms at every head count
# from 1 to 128), and fits a tile of 128 heads, as the A100's does; Hopper's and Blackwell's
# kernels fit none (docs/calibration.md, "MLA decode on SM120").
MLA_DECODE_COL_TILES = (0.0, 64.0, 128.0)


@contextmanager
def deterministic_threads() -> Iterator[None]:
    """Run the fits on one BLAS thread (``threadpoolctl``, the ``kernels`` extra): SciPy's
    trust-region steps call LAPACK, and a threaded BLAS may split a reduction differently with
    another number of cores, so a refit on a machine with more cores could differ in the last
    bits (and, at a rounding edge, in a written digit). One thread makes the arithmetic depend
    on the inputs and the CPU's kernels only. Without ``threadpoolctl`` it does nothing."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - the kernels extra installs it
        yield
        return
    with threadpool_limits(limits=1):
        yield


def fit_op(r: OpRows, peak: float, bw: float, cache_bytes: float = 0.0) -> OpEfficiency:
    """Least-squares fit of one operator class and dtype on one chip (deterministic).

    Every class fits the fractions, half counts, floor and ``overlap_power``; classes with a shape
    also the column and depth half counts, MoE the routing bytes per element, decode attention the
    context a split-KV thread block takes (``split_tokens``) and the blocks a call fills before it
    stops splitting (``split_fill``), attention the cost of a thread block (``block_bytes``), causal
    prefill attention its longest block's share of the peak (``chain_frac``) and, on a chip whose L2
    the catalog states (``cache_bytes``), the passes it reads again over the bytes a call holds
    beyond it (``spill_passes``) and, on GEMM, MoE and prefill rows of a table that replayed its calls
    warm (:data:`WARM_CLASSES`), how much faster a call within the L2 read its bytes (``warm_speedup``).
    Discrete choices are tried and the lowest loss wins: the KV tile
    of decode attention (:data:`DECODE_TILES`), the row tile of the grouped expert GEMM
    (:data:`MOE_ROW_TILES`), a dense GEMM's output tile (:data:`GEMM_BANDWIDTH_TILES`), prefill
    attention's query tile (:data:`PREFILL_BLOCK_TILES`) and the head tile of absorbed attention
    (:data:`MODULE_COL_TILES`, :data:`MLA_DECODE_COL_TILES`). The residual times each row through
    :func:`operator_time_s`, the function the cost model uses.
    """
    from scipy.optimize import least_squares

    r = _subsample(r)
    with_cols = r.cols is not None
    with_routing = r.routed is not None
    with_split = r.op_class is OpClass.ATTENTION_DECODE and r.depth is not None
    with_blocks = with_split or r.work.sequence_heads is not None
    with_unaligned = r.op_class is OpClass.MOE and r.ragged_cols
    module = len(r.kind) > 0 and bool(np.isin(r.kind, MODULE_KINDS).all())
    # causal prefill only: a sparse module's queries each read their top-k, not a causal span
    with_chain = r.op_class is OpClass.ATTENTION_PREFILL and r.work.sequence_heads is not None and not module
    shaped = [with_cols, with_cols, True, with_routing, with_split, with_split, with_blocks]
    # a causal prefill on a chip whose L2 is stated: the re-reads it spills beyond that
    spill_cache = cache_bytes if with_chain else 0.0
    # operands a table's replays kept in the L2 (a step reads them at the curve's DRAM rate)
    with_warm = r.op_class in WARM_CLASSES and bool(np.any(r.warm > 0.0))
    shaped += [with_unaligned, with_chain, with_split, spill_cache > 0.0, with_warm]
    free = np.array([True] * 5 + shaped)
    log_t = np.log(r.latency_s)
    tiles = DECODE_TILES if (r.op_class is OpClass.ATTENTION_DECODE and r.depth is not None) else (0.0,)
    row_tiles = MOE_ROW_TILES if r.op_class is OpClass.MOE else (0.0,)
    bw_tiles = GEMM_BANDWIDTH_TILES if (r.op_class is OpClass.GEMM and with_cols) else (0.0,)
    mla_decode = r.op_class is OpClass.ATTENTION_DECODE and len(r.kind) > 0 and bool((r.kind == "mla").all())
    col_tiles: tuple[float, ...] = (0.0,)
    if with_cols and (module or mla_decode):
        col_tiles = MODULE_COL_TILES if module else MLA_DECODE_COL_TILES
    block_tiles = PREFILL_BLOCK_TILES if r.work.sequence_heads is not None else (0.0,)
    shapes: list[_Shape] = list(itertools.product(tiles, row_tiles, bw_tiles, col_tiles, block_tiles))
    best: tuple[float, np.ndarray, _Shape] | None = None
    for shape in shapes:
        start = START.copy()
        if shape[2] > 0:
            start[3] = np.log(16.0)  # the half count is in output tiles: of the order of the SMs

        def resid(q: np.ndarray, shape: _Shape = shape, start: np.ndarray = start) -> np.ndarray:
            p = start.copy()
            p[free] = q
            e = curve_of(
                p, with_cols, shape[0], shape[1], shape[2], with_routing=with_routing, with_split=with_split,
                col_tile=shape[3], with_blocks=with_blocks, block_tile=shape[4],
                with_unaligned=with_unaligned, with_chain=with_chain, cache_bytes=spill_cache,
                with_warm=with_warm,
            )  # fmt: skip
            return np.asarray(np.log(predict(e, r, peak, bw)) - log_t)

        sol = least_squares(
            resid,
            start[free],
            bounds=(LOG_LO[free], LOG_HI[free]),
            loss="soft_l1",
            f_scale=0.1,
            max_nfev=400,
        )
        if best is None or sol.cost < best[0] - 1e-12:
            p = start.copy()
            p[free] = sol.x
            best = (float(sol.cost), p, shape)
    assert best is not None
    chosen = best[2]
    return curve_of(
        best[1], with_cols, chosen[0], chosen[1], chosen[2], with_routing=with_routing, with_split=with_split,
        col_tile=chosen[3], with_blocks=with_blocks, block_tile=chosen[4],
        with_unaligned=with_unaligned, with_chain=with_chain, cache_bytes=spill_cache, with_warm=with_warm,
    )  # fmt: skip


# ------------------------------------------------------------------ per-chip fit


@dataclass
class ChipData:
    """Every measured row of one chip, grouped by class (formats and kernel families inside),
    with sources."""

    chip_id: str
    ops: dict[OpClass, OpRows] = field(default_factory=dict)
    comm: dict[str, CommRows] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)  # "class/kind" or comm name -> table source
    nccl: Any = None  # the chip's NCCL table: which custom all-reduce rows ran the custom kernel
    custom: Any = None  # (table, source) of a custom all-reduce read before the NCCL table
    # Rows that are not the operator's timing (kept out of the fit, scored apart):
    # faster than their bytes at the chip's HBM bandwidth (operands L2-resident, or a kernel that
    # skipped work) but for MoE and prefill replays within the L2 (OpRows.possible), or MoE rows
    # slower than a superset of their work.
    rejected: dict[OpClass, OpRows] = field(default_factory=dict)
    # MoE dtypes timed with several gated kernels: each kernel's own rows (dtype -> kernel -> rows)
    moe_kernels: dict[str, dict[str, OpRows]] = field(default_factory=dict)

    def add(self, df: Any, source: str) -> None:
        peaks = ChipPeaks.of(self.chip_id)
        bw = peaks.hbm_bytes_per_s
        # a table `rackmath measure` wrote was timed cold; any other replayed each call warm
        warm = peaks.cache_bytes if kt.MEASURED_TIMING_COLUMN not in df.columns else 0.0

        def timed_as(r: OpRows) -> OpRows:
            return replace(r, warm_bytes=np.full(len(r), warm)) if warm else r

        for dt, kernels in moe_kernels(df, bw, warm).items():
            self.moe_kernels[dt] = {k: timed_as(r) for k, r in kernels.items()}
        gathers = self.chip_id in kt.DSA_PREFILL_GATHERS_TOP_K
        physical = table_rows(df, bw, dsa_gathers_top_k=gathers, warm_bytes=warm)
        kept = {c: timed_as(r) for c, r in physical.items()}
        for cls, every in table_rows(df, physical=False, dsa_gathers_top_k=gathers).items():
            every = timed_as(every)
            r = kept.get(cls, every.take(np.zeros(len(every.key), bool)))
            possible = r.possible(bw)  # faster than DRAM only from the L2
            _append(self.ops, cls, r.take(possible))
            _append(self.rejected, cls, r.take(~possible))
            _append(self.rejected, cls, every.take(~np.isin(every.key, r.key)))
            for kind in sorted(set(every.kind.tolist())):
                self.sources[source_key(cls, kind)] = source
        kind = df.attrs.get("kind")
        if kind == "custom_allreduce":
            self.custom = (df, source)
        ranks = DEEPEP_RANKS.get(self.chip_id, DEEPEP_EP)
        for name, c in comm_rows(df, ranks, self.nccl).items():
            self.comm[name] = c
            self.sources[name] = source
        if kind == "nccl":
            self.nccl = df
            if self.custom is not None:  # read first: keep only its rows that ran the custom kernel
                self.add(*self.custom)


def source_key(cls: OpClass, kind: str) -> str:
    """The key a class and kernel family's table source is kept under (``attention_decode/mla``)."""
    return f"{cls.value}/{kind}" if kind else cls.value


def _append(into: dict[OpClass, OpRows], cls: OpClass, r: OpRows) -> None:
    into[cls] = r if cls not in into else OpRows.concat(into[cls], r)


#: Every table kind the fit reads, in order (NCCL before the custom all-reduce).
TABLE_KINDS = (
    "gemm",
    "moe",
    "generation_attention",
    "context_attention",
    "generation_mla",
    "context_mla",
    "dsa_generation_module",
    "dsa_context_module",
    "nccl",
    "custom_allreduce",
    "deepep_ll",
    "deepep_normal",
)
#: The collective tables alone (``load_package_chip(..., kinds=COMM_KINDS)``: a fit of the
#: collectives without the compute tables, seconds instead of a minute).
COMM_KINDS = ("nccl", "custom_allreduce", "deepep_ll", "deepep_normal")


def load_package_chip(
    chip_id: str, refs: list[kt.TableRef] | None = None, kinds: tuple[str, ...] = TABLE_KINDS
) -> ChipData:
    """The primary tables of one chip from the installed package (``kinds``: which)."""
    refs = kt.discover() if refs is None else refs
    data = ChipData(chip_id)
    # NCCL before the custom all-reduce: its rows say where the custom kernel ran
    for kind in [k for k in TABLE_KINDS if k in kinds]:
        ref = kt.primary(refs, chip_id, kind)
        if ref is None:
            continue
        df = kt.read_table(ref.path, kind)
        if kind == "moe" and not (df["distribution"].astype(str) == "balanced").any():
            # A100: TensorRT-LLM 1.0.0 measured only power-law routing; SGLang has balanced rows.
            for alt in sorted(
                (r for r in refs if r.chip_id == chip_id and r.kind == "moe" and r != ref),
                key=lambda r: (r.framework, kt.version_key(r.version)),
                reverse=True,
            ):
                alt_df = kt.read_table(alt.path, kind)
                if (alt_df["distribution"].astype(str) == "balanced").any():
                    ref, df = alt, alt_df
                    break
        data.add(df, f"{ref.source} ({ref.framework} {ref.version})")
    return data


@dataclass
class OpFit:
    """One fitted curve: class, format (``dtype``), kernel family (``kind``) and head size
    (``head_dim``, 0: every size; :data:`rackmath.specs.efficiency.HEAD_SIZED`), the precision
    whose peak its compute fraction is a fraction of, the rows it used and their source."""

    op_class: OpClass
    dtype: str
    kind: str
    precision: Precision
    efficiency: OpEfficiency
    rows_used: int
    source: str
    head_dim: int = 0

    @property
    def curve_id(self) -> tuple[OpClass, str, str, int]:
        """(class, format, family, head size): the curve's identity in a fit's tables."""
        return (self.op_class, self.dtype, self.kind, self.head_dim)


@dataclass
class ChipFit:
    chip_id: str
    ops: list[OpFit]
    comm: dict[str, CollectiveEfficiency]
    comm_rows: dict[str, int]
    sources: dict[str, str]
    #: per collective: (largest group, smallest and largest message in bytes) its rows measured
    comm_range: dict[str, tuple[float, float, float]] = field(default_factory=dict)


def _kernel_chain(
    kernels: dict[str, OpRows], shapes: np.ndarray, peak: float, bw: float
) -> OpEfficiency | None:
    """Each kernel fitted on its own rows of the shapes whose keys are ``shapes`` (the fit's
    split), chained as alternatives: the kernel with the most rows first, the operator taking
    the fastest. An alternative runs only in the region its rows cover (most tokens, fewest EP
    ranks: ``OpEfficiency.max_tokens`` and ``min_ep``)."""
    order = sorted(kernels, key=lambda k: (-len(kernels[k].key), k))
    chain: OpEfficiency | None = None  # None when no kernel has rows enough: the caller fits one curve
    for source in reversed(order):
        r = kernels[source]
        r = r.take(np.isin(r.key, shapes))
        if len(r.latency_s) < MIN_FIT_ROWS:
            continue
        region = {}
        if source != order[0] and r.tokens is not None and r.ep is not None:
            region = {"max_tokens": float(r.tokens.max()), "min_ep": float(r.ep.min())}
        chain = replace(fit_op(r, peak, bw), kernel=source, alternative=chain, **region)
    return chain


def _xqa_mla(chip_id: str, cls: OpClass, dtype: str, kind: str) -> bool:
    """Whether the chip's MLA decode rows of ``dtype`` hold a second kernel the framework
    dispatches by head count (:data:`rackmath.catalog.kernel_tables.SM120_XQA_MLA`)."""
    return (
        chip_id in kt.SM120_XQA_MLA
        and cls is OpClass.ATTENTION_DECODE
        and kind == "mla"
        and dtype == kt.XQA_MLA_FORMAT
    )


def _dispatched(r: OpRows, cols: float, kernel: str, peak: float, bw: float) -> OpEfficiency | None:
    """One curve for the rows of exactly ``cols`` columns (the kernel the framework dispatches
    there, ``kernel``) as the alternative of one for the rest (``OpEfficiency.only_cols``); None
    when either has too few rows (the caller then fits one curve)."""
    if r.cols is None:
        return None
    at = np.broadcast_to(np.equal(r.cols, cols), r.latency_s.shape)
    if min(int(at.sum()), int((~at).sum())) < MIN_FIT_ROWS:
        return None
    own = replace(fit_op(r.take(at), peak, bw), kernel=kernel, only_cols=cols)
    return replace(fit_op(r.take(~at), peak, bw), alternative=own)


def curve_precision(dtype: str, peaks: ChipPeaks) -> Precision | None:
    """The peak a curve of format ``dtype`` is a fraction of: the format's compute precision
    (:data:`rackmath.specs.precision.FORMATS`: an fp8 KV cache's attention runs fp8 math on
    Blackwell, up to 1.3x the bf16 peak in the MLA tables), bf16 on a chip without that peak
    (an A100's fp8-KV attention), None when the chip has neither."""
    compute = kernel_format(dtype).compute
    for p in (compute, Precision.BF16):
        if p in peaks.peak_flops_per_s:
            return p
    return None


def fit_chip(data: ChipData, peaks: ChipPeaks, mask: dict[str, np.ndarray] | None = None) -> ChipFit:
    """Fit every class x format x family (x head size) of one chip (``mask`` keeps only some rows per
    class/comm name). The GEMM curves are fitted first: a module table's rows (DSA's) carry
    their projections, timed on those curves and added to the fitted operator's time. The
    curves are listed by class, then format and family."""
    fits: list[OpFit] = []
    # GEMM first (a module's companions run on its curves), then the rest by class
    for cls, allr in sorted(data.ops.items(), key=lambda kv: (kv[0] is not OpClass.GEMM, kv[0].value)):
        r_all = allr.take(mask[cls.value]) if mask is not None else allr
        r_all = with_companions(r_all, fits, peaks)
        for dt, kind, head_dim, rows in fit_groups(r_all):
            prec = curve_precision(dt, peaks)
            if prec is None or (
                cls is OpClass.GEMM and kernel_format(dt).compute not in peaks.peak_flops_per_s
            ):
                continue  # the chip has no such tensor cores (fp8 GEMMs on an A100): nothing to fit
            peak = peaks.peak_flops_per_s[prec]
            r = r_all.take(rows)
            if len(r.latency_s) < MIN_FIT_ROWS:
                continue
            kernels = data.moe_kernels.get(dt, {}) if (cls is OpClass.MOE and kind == "gated") else {}
            # several kernels: one curve each, the operator runs the faster
            chain = _kernel_chain(kernels, r.key, peak, peaks.hbm_bytes_per_s) if kernels else None
            if _xqa_mla(data.chip_id, cls, dt, kind):
                chain = _dispatched(r, kt.XQA_MLA_HEADS, kt.XQA_MLA_KERNEL, peak, peaks.hbm_bytes_per_s)
            eff = chain if chain is not None else fit_op(r, peak, peaks.hbm_bytes_per_s, peaks.cache_bytes)
            source = data.sources.get(source_key(cls, kind), "")
            fits.append(OpFit(cls, dt, kind, prec, eff, len(r.latency_s), source, head_dim))
    fits.sort(key=lambda f: f.op_class.value)  # stable: each class's formats and families in order
    comm, counts, ranges = fit_collectives(data, peaks, mask)
    return ChipFit(data.chip_id, fits, comm, counts, dict(data.sources), ranges)


def fit_collectives(
    data: ChipData, peaks: ChipPeaks, mask: dict[str, np.ndarray] | None = None
) -> tuple[dict[str, CollectiveEfficiency], dict[str, int], dict[str, tuple[float, float, float]]]:
    """One alpha-beta curve per ``"<collective>:<implementation>"`` of the chip (rows kept by
    ``mask``): its efficiency, the rows it used, and the group sizes and messages they cover.
    NCCL's curves on a PCIe host (:data:`rackmath.catalog.kernel_tables.PCIE_HOSTS`) also fit
    the group power (a rank's bandwidth falling with the group,
    :class:`~rackmath.specs.efficiency.CollectiveEfficiency`); every other curve keeps 0. DeepEP's
    low-latency curves also fit their busiest SM's turns (``sm_token_s``,
    :func:`rackmath.analyses.kernels.comm_fit.per_sm_tokens`)."""
    comm: dict[str, CollectiveEfficiency] = {}
    counts: dict[str, int] = {}
    ranges: dict[str, tuple[float, float, float]] = {}
    for name, c_all in sorted(data.comm.items()):
        c = c_all.take(mask[name]) if mask is not None else c_all
        if len(c.latency_s) >= MIN_FIT_ROWS and peaks.scale_up_bytes_per_s > 0:
            shared = data.chip_id in kt.PCIE_HOSTS and pipelined(name)
            comm[name] = comm_efficiency(c, peaks.scale_up_bytes_per_s, group_power=shared)
            counts[name] = len(c.latency_s)
            ranges[name] = (float(c.chips.max()), float(c.message_bytes.min()), float(c.message_bytes.max()))
    return comm, counts, ranges


# The catalog YAML is written by rackmath.analyses.kernels.calibrate (fit_to_dict,
# calibrate_kernels), validated by rackmath.analyses.kernels.validation and read as typed tables
# by rackmath.analyses.kernels.tables; import them from there.
