"""The parts a :class:`~rackmath.analyses.serving.deployment.Deployment` is made of: its
precisions, its plan's dimensions (one plan, or the search's thousands as arrays) and what one
chip holds against what it may fill.

Memory convention, one for every fit (serving, search, simulation, training): a chip holds
``weights + KV + activations`` (+ training's gradients and optimizer states) and fits when that
is at most its usable HBM: ``capacity x (1 - reserve)``, or what a runtime's memory flag grants
(:meth:`~rackmath.analyses.serving.deployment.Deployment.usable_for`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from rackmath.core import memory as mem
from rackmath.core import numeric
from rackmath.core.lazy import cached_property
from rackmath.core.memory import ChipWeightBytes
from rackmath.core.step import PlanStep
from rackmath.errors import InputError
from rackmath.frames import Col, deployment_labels
from rackmath.specs.hardware import SystemSpec
from rackmath.specs.model import ModelSpec
from rackmath.specs.plan import ParallelPlan
from rackmath.specs.precision import Precision

FloatArray = NDArray[np.float64]

#: What a grid is of: model, system, chips, precisions, then its plan and efficiency.
GRID_LABELS = (
    *deployment_labels(),
    Col("deployment.plan_text", "plan"),
    Col("deployment.efficiency_label", "efficiency"),
)

#: Share of HBM kept free for activations, workspace and fragmentation when sizing the
#: KV cache. vLLM's default ``gpu_memory_utilization=0.9`` leaves the same 10%.
DEFAULT_MEMORY_RESERVE_FRAC = 0.10


@dataclass(frozen=True)
class Precisions:
    """Storage format of weights and KV cache, and the compute precision (selects the peak)."""

    weights: Precision
    kv: Precision
    compute: Precision


def default_precisions(model: ModelSpec, system: SystemSpec) -> Precisions:
    """Weights as the model ships; compute at their element format when the chip has it,
    else bf16 (weight-only quantization); KV cache as the checkpoint states it, else bf16.

    Weights stored per class (:meth:`ModelSpec.with_weight_precisions`): compute goes down to
    the narrowest class the chip has a peak for, so that each operator runs on its own
    weights' kernel (:func:`rackmath.specs.precision.gemm_formats`: NVFP4 experts on the FP4
    peak, FP8 attention on FP8 kernels, a bf16 head in bf16)."""
    weights = model.native_weight_precision
    available = system.chip.peak_flops_per_s
    classes = {weights.compute_class, *(p.compute_class for _, p in model.weight_precision_by_class)}
    own = weights.compute_class
    narrower = [c for c in classes if c in available and c.bytes_per_element < own.bytes_per_element]
    if narrower:
        compute = min(narrower, key=lambda c: c.bytes_per_element)
    else:  # the shipped format's own peak, else bf16
        compute = own if own in available else Precision.BF16
    return Precisions(weights=weights, kv=model.native_kv_precision or Precision.BF16, compute=compute)


@dataclass(frozen=True)
class PlanDims:
    """A plan's dimensions as numbers or NumPy arrays: one plan, or the search's thousands at
    once (:class:`~rackmath.specs.plan.ParallelPlan` for the fields)."""

    tp: ArrayLike
    pp: ArrayLike
    dp: ArrayLike
    ep: ArrayLike
    moe_tp: ArrayLike = 0
    redundant_experts: ArrayLike = 0
    skew: ArrayLike = 1.0
    tbo: ArrayLike = 0.0
    #: context-parallel ranks per DP rank (1: none) and how they talk
    cp: ArrayLike = 1
    cp_comm: str = "ag"
    #: the slowest stage's share of a pass (head included), the heaviest stage's share of the
    #: layers' weights and of the layers (None: computed when needed,
    #: :meth:`Deployment.with_stages`; None for the pool)
    stage_frac: ArrayLike | None = None
    layer_frac: ArrayLike | None = None
    weight_frac: ArrayLike | None = None

    @classmethod
    def of(cls, plan: ParallelPlan) -> PlanDims:
        p = plan
        return cls(p.tp, p.pp, p.dp, p.ep, p.moe_tp, p.redundant_experts, p.skew, p.tbo, p.cp, p.cp_comm)

    def as_numbers(self) -> PlanDims:
        """These dimensions with every single number a float (arrays and None as they
        are): what the step's formulas make of them anyway, made once per deployment."""
        numbers: dict[str, Any] = {
            k: numeric.num(v) if type(v) in (int, float) else v for k, v in vars(self).items()
        }
        return PlanDims(**numbers)

    @property
    def engine_chips(self) -> Any:
        """Chips of one engine (one scheduler per data-parallel rank; a CP group is one
        engine): ``tp x pp x cp``."""
        return numeric.num(self.tp) * numeric.num(self.pp) * numeric.num(self.cp)


#: One rank over the pool: the ideal chip's dimensions.
POOLED_DIMS = PlanDims(1, 1, 1, 1)


@dataclass(frozen=True)
class MemoryPerChip:
    """HBM one chip holds against what it may fill (bytes; arrays broadcast over plan and
    grid). The chip is the heaviest stage's; a pooled deployment's chip is the whole pool.

    Serving holds weights (by sharding rule in ``weights``), KV cache and live activations;
    training adds gradients, optimizer states and ZeRO-3's gathered buckets (``kv_bytes`` 0).
    It fits when ``total_bytes <= usable_bytes`` (the module's one convention)."""

    weights_bytes: Any
    kv_bytes: Any
    activation_bytes: Any
    capacity_bytes: float
    usable_bytes: Any
    grads_bytes: float = 0.0
    optimizer_bytes: float = 0.0
    #: ZeRO-3's gathered parameters: the bucket in use and the one prefetched
    gathered_bytes: float = 0.0
    #: the weights by sharding rule (serving; None for training's model states)
    weights: ChipWeightBytes | None = None
    #: training: micro-batches whose activations the busiest stage holds at its peak
    in_flight_microbatches: float | None = None

    @classmethod
    def serving(
        cls,
        weights: ChipWeightBytes,
        kv_bytes: Any,
        activation_bytes: Any,
        capacity_bytes: float,
        usable_bytes: Any,
    ) -> MemoryPerChip:
        """What a serving chip holds: weights by sharding rule, KV cache and activations (no
        gradients, optimizer states or gathered buckets), built in one step
        (:func:`rackmath.core.numeric.frozen_record`: a point builds one)."""
        return numeric.frozen_record(
            cls,
            weights_bytes=weights.total,
            kv_bytes=kv_bytes,
            activation_bytes=activation_bytes,
            capacity_bytes=capacity_bytes,
            usable_bytes=usable_bytes,
            grads_bytes=0.0,
            optimizer_bytes=0.0,
            gathered_bytes=0.0,
            weights=weights,
            in_flight_microbatches=None,
        )

    @cached_property
    def total_bytes(self) -> Any:
        """What the chip holds: weights + KV + activations (+ gradients, optimizer, gathered)."""
        held = self.weights_bytes + self.kv_bytes + self.activation_bytes
        if self.grads_bytes or self.optimizer_bytes or self.gathered_bytes:
            held = held + self.grads_bytes + self.optimizer_bytes + self.gathered_bytes
        return held

    @property
    def reserve_bytes(self) -> Any:
        """HBM kept free: capacity less what may be filled."""
        return self.capacity_bytes - self.usable_bytes

    @property
    def fits(self) -> Any:
        total = self.total_bytes
        if type(total) is np.ndarray and total.ndim:  # a grid (a point's is 1x1): an array
            return np.asarray(total <= self.usable_bytes)
        return bool(total <= self.usable_bytes)

    @property
    def short_by_bytes(self) -> Any:
        """How much more HBM the chip would need (0 when it fits)."""
        short = np.maximum(np.asarray(self.total_bytes) - self.usable_bytes, 0.0)
        return short if np.ndim(short) else float(short)

    def to_dict(self) -> dict[str, Any]:
        """The first point's figures (a one-point memory is the usual caller's)."""

        def scalar(x: Any) -> float:
            return float(np.asarray(x).ravel()[0])

        w = self.weights
        by_component = (
            {}
            if w is None
            else {
                "weights_bytes_by_component": {
                    "tp_sharded": scalar(w.tp_sharded),
                    "replicated": scalar(w.replicated),
                    "routed_experts": scalar(w.routed_experts),
                    "vocab": scalar(w.vocab),
                }
            }
        )
        in_flight = (
            {}
            if self.in_flight_microbatches is None
            else {"in_flight_microbatches": self.in_flight_microbatches}
        )
        return {
            **by_component,
            "weights_bytes": scalar(self.weights_bytes),
            "kv_bytes": scalar(self.kv_bytes),
            "activation_bytes": scalar(self.activation_bytes),
            "grads_bytes": self.grads_bytes,
            "optimizer_bytes": self.optimizer_bytes,
            "gathered_bytes": self.gathered_bytes,
            **in_flight,
            "total_bytes": scalar(self.total_bytes),
            "reserve_bytes": scalar(self.reserve_bytes),
            "usable_bytes": scalar(self.usable_bytes),
            "capacity_bytes": self.capacity_bytes,
            "fits": bool(np.asarray(self.fits).ravel()[0]),
            "short_by_bytes": scalar(self.short_by_bytes),
        }


def check_context_parallel(cp: int, tokens: ArrayLike, what: str) -> None:
    """Refuse a CP degree beyond a sequence's KV blocks (one block of 16 tokens per CP rank
    at least, :func:`rackmath.core.memory.max_context_parallel`), in one line."""
    if cp == 1:
        return
    shortest = float(np.min(np.asarray(tokens, float)))
    most = int(mem.max_context_parallel(shortest))
    if cp > most:
        raise InputError(
            "plan cp",
            cp,
            f"at most {most} for a {shortest:,.0f}-token {what}: each CP rank holds one "
            f"{mem.KV_BLOCK_TOKENS}-token KV block of it at least (try cp={2 ** int(np.log2(most))}, "
            f"or a {cp * mem.KV_BLOCK_TOKENS:,}-token {what})",
        )


def one_point(b: FloatArray, c: FloatArray) -> tuple[Any, Any, tuple[int, ...] | None]:
    """A one-point grid as two floats (the formulas then compute on floats, not 1x1 arrays)
    and the shape the answer takes; a larger grid as it is."""
    if b.size == 1 and c.size == 1:
        # floats (not 0-d arrays or NumPy scalars): every formula then takes the one-point path
        return b.item(), c.item(), b.shape if b.ndim >= c.ndim else c.shape  # all 1s
    return b, c, None


def at_shape(x: Any, shape: tuple[int, ...]) -> Any:
    """``x`` broadcast to ``shape``: itself where it has that shape already (``np.broadcast_to``
    costs ~2 us even then, a read-only view of the same values), else a broadcast view."""
    return x if type(x) is np.ndarray and x.shape == shape else np.broadcast_to(x, shape)


def broadcast_to_step(b: FloatArray, c: FloatArray, step: PlanStep) -> tuple[FloatArray, FloatArray]:
    """The grid's axes broadcast to the step's shape."""
    shape = step.step_s.shape
    return at_shape(b, shape), at_shape(c, shape)
