"""The roofline of one forward pass, on plain numbers, vectorized by NumPy broadcasting.

Every function takes numbers or arrays in SI units (FLOP, bytes, FLOP/s, bytes/s,
seconds) and broadcasts them, so a 1,000 x 1,000 batch-by-context grid is one call.
They hold no catalog knowledge: the lecture's round inputs (37e9 active, 700e9 total,
2.5e15 FLOP/s, 8e12 B/s) work as well as figures derived from a real architecture.

The model (the lecture's blackboard, Pope 2026):

    t_compute = FLOPs / (peak_flops_per_s * flops_frac)
    t_weights = weight_bytes / (bandwidth * bandwidth_frac * weight_bandwidth_frac)
    t_kv      = kv_bytes / (bandwidth * bandwidth_frac * kv_bandwidth_frac)
    t_step    = max(t_compute, t_weights + t_kv) + overhead_s

Weights and KV cache share the same HBM bandwidth, so their times add; compute overlaps
with memory traffic, so the step is the larger of the two. ``flops_frac``,
``bandwidth_frac`` and ``overhead_s`` are the hooks a calibration sets (defaults: the pure
roofline); ``weight_bandwidth_frac`` and ``kv_bandwidth_frac`` (default 1) scale the bandwidth
of the weight reads and of the KV-cache reads separately, for kernels that stream one of
them less efficiently (weight-only quantized GEMMs that dequantize on the fly; attention).
When N chips act as one, pass N times the per-chip peak and bandwidth.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import ArrayLike, NDArray

from rackmath.core.numeric import num
from rackmath.errors import InputError
from rackmath.specs import checks
from rackmath.specs.efficiency import (
    ANY,
    PURE,
    PURE_TABLE,
    Curve,
    CurveKey,
    EfficiencyMode,
    EfficiencyTable,
    OpClass,
    OpEfficiency,
)
from rackmath.units import FLOPS_PER_MAC, SECONDS_PER_HOUR

FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class Efficiency:
    """Achievable fractions of peak and a fixed per-step cost: the calibration hooks.

    ``flops_frac`` and ``bandwidth_frac`` lie in (0, 1]; ``overhead_s`` >= 0 is added to
    every step (kernel launches, scheduling, sampling); ``overhead_s_per_sequence`` >= 0 is
    host time per running sequence per decode step, charged per engine (each attention-DP
    rank or replica schedules its own sequences: :func:`rackmath.core.parallel.host_overhead_s`).
    ``weight_bandwidth_frac`` and ``kv_bandwidth_frac`` in (0, 1] multiply ``bandwidth_frac``
    for the weight reads and the KV-cache reads only (a dequantizing weight-only GEMM, an
    attention kernel). The scalars default to 1.

    ``mode`` (:class:`~rackmath.specs.efficiency.EfficiencyMode`, the one switch): ``kernel``
    (the default) makes each operator class reach the fractions fitted on the chip's measured
    kernel tables (resolved by the analysis layer, :mod:`rackmath.analyses.kernels.tables`),
    the scalars above multiplying them; ``pure`` keeps the scalars on the pure roofline. The
    closed forms of this module (:func:`step_times`, ...) read the scalars only.
    """

    flops_frac: float = 1.0
    bandwidth_frac: float = 1.0
    overhead_s: float = 0.0
    weight_bandwidth_frac: float = 1.0
    kv_bandwidth_frac: float = 1.0
    mode: EfficiencyMode = EfficiencyMode.KERNEL
    overhead_s_per_sequence: float = 0.0
    #: which all-reduce kernels the engine runs: ``auto`` (the faster of a custom one-shot
    #: kernel and NCCL, as TensorRT-LLM, vLLM and SGLang pick by message size) or ``nccl``
    #: (an engine that calls NCCL only: gpt-fast's ``torch.distributed`` all-reduce)
    all_reduce: str = "auto"

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", EfficiencyMode.parse(self.mode))  # "kernel" / "pure" as the mode
        if self.all_reduce not in ("auto", "nccl"):
            raise InputError("all_reduce", self.all_reduce, "'auto' (custom or NCCL) or 'nccl'")
        for name in ("flops_frac", "bandwidth_frac", "weight_bandwidth_frac", "kv_bandwidth_frac"):
            checks.fraction(name, getattr(self, name), zero=False)
        for name in ("overhead_s", "overhead_s_per_sequence"):
            if not getattr(self, name) >= 0.0:
                raise InputError(name, getattr(self, name), "seconds >= 0")

    @classmethod
    def parse(cls, value: object) -> Efficiency:
        """An :class:`Efficiency` as given, or a mode (``"kernel"``, ``"pure"``, an
        :class:`~rackmath.specs.efficiency.EfficiencyMode`; None: the default) with no scalars."""
        if isinstance(value, cls):
            return value
        return KERNEL_GROUNDED if value is None else cls(mode=EfficiencyMode.parse(value))

    @property
    def scaled(self) -> bool:
        """Whether any scalar differs from 1 (or an overhead from 0)."""
        return replace(self, mode=EfficiencyMode.KERNEL, all_reduce="auto") != KERNEL_GROUNDED

    def scalars_text(self) -> str:
        """The scalars that differ from 1 (overheads from 0), e.g. ``flops_frac 0.75``."""
        parts = [
            f"{name} {getattr(self, name):g}"
            for name in ("flops_frac", "bandwidth_frac", "weight_bandwidth_frac", "kv_bandwidth_frac")
            if getattr(self, name) != 1.0
        ]
        parts += [
            f"{name} {getattr(self, name):g}"
            for name in ("overhead_s", "overhead_s_per_sequence")
            if getattr(self, name)
        ]
        return ", ".join(parts) or "no scalars"

    def table(self) -> EfficiencyTable:
        """These fractions as a per-operator table (:func:`table_from_fractions`)."""
        return table_from_fractions(
            source="pure roofline" if not self.scaled else f"roofline x {self.scalars_text()}",
            flops_frac=self.flops_frac,
            bandwidth_frac=self.bandwidth_frac,
            overhead_s=self.overhead_s,
            overhead_s_per_sequence=self.overhead_s_per_sequence,
            weight_bandwidth_frac=self.weight_bandwidth_frac,
            kv_bandwidth_frac=self.kv_bandwidth_frac,
        )


#: The default of every deployment, training job, search and page: fitted kernel curves, no
#: end-to-end scalars.
KERNEL_GROUNDED = Efficiency()
#: The lecture's roofline: every operator at its peak FLOP/s and bandwidth.
PURE_ROOFLINE = Efficiency(mode=EfficiencyMode.PURE)


@dataclass(frozen=True)
class StepTimes:
    """Times of one forward step, broadcast to a common shape (seconds)."""

    compute_s: FloatArray
    weight_fetch_s: FloatArray
    kv_fetch_s: FloatArray
    overhead_s: float

    @property
    def memory_s(self) -> FloatArray:
        return self.weight_fetch_s + self.kv_fetch_s

    @property
    def step_s(self) -> FloatArray:
        return np.maximum(self.compute_s, self.memory_s) + self.overhead_s

    @property
    def compute_bound(self) -> NDArray[np.bool_]:
        return self.compute_s >= self.memory_s

    @property
    def bottleneck(self) -> NDArray[np.str_]:
        """'compute', 'weights' or 'kv': the term that sets the step."""
        memory = np.where(self.weight_fetch_s >= self.kv_fetch_s, "weights", "kv")
        return np.where(self.compute_bound, "compute", memory)


def step_times(
    *,
    flops: ArrayLike,
    weight_bytes: ArrayLike,
    kv_bytes: ArrayLike,
    peak_flops_per_s: ArrayLike,
    bandwidth_bytes_per_s: ArrayLike,
    efficiency: Efficiency = PURE_ROOFLINE,
) -> StepTimes:
    """Roofline times of one step moving ``weight_bytes + kv_bytes`` and doing ``flops``."""
    flops_per_s = np.asarray(peak_flops_per_s, float) * efficiency.flops_frac
    bytes_per_s = np.asarray(bandwidth_bytes_per_s, float) * efficiency.bandwidth_frac
    compute, weights, kv = np.broadcast_arrays(
        np.asarray(flops, float) / flops_per_s,
        np.asarray(weight_bytes, float) / (bytes_per_s * efficiency.weight_bandwidth_frac),
        np.asarray(kv_bytes, float) / (bytes_per_s * efficiency.kv_bandwidth_frac),
    )
    return StepTimes(compute, weights, kv, efficiency.overhead_s)


def expected_distinct_experts(tokens: ArrayLike, experts: ArrayLike, per_token: ArrayLike) -> FloatArray:
    """Expected number of distinct experts ``B`` tokens touch when each picks ``k`` of ``E``.

    With uniform, independent routing an expert is missed by one token with probability
    ``1 - k/E``, so ``E * (1 - (1 - k/E)^B)`` experts are touched per MoE layer:
    ``k`` at ``B = 1``, approaching ``E`` as ``B`` grows. (Real routers are not uniform;
    skew lowers this count, so the uniform case is the upper bound on bytes read.)
    """
    e, k, b = num(experts), num(per_token), num(tokens)
    if type(e) is not np.ndarray and type(k) is not np.ndarray and type(b) is not np.ndarray and k < e:
        return e * -math.expm1(b * math.log1p(-k / e))  # one point: floats
    with np.errstate(divide="ignore"):  # k = E: log(0) = -inf, and every expert is read
        return np.asarray(e * -np.expm1(b * np.log1p(-k / e)), dtype=float)


def weight_bytes_read(
    tokens: ArrayLike,
    *,
    always_read_bytes: ArrayLike,
    expert_bytes: ArrayLike = 0.0,
    experts: ArrayLike = 1,
    experts_per_token: ArrayLike = 1,
) -> FloatArray:
    """Weight bytes a step over ``tokens`` tokens fetches.

    ``always_read_bytes + expert_bytes * E(1 - (1 - k/E)^tokens)``, where ``expert_bytes`` is
    one expert's bytes summed over the MoE layers. A dense model has ``expert_bytes = 0``.
    """
    distinct = expected_distinct_experts(tokens, experts, experts_per_token)
    return np.asarray(always_read_bytes, float) + np.asarray(expert_bytes, float) * distinct


def flop_per_byte(peak_flops_per_s: ArrayLike, bandwidth_bytes_per_s: ArrayLike) -> FloatArray:
    """The chip's ridge point: FLOPs it can do per byte it reads (H100 bf16: 989e12/3.35e12 = 295)."""
    return np.asarray(peak_flops_per_s, float) / np.asarray(bandwidth_bytes_per_s, float)


def dense_balance_batch(
    peak_flops_per_s: ArrayLike, bandwidth_bytes_per_s: ArrayLike, bytes_per_weight: ArrayLike
) -> FloatArray:
    """The lecture's "~300": the batch at which a dense model's weight fetch equals its compute.

    ``B * 2N / F = N * bytes / BW  =>  B* = F * bytes / (2 * BW)``. Not the chip's FLOP/byte
    ratio: it divides by the 2 FLOPs per MAC and multiplies by the bytes per weight.
    H100 at fp8: 1.979e15 * 1 / (2 * 3.35e12) = 295.
    """
    return (
        np.asarray(peak_flops_per_s, float)
        * np.asarray(bytes_per_weight, float)
        / (FLOPS_PER_MAC * np.asarray(bandwidth_bytes_per_s, float))
    )


def balance_batch(
    params_total: ArrayLike,
    params_active: ArrayLike,
    peak_flops_per_s: ArrayLike,
    bandwidth_bytes_per_s: ArrayLike,
    bytes_per_weight: ArrayLike,
) -> FloatArray:
    """Closed form with sparsity: ``B* = F * bytes / (2 * BW) * N_total / N_active``.

    From ``N_total * bytes / BW = B * 2 * N_active / F`` (all weights read, KV ignored).
    The lecture's DeepSeek (32 of 256 experts, sparsity 8) on a ~300 chip gives 2,400.
    """
    sparsity = np.asarray(params_total, float) / np.asarray(params_active, float)
    return dense_balance_batch(peak_flops_per_s, bandwidth_bytes_per_s, bytes_per_weight) * sparsity


def balance_batch_exact(
    *,
    flops_per_token: ArrayLike,
    kv_bytes_per_sequence: ArrayLike,
    always_read_bytes: ArrayLike,
    expert_bytes: ArrayLike,
    experts: ArrayLike,
    experts_per_token: ArrayLike,
    peak_flops_per_s: ArrayLike,
    bandwidth_bytes_per_s: ArrayLike,
    efficiency: Efficiency = PURE_ROOFLINE,
) -> FloatArray:
    """Batch at which compute time equals memory time, KV and routed experts included.

    Solves ``B * f / F' = (W(B) + B * kv) / BW'`` where ``W(B)`` is :func:`weight_bytes_read`.
    With ``g(B) = B (f/F' - kv/BW') - W(B)/BW'`` convex (``W`` is concave in ``B``) and
    ``g(0) < 0``, there is one root when ``f/F' > kv/BW'`` and none otherwise: then the KV
    fetch alone keeps every batch memory-bound and the result is NaN. Found by bisection
    on ``log B`` (60 halvings: relative error below 1e-12), broadcast over all inputs.
    """
    flops_per_s = np.asarray(peak_flops_per_s, float) * efficiency.flops_frac
    bytes_per_s = np.asarray(bandwidth_bytes_per_s, float) * efficiency.bandwidth_frac
    per_seq_surplus = np.asarray(flops_per_token, float) / flops_per_s - (
        np.asarray(kv_bytes_per_sequence, float) / (bytes_per_s * efficiency.kv_bandwidth_frac)
    )

    def gap(batch: FloatArray) -> FloatArray:
        weights = weight_bytes_read(
            batch,
            always_read_bytes=always_read_bytes,
            expert_bytes=expert_bytes,
            experts=experts,
            experts_per_token=experts_per_token,
        )
        weights_s = weights / (bytes_per_s * efficiency.weight_bandwidth_frac)
        return np.asarray(batch * per_seq_surplus - weights_s, dtype=float)

    shape = np.broadcast_shapes(
        np.shape(per_seq_surplus),
        np.shape(always_read_bytes),
        np.shape(expert_bytes),
        np.shape(experts),
        np.shape(experts_per_token),
    )
    lo = np.full(shape, np.log(1e-6))
    hi = np.full(shape, np.log(1e15))
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        below = gap(np.exp(mid)) < 0
        lo = np.where(below, mid, lo)
        hi = np.where(below, hi, mid)
    root = np.exp(0.5 * (lo + hi))
    solvable = (per_seq_surplus > 0) & (gap(np.exp(hi)) >= 0)
    return np.where(solvable, root, np.nan)


def latency_floor_s(weight_bytes: ArrayLike, bandwidth_bytes_per_s: ArrayLike) -> FloatArray:
    """No step is faster than reading every weight once: ``N_total * bytes / BW`` (all chips)."""
    return np.asarray(weight_bytes, float) / np.asarray(bandwidth_bytes_per_s, float)


def hbm_drain_time_s(capacity_bytes: ArrayLike, bandwidth_bytes_per_s: ArrayLike) -> FloatArray:
    """Time to read the whole memory once: capacity / bandwidth (H100: 80e9/3.35e12 = 23.9 ms).

    A step that reads everything in HBM can be no faster; one slower than this leaves
    bandwidth idle, so it is the natural period of a full-memory decode loop.
    """
    return np.asarray(capacity_bytes, float) / np.asarray(bandwidth_bytes_per_s, float)


def usable_bytes(capacity_bytes: ArrayLike, reserve_frac: ArrayLike) -> FloatArray:
    """Memory left for weights and KV once a share is reserved for activations, workspace
    and fragmentation: ``capacity * (1 - reserve_frac)``. 80e9 B with 10% reserved: 72e9 B."""
    return np.asarray(capacity_bytes, float) * (1.0 - np.asarray(reserve_frac, float))


def max_batch(
    *,
    capacity_bytes: ArrayLike,
    weight_bytes: ArrayLike,
    kv_bytes_per_sequence: ArrayLike,
    reserve_frac: ArrayLike = 0.0,
) -> FloatArray:
    """Largest whole number of sequences whose KV fits beside the weights.

    ``floor((capacity * (1 - reserve_frac) - weights) / kv_per_sequence)``, 0 if the weights
    alone do not fit.
    """
    room = usable_bytes(capacity_bytes, reserve_frac) - np.asarray(weight_bytes, float)
    with np.errstate(divide="ignore"):
        count = np.floor(room / np.asarray(kv_bytes_per_sequence, float))
    return np.asarray(np.maximum(count, 0.0), dtype=float)


def usd_per_million_tokens(
    step_s: ArrayLike, tokens_per_step: ArrayLike, chips: ArrayLike, usd_per_chip_hour: ArrayLike
) -> FloatArray:
    """Rental cost of a million tokens: ``step_s * chips * $/chip-s / tokens * 1e6``. The step
    and the tokens divide with NumPy's rules (0 tokens give ``inf``, one value as over a grid);
    the chips and the price, a deployment's single values mostly, multiply in as numbers."""
    usd_per_chip_s = num(usd_per_chip_hour) / SECONDS_PER_HOUR
    return np.asarray(step_s, float) * num(chips) * usd_per_chip_s / np.asarray(tokens_per_step, float) * 1e6


def utilization(work: ArrayLike, step_s: ArrayLike, rate: ArrayLike) -> FloatArray:
    """Achieved over peak: MFU with ``work`` in FLOPs and ``rate`` in FLOP/s, MBU with bytes."""
    return np.asarray(work, float) / (np.asarray(step_s, float) * np.asarray(rate, float))


def table_from_fractions(
    *,
    flops_frac: float = 1.0,
    bandwidth_frac: float = 1.0,
    overhead_s: float = 0.0,
    weight_bandwidth_frac: float = 1.0,
    kv_bandwidth_frac: float = 1.0,
    source: str = "fitted fractions",
    overhead_s_per_sequence: float = 0.0,
) -> EfficiencyTable:
    """A flat table: the same fraction of peak FLOP/s for every operator, HBM bandwidth at
    ``bandwidth_frac`` (times ``weight_bandwidth_frac`` for GEMMs, ``kv_bandwidth_frac`` for
    attention), no saturation in rows. The end-to-end calibration's few scalars in operator
    form: one curve per class for every format and family (:data:`ANY`)."""
    gemm = OpEfficiency(compute_frac=flops_frac, bandwidth_frac=bandwidth_frac * weight_bandwidth_frac)
    attention = OpEfficiency(compute_frac=flops_frac, bandwidth_frac=bandwidth_frac * kv_bandwidth_frac)
    flat = OpEfficiency(compute_frac=flops_frac, bandwidth_frac=bandwidth_frac)
    if gemm == PURE and attention == PURE and overhead_s == 0.0 and overhead_s_per_sequence == 0.0:
        return PURE_TABLE
    by_class = (
        (OpClass.GEMM, gemm),
        (OpClass.MOE, gemm),
        (OpClass.ATTENTION_DECODE, attention),
        (OpClass.ATTENTION_PREFILL, attention),
        (OpClass.ELEMENTWISE, flat),
    )
    return EfficiencyTable(
        curves=tuple((CurveKey(c, ANY, ANY), Curve(e, "", source)) for c, e in by_class),
        overhead_s=overhead_s,
        overhead_s_per_sequence=overhead_s_per_sequence,
        source=source,
    )
