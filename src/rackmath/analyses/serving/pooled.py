"""Serving analysis: a real model on real chips, through the per-operator core.

Here ``chips`` act as one ideal chip with ``chips`` times the FLOP/s, bandwidth and
capacity: the lecture's simplification. It is not a second model: the step is
:func:`rackmath.core.parallel.plan_step` on a one-rank plan over that pooled chip with
communication switched off, the same operators every planned deployment runs
(:mod:`rackmath.analyses.serving.planned`). Weights are assumed sharded evenly over all chips.

Efficiency: a deployment built by :func:`make_deployment` runs on the chip's fitted kernel
curves (``efficiency="kernel"``, :data:`rackmath.core.roofline.KERNEL_GROUNDED`; chips without
measured tables take a donor's curves scaled by their own peaks and say ``transferred``);
``efficiency="pure"`` (or :data:`~rackmath.core.roofline.PURE_ROOFLINE`) is the lecture's pure
roofline, and an explicit :class:`~rackmath.core.roofline.Efficiency` keeps its scalars on it.
See :mod:`rackmath.analyses.kernels.tables`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from rackmath.analyses.kernels import tables as et
from rackmath.analyses.serving.throughput import DecodeThroughput, batch_context_grid
from rackmath.core import architecture as arch
from rackmath.core import loads
from rackmath.core import memory as mem
from rackmath.core import parallel as par
from rackmath.core import roofline as rl
from rackmath.core import sharding as shard
from rackmath.core.chip_rates import ChipRates
from rackmath.core.memory import ChipMemory, ChipWeightBytes
from rackmath.core.sharding import ShardableModel
from rackmath.core.step import PlanStep
from rackmath.errors import DoesNotFitError, InputError
from rackmath.frames import Col, Layout, Tabular, deployment_labels, grid_layout
from rackmath.specs import checks
from rackmath.specs.bounds import MAX_CHIPS, MAX_USD_PER_CHIP_HOUR
from rackmath.specs.efficiency import EfficiencyTable
from rackmath.specs.hardware import SystemSpec
from rackmath.specs.model import WEIGHT_CLASSES, ModelSpec, parse_weight_classes
from rackmath.specs.precision import Precision

FloatArray = NDArray[np.float64]

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
class Deployment:
    """A model on ``chips`` chips of a system, with precisions, price and efficiency."""

    model: ModelSpec
    system: SystemSpec
    chips: int
    precisions: Precisions
    usd_per_chip_hour: float
    efficiency: rl.Efficiency = rl.PURE_ROOFLINE
    memory_reserve_frac: float = DEFAULT_MEMORY_RESERVE_FRAC
    notes: tuple[str, ...] = field(default=())

    # Per-deployment constants, derived once.
    @cached_property
    def params(self) -> arch.ParamCounts:
        return arch.param_counts(self.model)

    @property
    def peak_flops_per_s(self) -> float:
        return self.chips * self.system.chip.peak_flops(self.precisions.compute)

    @property
    def bandwidth_bytes_per_s(self) -> float:
        return self.chips * self.system.chip.hbm_bandwidth_bytes_per_s

    @property
    def capacity_bytes(self) -> float:
        return self.chips * self.system.chip.hbm_capacity_bytes

    @property
    def weight_bytes(self) -> float:
        """Bytes of all weights held in HBM, each tensor class at its own storage precision
        (:func:`rackmath.core.architecture.weight_bytes_total`)."""
        return arch.weight_bytes_total(self.model, self.precisions.weights)

    @property
    def weight_formats(self) -> dict[str, str]:
        """Each weight class's storage format in this deployment (:data:`WEIGHT_CLASSES`)."""
        return {c: self.model.weight_precision(c, self.precisions.weights).value for c in WEIGHT_CLASSES}

    @property
    def weight_bytes_per_chip(self) -> float:
        return self.weight_bytes / self.chips

    @property
    def usable_bytes_per_chip(self) -> float:
        return float(rl.usable_bytes(self.system.chip.hbm_capacity_bytes, self.memory_reserve_frac))

    @property
    def weights_fit(self) -> bool:
        return self.weight_bytes_per_chip <= self.usable_bytes_per_chip

    def labels(self) -> dict[str, Any]:
        """What a result is of, for its ``to_dict``: model, system and chip count."""
        return {"model": self.model.id, "system": self.system.id, "chips": self.chips}

    @property
    def usable_bytes(self) -> float:
        """HBM the pooled chip may fill: ``chips x capacity x (1 - reserve)``."""
        return self.chips * self.usable_bytes_per_chip

    @cached_property
    def _pooled_weights(self) -> ChipWeightBytes:
        return mem.weight_bytes_per_chip(self.shardable, tp=1, pp=1, ep=1)

    def memory(
        self, batch: ArrayLike, kv_bytes_per_sequence: ArrayLike, tokens_in_flight: ArrayLike | None = None
    ) -> ChipMemory:
        """HBM the pooled chip holds: the one serving account
        (:func:`rackmath.core.memory.serving_memory_per_chip`, as deployments and search use it)
        for the plan ``tp = pp = dp = ep = 1`` on ``chips`` x one chip: every weight, ``batch``
        sequences' KV cache and the live activations of ``tokens_in_flight`` tokens (default
        one per sequence: decode). The lecture's weights + KV check plus the activation
        workspace (``17 h`` values a token, Korthikanti et al. 2022)."""
        b = np.asarray(batch, float)
        return mem.serving_memory_per_chip(
            self.shardable,
            batch=b,
            kv_bytes_per_sequence=kv_bytes_per_sequence,
            tokens_in_flight=b if tokens_in_flight is None else tokens_in_flight,
            tp=1,
            pp=1,
            dp=1,
            ep=1,
            weights=self._pooled_weights,
        )

    @property
    def attention_precision(self) -> Precision:
        """The precision the attention core computes in: the KV cache's where the chip has
        that peak (FP8 attention over an FP8 cache), else bf16, else the GEMMs' precision
        (a chip listed with low-precision peaks only)."""
        peaks = self.system.chip.peak_flops_per_s
        for candidate in (self.precisions.kv.compute_class, Precision.BF16):
            if candidate in peaks:
                return candidate
        return self.precisions.compute

    @cached_property
    def efficiency_table(self) -> EfficiencyTable:
        """The per-operator efficiencies the step runs on: the chip's fitted kernel curves
        (scalars multiplied in) when ``efficiency.kernel_grounded``, else the scalars on the
        pure roofline (:func:`rackmath.analyses.kernels.tables.grounded_table`)."""
        return et.grounded_table(self.system.chip.id, self.efficiency)

    @property
    def efficiency_mode(self) -> str:
        """``"kernel"`` (fitted kernel curves) or ``"pure"`` (the roofline, scalars aside)."""
        return "kernel" if self.efficiency.kernel_grounded else "pure"

    @property
    def transferred_from(self) -> str | None:
        """The measured chip whose kernel curves this chip borrows (None: its own, or pure)."""
        return et.donor_of(self.system.chip.id) if self.efficiency.kernel_grounded else None

    @property
    def efficiency_label(self) -> str:
        """One line for reports: which efficiency the numbers use and where it comes from."""
        if not self.efficiency.kernel_grounded:
            return "pure roofline" if self.efficiency == rl.PURE_ROOFLINE else "roofline x fitted scalars"
        donor = self.transferred_from
        chip = self.system.chip.id
        where = f"transferred from {donor}, scaled by {chip}'s own peaks" if donor else "measured"
        fit = self.efficiency_table.source.rsplit(": ", 1)[-1]  # the package fit, without the transfer prefix
        return f"kernel-grounded ({where}; {fit})"

    def pure(self) -> Deployment:
        """The same deployment on the pure roofline (the lecture's numbers)."""
        return replace(self, efficiency=rl.PURE_ROOFLINE)

    def chip_rates(self, chips: float = 1.0) -> ChipRates:
        """What ``chips`` chips pooled offer the operators (peaks, bandwidth, efficiency, and
        the compute and KV precisions that pick each operator's kernel format)."""
        chip = self.system.chip
        return ChipRates(
            peak_flops_per_s={p.value: chips * f for p, f in chip.peak_flops_per_s.items()},
            bandwidth_bytes_per_s=chips * chip.hbm_bandwidth_bytes_per_s,
            efficiency=self.efficiency_table,
            compute=self.precisions.compute,
            kv=self.precisions.kv,
        )

    @cached_property
    def shardable(self) -> ShardableModel:
        return shard.shardable(self.model, self.precisions.weights)

    def ideal_step(self, load: loads.StepLoad) -> PlanStep:
        """The pooled ideal chip: a one-rank plan on ``chips`` x one chip, no communication."""
        return par.plan_step(
            self.shardable,
            tp=1,
            pp=1,
            dp=1,
            ep=1,
            load=load,
            rates=self.chip_rates(self.chips),
            topo=None,
            communication=False,
        )

    @cached_property
    def moe_split(self) -> tuple[float, float, int, int]:
        return arch.moe_weight_bytes(self.model, self.precisions.weights)

    def kv_bytes_per_sequence(self, context: ArrayLike) -> FloatArray:
        return arch.kv_bytes_per_sequence(self.model, context, self.precisions.kv.bytes_per_element)

    def weight_bytes_read(self, tokens: ArrayLike) -> FloatArray:
        always, expert, experts, per_token = self.moe_split
        return rl.weight_bytes_read(
            tokens,
            always_read_bytes=always,
            expert_bytes=expert,
            experts=experts,
            experts_per_token=per_token,
        )


def make_deployment(
    model: ModelSpec,
    system: SystemSpec,
    *,
    chips: int | None = None,
    weights: Precision | str | None = None,
    kv: Precision | str | None = None,
    compute: Precision | str | None = None,
    usd_per_chip_hour: float | None = None,
    efficiency: rl.Efficiency | str = rl.KERNEL_GROUNDED,
    memory_reserve_frac: float = DEFAULT_MEMORY_RESERVE_FRAC,
    weight_classes: str | Mapping[str, str | Precision] | None = None,
) -> Deployment:
    """Validate the user's choices once and fill defaults from the model and the catalog.

    ``efficiency``: ``"kernel"`` (default: fitted kernel curves), ``"pure"`` (the roofline) or
    an :class:`~rackmath.core.roofline.Efficiency`. ``weight_classes``: weights per tensor
    class (``"experts=nvfp4,attention=fp8"``, :func:`rackmath.specs.model.parse_weight_classes`),
    the other classes in ``weights`` (default: as shipped); the deployment then serves the
    model as so stored (:meth:`ModelSpec.with_weight_precisions`)."""
    efficiency = et.parse_mode(efficiency)
    if weight_classes is not None:
        classes = parse_weight_classes(weight_classes)
        base = Precision.parse(weights, "weights precision") if weights else None
        model, weights = model.with_weight_precisions(classes, base), None
    n_chips = system.default_chips if chips is None else checks.whole("chips", chips, maximum=MAX_CHIPS)
    defaults = default_precisions(model, system)
    precisions = Precisions(
        weights=Precision.parse(weights, "weights precision") if weights else defaults.weights,
        kv=Precision.parse(kv, "kv precision") if kv else defaults.kv,
        compute=Precision.parse(compute, "compute precision") if compute else defaults.compute,
    )
    system.chip.peak_flops(precisions.compute)  # refuses a precision the chip lacks
    price = (
        system.chip.price_usd_per_chip_hour.value_usd
        if usd_per_chip_hour is None
        else checks.between("price per chip-hour", usd_per_chip_hour, 0, MAX_USD_PER_CHIP_HOUR, low_open=True)
    )
    checks.fraction("memory reserve", memory_reserve_frac, one=False)
    notes = []
    if n_chips > system.scale_up_domain_chips:
        notes.append(
            f"{n_chips} chips exceed one {system.id} scale-up domain of "
            f"{system.scale_up_domain_chips}; communication is not modelled here."
        )
    return Deployment(
        model=model,
        system=system,
        chips=n_chips,
        precisions=precisions,
        usd_per_chip_hour=price,
        efficiency=efficiency,
        memory_reserve_frac=memory_reserve_frac,
        notes=tuple(notes),
    )


def check_context(model: ModelSpec, tokens: ArrayLike, field: str = "context") -> None:
    """Refuse a context longer than the model's own window (``max_position_embeddings``).

    The one rule behind ``--context`` (and ``--input-len + --output-len``) of every command,
    ``rm.decode`` / ``rm.prefill`` / ``rm.explain``, and the contexts a sweep skips."""
    window = model.max_context
    longest = float(np.max(tokens)) if np.size(tokens) else 0.0
    if window and longest > window:
        raise InputError(
            field, f"{longest:,.0f} tokens", f"at most {window:,} tokens ({model.id}'s context window)"
        )


def require_weights_fit(deployment: Deployment) -> Deployment:
    """Refuse a deployment whose weights alone overflow each chip's usable memory (after the
    reserve): no batch of it runs, so no step time or cost of it means anything. The one rule
    behind ``explain``, ``prices`` (its reference deployment) and the web pages."""
    d = deployment
    if not d.weights_fit:
        raise DoesNotFitError(
            f"{d.model.id} ({d.precisions.weights.value} weights) on {d.chips} x {d.system.chip.id}",
            d.weight_bytes_per_chip,
            d.usable_bytes_per_chip,
        )
    return d


@dataclass(frozen=True)
class DecodeGrid(DecodeThroughput, Tabular):
    """One decode step for every (batch, context) pair; arrays are ``len(batch) x len(context)``.

    ``batch`` sequences each hold ``context`` tokens of cache and produce one token.
    """

    frame_layout = grid_layout(
        Col("times.compute_s", "compute_s", "s"),
        Col("times.weight_fetch_s", "weight_fetch_s", "s"),
        Col("times.kv_fetch_s", "kv_fetch_s", "s"),
        Col("times.bottleneck", "bottleneck"),
        Col("mfu", "mfu_frac", "1"),
        Col("mbu", "mbu_frac", "1"),
        Col("kv_bytes_per_chip", "kv_bytes_per_chip", "bytes"),
        labels=deployment_labels(),
    )

    deployment: Deployment
    batch: FloatArray
    context: FloatArray
    times: PlanStep
    flops: FloatArray
    kv_bytes_per_sequence: FloatArray

    @property
    def step_s(self) -> FloatArray:
        """Sum over operators of max(compute, memory): the realistic step."""
        return self.times.step_s

    @property
    def blackboard_step_s(self) -> FloatArray:
        """The lecture's max(total compute, total memory): the lower bound."""
        return self.times.blackboard_s

    @property
    def kv_bytes_per_chip(self) -> FloatArray:
        """The batch's KV cache, spread evenly over the chips like the weights."""
        return self.batch * self.kv_bytes_per_sequence / self.deployment.chips

    @property
    def mfu(self) -> FloatArray:
        return rl.utilization(self.flops, self.step_s, self.deployment.peak_flops_per_s)

    @property
    def mbu(self) -> FloatArray:
        """Bytes the step moves (weights, KV, activations) over what peak bandwidth moves in it."""
        return rl.utilization(self.times.bytes_moved, self.step_s, self.deployment.bandwidth_bytes_per_s)

    @property
    def fits(self) -> NDArray[np.bool_]:
        """Weights, KV and activations fit the pooled chip (:meth:`Deployment.memory`)."""
        d = self.deployment
        return np.asarray(d.memory(self.batch, self.kv_bytes_per_sequence).total_bytes <= d.usable_bytes)


def decode(deployment: Deployment, batch: ArrayLike, context: ArrayLike) -> DecodeGrid:
    """Decode step over a batch x context grid (1-D inputs become an outer grid)."""
    b, c = batch_context_grid(batch, context)
    d = deployment
    load = loads.decode_load(d.model, b, c, d.precisions.kv.bytes_per_element)
    step = d.ideal_step(load)
    shape = step.step_s.shape
    return DecodeGrid(
        deployment=d,
        batch=np.broadcast_to(b, shape),
        context=np.broadcast_to(c, shape),
        times=step,
        flops=np.broadcast_to(b * arch.decode_flops_per_token(d.model, c), shape),
        kv_bytes_per_sequence=np.broadcast_to(d.kv_bytes_per_sequence(c), shape),
    )


@dataclass(frozen=True)
class PrefillGrid(Tabular):
    """One prefill pass of ``batch`` prompts of ``length`` tokens each (KV written, not read)."""

    frame_layout = Layout(
        columns=(
            *deployment_labels(),
            Col("batch", "batch", "prompts"),
            Col("length", "prompt_tokens", "tokens"),
            Col("times.step_s", "step_s", "s"),
            Col("times.bottleneck", "bottleneck"),
            Col("tokens", "tokens", "tokens"),
            Col("usd_per_million_input_tokens", "usd_per_million_input_tokens", "USD per 1e6 tokens"),
            Col("mfu", "mfu_frac", "1"),
        ),
        dims=("batch", "prompt"),
        coords=("batch", "prompt_tokens"),
    )

    deployment: Deployment
    batch: FloatArray
    length: FloatArray
    times: PlanStep
    flops: FloatArray

    @property
    def tokens(self) -> FloatArray:
        return self.batch * self.length

    @property
    def step_s(self) -> FloatArray:
        return self.times.step_s

    @property
    def usd_per_million_input_tokens(self) -> FloatArray:
        d = self.deployment
        return rl.usd_per_million_tokens(self.step_s, self.tokens, d.chips, d.usd_per_chip_hour)

    @property
    def mfu(self) -> FloatArray:
        return rl.utilization(self.flops, self.step_s, self.deployment.peak_flops_per_s)


def prefill(deployment: Deployment, batch: ArrayLike, length: ArrayLike) -> PrefillGrid:
    """One prefill pass of ``batch`` prompts of ``length`` tokens (KV written, not read)."""
    b, n = batch_context_grid(batch, length)
    d = deployment
    step = d.ideal_step(loads.prefill_load(d.model, b, n, d.precisions.kv.bytes_per_element))
    shape = step.step_s.shape
    return PrefillGrid(
        deployment=d,
        batch=np.broadcast_to(b, shape),
        length=np.broadcast_to(n, shape),
        times=step,
        flops=np.broadcast_to(b * arch.prefill_flops_per_sequence(d.model, n), shape),
    )


@dataclass(frozen=True)
class BalancePoint(Tabular):
    """Where weight fetch (and KV) time equals compute time; as a table, one row per context
    of the exact balance batch, the closed forms repeated."""

    frame_layout = Layout(
        columns=(
            Col("flop_per_byte", "flop_per_byte", "FLOP/byte"),
            Col("dense_balance_batch", "dense_balance_batch", "sequences"),
            Col("sparsity", "sparsity", "1"),
            Col("balance_batch", "balance_batch", "sequences"),
            Col("balance_batch_with_kv", "balance_batch_with_kv", "sequences"),
        ),
        dims=("context",),
    )

    flop_per_byte: float  # the chip's ridge point, FLOP/s over bytes/s
    dense_balance_batch: float  # the lecture's "~300": F * bytes_per_weight / (2 BW)
    sparsity: float  # N_total / N_active
    balance_batch: float  # closed form: dense_balance_batch * sparsity
    balance_batch_with_kv: FloatArray  # exact, per context; NaN where KV keeps every batch memory-bound


def balance(deployment: Deployment, context: ArrayLike) -> BalancePoint:
    d = deployment
    c = np.atleast_1d(np.asarray(context, float))
    bytes_per_weight = d.precisions.weights.bytes_per_element
    always, expert, experts, per_token = d.moe_split
    return BalancePoint(
        flop_per_byte=float(rl.flop_per_byte(d.peak_flops_per_s, d.bandwidth_bytes_per_s)),
        dense_balance_batch=float(
            rl.dense_balance_batch(d.peak_flops_per_s, d.bandwidth_bytes_per_s, bytes_per_weight)
        ),
        sparsity=d.params.total / d.params.active,
        balance_batch=float(
            rl.balance_batch(
                d.params.total,
                d.params.active,
                d.peak_flops_per_s,
                d.bandwidth_bytes_per_s,
                bytes_per_weight,
            )
        ),
        balance_batch_with_kv=rl.balance_batch_exact(
            flops_per_token=arch.decode_flops_per_token(d.model, c),
            kv_bytes_per_sequence=d.kv_bytes_per_sequence(c),
            always_read_bytes=always,
            expert_bytes=expert,
            experts=experts,
            experts_per_token=per_token,
            peak_flops_per_s=d.peak_flops_per_s,
            bandwidth_bytes_per_s=d.bandwidth_bytes_per_s,
            efficiency=d.efficiency,
        ),
    )


def latency_floor_bytes(deployment: Deployment) -> float:
    """Weight bytes a step reads when every expert is touched (the input embedding is a
    lookup of a few rows, so it is left out)."""
    d = deployment
    always, expert, experts, _ = d.moe_split
    return always + expert * experts


def latency_floor_s(deployment: Deployment) -> float:
    """All weights read once over all chips (every expert touched)."""
    d = deployment
    return float(
        rl.latency_floor_s(latency_floor_bytes(d), d.bandwidth_bytes_per_s * d.efficiency.bandwidth_frac)
    )


def hbm_drain_time_s(deployment: Deployment) -> float:
    chip = deployment.system.chip
    return float(rl.hbm_drain_time_s(chip.hbm_capacity_bytes, chip.hbm_bandwidth_bytes_per_s))


def max_batch(deployment: Deployment, context: ArrayLike) -> FloatArray:
    """Most decode sequences of ``context`` tokens whose KV and activations fit beside the
    weights on the pooled chip (:meth:`Deployment.memory`; 0 when the weights alone do not)."""
    d = deployment
    kv = d.kv_bytes_per_sequence(context)
    one, empty = d.memory(1.0, kv), d.memory(0.0, kv)
    return mem.max_concurrency(d.usable_bytes, empty.total_bytes, one.total_bytes - empty.total_bytes)
