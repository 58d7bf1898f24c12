"""Efficiency as data: operator classes and the fractions of peak each reaches on a chip.

Typed, frozen and validated here; the catalog stores fitted values in this form
(``catalog/data/kernel_efficiency.yaml``) and :mod:`rackmath.core.efficiency` holds the
functions that turn them into operator times.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from rackmath.errors import InputError

#: Largest fitted ``overlap_power``: at 20 the combination is within 3.5% of ``max``
#: (``2 ** (1 / 20) = 1.035`` where the two terms are equal), so larger values add nothing.
MAX_OVERLAP_POWER = 20.0


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
    """Achievable fractions of peak for one operator class on one chip and precision.

    The forms are in :mod:`rackmath.core.efficiency`. The last two fields:
    ``bandwidth_tile`` (0: bandwidth saturates in rows) is the edge of the output tile a GEMM
    kernel streams its operands through; when set, the bandwidth saturates in the number of
    output tiles ``ceil(rows / tile) * ceil(cols / tile)`` (a GEMV-shaped GEMM with few output
    columns runs few thread blocks and cannot draw the whole HBM bandwidth).
    ``overlap_power`` (0: compute and memory overlap perfectly, ``max``) combines the two times
    as ``(compute^p + memory^p)^(1/p)``: 1 is no overlap at all (their sum).
    ``routing_bytes_per_element`` (0: none) is the HBM traffic per routed element (token-expert
    pair x hidden) of a grouped expert GEMM's permute and finalize passes, timed at the chip's
    full bandwidth (see :func:`rackmath.core.efficiency.operator_timing`).
    ``alternative`` (None: one kernel) is a second kernel the framework can run the same
    operator with, on its own fitted curve (``kernel`` names it); the operator takes the faster
    of the two at each shape, as an autotuner does (TensorRT-LLM's NVFP4 MoE on B200/GB200: a
    throughput and a min-latency kernel).
    ``max_tokens`` (inf) and ``min_ep`` (1) bound where an alternative kernel runs: calls of at
    most ``max_tokens`` tokens (an EP group's, per call) on at least ``min_ep`` expert-parallel
    ranks, the region its table timed it in. Outside it the operator runs the first kernel.
    TensorRT-LLM dispatches its NVFP4 min-latency MoE at <= 128 tokens only
    (``DeepseekV3DecoderLayer._enable_min_latency_mode``, NVIDIA/TensorRT-LLM 2025), and its
    tables hold no EP-1 timing of that kernel
    (:func:`rackmath.analyses.kernel_rows._moe_ep1_not_scaling`).
    """

    compute_frac: float = 1.0
    compute_half_rows: float = 0.0
    bandwidth_frac: float = 1.0
    bandwidth_half_rows: float = 0.0
    floor_s: float = 0.0
    compute_half_cols: float = 0.0
    compute_half_depth: float = 0.0
    bandwidth_tile_depth: float = 0.0
    compute_tile_rows: float = 0.0
    bandwidth_tile: float = 0.0
    overlap_power: float = 0.0
    routing_bytes_per_element: float = 0.0
    kernel: str = ""
    alternative: OpEfficiency | None = None
    max_tokens: float = float("inf")
    min_ep: float = 1.0

    def __post_init__(self) -> None:
        for name in ("compute_frac", "bandwidth_frac"):
            value = getattr(self, name)
            if not 0.0 < value <= 1.0:
                raise InputError(name, value, "a fraction in (0, 1]")
        for name in (
            "compute_half_rows",
            "bandwidth_half_rows",
            "floor_s",
            "compute_half_cols",
            "compute_half_depth",
            "bandwidth_tile_depth",
            "compute_tile_rows",
            "bandwidth_tile",
            "routing_bytes_per_element",
        ):
            value = getattr(self, name)
            if not (np.isfinite(value) and value >= 0.0):
                raise InputError(name, value, "a finite number >= 0")
        if not self.max_tokens > 0.0:  # inf allowed: no bound
            raise InputError("max_tokens", self.max_tokens, "tokens > 0 (inf: no bound)")
        if not (np.isfinite(self.min_ep) and self.min_ep >= 1.0):
            raise InputError("min_ep", self.min_ep, "a finite number of ranks >= 1")
        if not (self.overlap_power == 0.0 or 1.0 <= self.overlap_power <= MAX_OVERLAP_POWER):
            raise InputError(
                "overlap_power",
                self.overlap_power,
                f"0 (perfect overlap) or a number in [1, {MAX_OVERLAP_POWER:g}]",
            )


PURE = OpEfficiency()


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
