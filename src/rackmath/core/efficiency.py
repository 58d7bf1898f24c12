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

    def __post_init__(self) -> None:
        for name in ("compute_frac", "bandwidth_frac"):
            value = getattr(self, name)
            if not 0.0 < value <= 1.0:
                raise InputError(name, value, "a fraction in (0, 1]")
        for name in ("compute_half_rows", "bandwidth_half_rows", "floor_s"):
            value = getattr(self, name)
            if not (np.isfinite(value) and value >= 0.0):
                raise InputError(name, value, "a finite number >= 0")


PURE = OpEfficiency()


def achieved_compute_frac(e: OpEfficiency, rows: ArrayLike) -> FloatArray:
    """``compute_frac * rows / (rows + compute_half_rows)`` (1 for the pure roofline).

    Worked number: compute_frac 0.8, half at 64 rows, 64 rows -> 0.4.
    """
    r = np.asarray(rows, float)
    if e.compute_half_rows == 0.0:
        return np.full_like(r, e.compute_frac)
    return np.asarray(e.compute_frac * r / (r + e.compute_half_rows), dtype=float)


def achieved_bandwidth_frac(e: OpEfficiency, rows: ArrayLike) -> FloatArray:
    """``bandwidth_frac * rows / (rows + bandwidth_half_rows)`` (1 for the pure roofline)."""
    r = np.asarray(rows, float)
    if e.bandwidth_half_rows == 0.0:
        return np.full_like(r, e.bandwidth_frac)
    return np.asarray(e.bandwidth_frac * r / (r + e.bandwidth_half_rows), dtype=float)


@dataclass(frozen=True)
class CollectiveEfficiency:
    """One network tier as a collective library reaches it: ``t = latency_s + bytes / (bw * frac)``.

    ``latency_s`` is the fixed cost of one collective call (NCCL measures 7-28 us on
    NVLink, far above the wire's ~1 us); ``None`` keeps the system catalog's link latency.
    """

    latency_s: float | None = None
    bandwidth_frac: float = 1.0

    def __post_init__(self) -> None:
        if not 0.0 < self.bandwidth_frac <= 1.0:
            raise InputError("bandwidth_frac", self.bandwidth_frac, "a fraction in (0, 1]")
        if self.latency_s is not None and not (np.isfinite(self.latency_s) and self.latency_s >= 0):
            raise InputError("latency_s", self.latency_s, "seconds >= 0")


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


def table_from_fractions(
    *,
    flops_frac: float = 1.0,
    bandwidth_frac: float = 1.0,
    overhead_s: float = 0.0,
    weight_bandwidth_frac: float = 1.0,
    kv_bandwidth_frac: float = 1.0,
    source: str = "fitted fractions",
) -> EfficiencyTable:
    """A flat table: the same fraction of peak FLOP/s for every operator, HBM bandwidth at
    ``bandwidth_frac`` (times ``weight_bandwidth_frac`` for GEMMs, ``kv_bandwidth_frac`` for
    attention), no saturation in rows. The end-to-end calibration's few scalars in operator form."""
    gemm = OpEfficiency(compute_frac=flops_frac, bandwidth_frac=bandwidth_frac * weight_bandwidth_frac)
    attention = OpEfficiency(compute_frac=flops_frac, bandwidth_frac=bandwidth_frac * kv_bandwidth_frac)
    flat = OpEfficiency(compute_frac=flops_frac, bandwidth_frac=bandwidth_frac)
    if gemm == PURE and attention == PURE and overhead_s == 0.0:
        return PURE_TABLE
    return EfficiencyTable(
        by_class=(
            (OpClass.GEMM, gemm),
            (OpClass.MOE, gemm),
            (OpClass.ATTENTION_DECODE, attention),
            (OpClass.ATTENTION_PREFILL, attention),
            (OpClass.ELEMENTWISE, flat),
        ),
        overhead_s=overhead_s,
        source=source,
    )
