"""How much of a chip's peak one operator reaches: the per-operator efficiency model.

The per-operator step (:mod:`rackmath.core.operators`) times each operator ``i`` as

    compute_s_i = flops_i / (peak_flops_per_s(precision_i) * compute_frac_i(rows_i))
    memory_s_i  = bytes_i / (hbm_bandwidth_bytes_per_s * bandwidth_frac_i(rows_i))
    time_s_i    = max(compute_s_i, memory_s_i) + calls_i * floor_s_i

where ``rows_i`` is the operator's parallel work dimension on one chip (tokens for a GEMM,
tokens per expert for the grouped expert GEMM, sequences for decode attention, tokens for
prefill attention) and ``calls_i`` the kernel launches the step makes (one per layer).

Each fraction saturates in ``rows`` (tile and wave utilisation: a GEMM with a few rows
leaves most of a tensor core's tile empty):

    compute_frac(rows)   = compute_frac   * rows / (rows + compute_half_rows)
    bandwidth_frac(rows) = bandwidth_frac * rows / (rows + bandwidth_half_rows)

so ``compute_half_rows`` is the row count at which half the asymptotic fraction is reached.

A GEMM's other two dimensions matter too (measured tables: an H100 bf16 GEMM with n <= 256
output columns runs ~30% slower than the rows-only form says; fp8 GEMMs with a short
reduction pay their activation quantization): when the caller knows them, the compute
fraction also saturates in the output columns ``cols`` (n) and the reduction depth ``depth`` (k):

    compute_frac(rows, cols, depth) = compute_frac(rows) * cols / (cols + compute_half_cols)
                                                         * depth / (depth + compute_half_depth)

Both half counts default to 0 (no effect), and omitting ``cols`` / ``depth`` leaves the
rows-only form. Worked number: compute_frac 0.8, half at 64 rows and 128 columns,
64 rows x 128 columns -> 0.8 * 0.5 * 0.5 = 0.2.

A grouped expert GEMM pads each expert's tokens to a whole tile of ``compute_tile_rows`` rows:
when set, the compute fraction also carries the useful share ``rows / (ceil(rows / tile) * tile)``
(worked number: tile 64, 16 rows -> a quarter).

Memory is read in tiles along ``depth`` (decode attention reads the KV cache in blocks of
``bandwidth_tile_depth`` tokens, so a 1-token context costs a whole block): when the tile and
``depth`` are given, only ``depth / (ceil(depth / tile) * tile)`` of the bytes read are useful,

    bandwidth_frac(rows, depth) = bandwidth_frac(rows) * depth / (ceil(depth / tile) * tile)

Worked number: tile 64, depth 16 -> a quarter of the asymptotic fraction.

The pure roofline is every fraction 1, every half-row count 0 and no floor
(:data:`PURE`). Fitted values come from measured kernel tables
(``rackmath calibrate kernels``) and live in the catalog with their source.

Units: seconds, rows (dimensionless counts), fractions in (0, 1].
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import numpy as np
from numpy.typing import ArrayLike, NDArray

from rackmath.errors import InputError

FloatArray = NDArray[np.float64]


class OpClass(StrEnum):
    """Operator classes that share one efficiency curve on a chip."""

    GEMM = "gemm"  # dense projections: QKV, output, dense MLP, shared experts, router, LM head
    MOE = "moe"  # routed experts as one grouped GEMM
    ATTENTION_DECODE = "attention_decode"  # one query token per sequence against its KV cache
    ATTENTION_PREFILL = "attention_prefill"  # causal attention over a prompt
    ELEMENTWISE = "elementwise"  # norms, activations, residual adds, embedding lookup
    COLLECTIVE = "collective"  # all-reduce, all-gather, reduce-scatter, all-to-all, send/recv


@dataclass(frozen=True)
class OpEfficiency:
    """Achievable fractions of peak for one operator class on one chip and precision."""

    compute_frac: float = 1.0
    compute_half_rows: float = 0.0
    bandwidth_frac: float = 1.0
    bandwidth_half_rows: float = 0.0
    floor_s: float = 0.0
    compute_half_cols: float = 0.0
    compute_half_depth: float = 0.0
    bandwidth_tile_depth: float = 0.0
    compute_tile_rows: float = 0.0

    def __post_init__(self) -> None:
        for name in ("compute_frac", "bandwidth_frac"):
            value = getattr(self, name)
            if not 0.0 < value <= 1.0:
                raise InputError(name, value, "a fraction in (0, 1]")
        for name in (
            "compute_half_rows", "bandwidth_half_rows", "floor_s", "compute_half_cols", "compute_half_depth",
            "bandwidth_tile_depth", "compute_tile_rows",
        ):
            value = getattr(self, name)
            if not (np.isfinite(value) and value >= 0.0):
                raise InputError(name, value, "a finite number >= 0")


PURE = OpEfficiency()


def achieved_compute_frac(
    e: OpEfficiency, rows: ArrayLike, cols: ArrayLike | None = None, depth: ArrayLike | None = None
) -> FloatArray:
    """``compute_frac * rows / (rows + compute_half_rows)`` (1 for the pure roofline),
    times ``cols / (cols + compute_half_cols)`` and ``depth / (depth + compute_half_depth)``
    when those are given.

    Worked number: compute_frac 0.8, half at 64 rows, 64 rows -> 0.4.
    """
    r = np.asarray(rows, float)
    if e.compute_half_rows == 0.0:
        frac = np.full_like(r, e.compute_frac)
    else:
        frac = e.compute_frac * r / (r + e.compute_half_rows)
    if e.compute_tile_rows > 0.0:
        rr = np.maximum(r, 1.0)
        frac = frac * rr / (np.ceil(rr / e.compute_tile_rows) * e.compute_tile_rows)
    if cols is not None and e.compute_half_cols > 0.0:
        c = np.asarray(cols, float)
        frac = frac * c / (c + e.compute_half_cols)
    if depth is not None and e.compute_half_depth > 0.0:
        d = np.asarray(depth, float)
        frac = frac * d / (d + e.compute_half_depth)
    return np.asarray(frac, dtype=float)


def achieved_bandwidth_frac(e: OpEfficiency, rows: ArrayLike, depth: ArrayLike | None = None) -> FloatArray:
    """``bandwidth_frac * rows / (rows + bandwidth_half_rows)`` (1 for the pure roofline),
    times the useful share ``depth / (ceil(depth / tile) * tile)`` when ``depth`` is given and
    ``bandwidth_tile_depth`` is set."""
    r = np.asarray(rows, float)
    if e.bandwidth_half_rows == 0.0:
        frac = np.full_like(r, e.bandwidth_frac)
    else:
        frac = e.bandwidth_frac * r / (r + e.bandwidth_half_rows)
    if depth is not None and e.bandwidth_tile_depth > 0.0:
        d = np.maximum(np.asarray(depth, float), 1.0)
        tile = e.bandwidth_tile_depth
        frac = frac * d / (np.ceil(d / tile) * tile)
    return np.asarray(frac, dtype=float)


@dataclass(frozen=True)
class CollectiveEfficiency:
    """One network tier as a collective library reaches it: ``t = latency_s + bytes / (bw * frac)``.

    ``latency_s`` is the fixed cost of one collective call (NCCL measures 7-28 us on
    NVLink, far above the wire's ~1 us); ``None`` keeps the system catalog's link latency.
    ``hop_latency_s`` adds ``(chips - 1) * hop_latency_s`` when the caller passes the group
    size to :func:`collective_time_s` (an H200 NCCL all-reduce of 256 elements takes 6.0,
    9.5 and 16.0 us on 2, 4 and 8 GPUs: each further GPU is another step of the algorithm).
    """

    latency_s: float | None = None
    bandwidth_frac: float = 1.0
    hop_latency_s: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 < self.bandwidth_frac <= 1.0:
            raise InputError("bandwidth_frac", self.bandwidth_frac, "a fraction in (0, 1]")
        if self.latency_s is not None and not (np.isfinite(self.latency_s) and self.latency_s >= 0):
            raise InputError("latency_s", self.latency_s, "seconds >= 0")
        if not (np.isfinite(self.hop_latency_s) and self.hop_latency_s >= 0):
            raise InputError("hop_latency_s", self.hop_latency_s, "seconds >= 0")


PURE_NETWORK = CollectiveEfficiency()


@dataclass(frozen=True)
class EfficiencyTable:
    """Every operator class's efficiency on one chip, plus a per-step fixed overhead.

    ``by_class`` maps an operator class to its efficiency (missing classes: pure);
    ``scale_up`` / ``scale_out`` describe the two network tiers; ``overhead_s`` is added
    once per step (scheduler, sampling, launch of the step's graph). ``source`` says where
    the numbers come from (``"pure roofline"``, a fitted table, or ``"transferred from ..."``).
    """

    by_class: tuple[tuple[OpClass, OpEfficiency], ...] = ()
    scale_up: CollectiveEfficiency = PURE_NETWORK
    scale_out: CollectiveEfficiency = PURE_NETWORK
    overhead_s: float = 0.0
    source: str = "pure roofline"
    transferred: bool = False

    def __post_init__(self) -> None:
        if not (np.isfinite(self.overhead_s) and self.overhead_s >= 0):
            raise InputError("overhead_s", self.overhead_s, "seconds >= 0")

    def of(self, op_class: OpClass) -> OpEfficiency:
        for cls, eff in self.by_class:
            if cls is op_class:
                return eff
        return PURE

    @property
    def is_pure(self) -> bool:
        return (
            all(e == PURE for _, e in self.by_class)
            and self.scale_up == PURE_NETWORK
            and self.scale_out == PURE_NETWORK
            and self.overhead_s == 0.0
        )


PURE_TABLE = EfficiencyTable()


def operator_time_s(
    e: OpEfficiency,
    flops: ArrayLike,
    bytes_moved: ArrayLike,
    peak_flops_per_s: float,
    bandwidth_bytes_per_s: float,
    rows: ArrayLike,
    cols: ArrayLike | None = None,
    depth: ArrayLike | None = None,
) -> FloatArray:
    """One kernel call: ``max(flops / (peak * compute_frac), bytes / (bw * bandwidth_frac)) + floor_s``.

    Worked number: 1 GFLOP and 1 MB at 1 PFLOP/s and 1 TB/s with the pure roofline -> 1 us
    (both terms 1 us).
    """
    compute_s = np.asarray(flops, float) / (peak_flops_per_s * achieved_compute_frac(e, rows, cols, depth))
    memory_s = np.asarray(bytes_moved, float) / (
        bandwidth_bytes_per_s * achieved_bandwidth_frac(e, rows, depth)
    )
    return np.asarray(np.maximum(compute_s, memory_s) + e.floor_s, dtype=float)


def collective_time_s(
    c: CollectiveEfficiency,
    wire_bytes: ArrayLike,
    link_bytes_per_s: float,
    link_latency_s: float = 0.0,
    chips: ArrayLike | None = None,
) -> FloatArray:
    """One collective call:
    ``latency_s + (chips - 1) hop_latency_s + wire_bytes / (link_bytes_per_s * bandwidth_frac)``.

    ``wire_bytes`` is what each chip sends over its link (a ring all-reduce of S bytes on n
    chips sends 2 (n-1)/n S). ``link_latency_s`` is used when ``c.latency_s`` is None; the hop
    term only when ``chips`` is given.
    Worked number: 10 us latency, 450 MB over 450 GB/s at fraction 0.9 -> 10 us + 1.111 ms;
    with 1 us per hop on 8 chips, 7 us more.
    """
    latency_s = link_latency_s if c.latency_s is None else c.latency_s
    hops = 0.0 if chips is None else np.maximum(np.asarray(chips, float) - 1.0, 0.0) * c.hop_latency_s
    return np.asarray(
        latency_s + hops + np.asarray(wire_bytes, float) / (link_bytes_per_s * c.bandwidth_frac)
    )
