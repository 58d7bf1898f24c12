"""A model on a real topology under a parallel plan: validation, memory per chip, step times.

:class:`PlannedDeployment` wraps the foundation's :class:`~rackmath.analyses.serving.pooled.Deployment`
(model, system, precisions, price, efficiency) with a :class:`~rackmath.specs.plan.ParallelPlan`
and a :class:`~rackmath.core.parallel.Topology`, and answers through
:mod:`rackmath.core.parallel` (which itself calls :func:`rackmath.core.roofline.step_times`
and :mod:`rackmath.core.collectives`). With ``tp = N``, ``pp = dp = 1`` and communication
off it gives the foundation's ideal-chip numbers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from rackmath.analyses.serving import pooled
from rackmath.analyses.serving.throughput import DecodeThroughput, batch_context_grid
from rackmath.core import loads, numeric
from rackmath.core import memory as mem
from rackmath.core import network as net
from rackmath.core import parallel as par
from rackmath.core import roofline as rl
from rackmath.core import sharding as shard
from rackmath.core.chip_rates import ChipRates
from rackmath.core.loads import StepLoad
from rackmath.core.memory import ChipWeightBytes
from rackmath.core.network import DEFAULT_ACTIVATION_BYTES, CommOverlap, Topology
from rackmath.core.sharding import ShardableModel, StageSplit
from rackmath.core.step import PlanStep
from rackmath.errors import InputError
from rackmath.frames import Col, Tabular, deployment_labels, grid_layout
from rackmath.specs import checks
from rackmath.specs.hardware import SystemSpec
from rackmath.specs.model import ModelSpec
from rackmath.specs.plan import ParallelPlan
from rackmath.specs.precision import Precision

FloatArray = NDArray[np.float64]


def topology(system: SystemSpec, chips_per_domain: int | None = None) -> Topology:
    """The system's two network levels from the catalog; ``chips_per_domain`` spreads a
    deployment over more domains than it needs (at most the domain's size)."""
    chip = system.chip
    up = chip.scale_up_bandwidth_bytes_per_s_per_direction
    out = chip.scale_out_bandwidth_bytes_per_s_per_direction
    if up is None or out is None:
        raise InputError(
            f"{chip.id} network bandwidth", None, "scale-up and scale-out bandwidth in the chip catalog"
        )
    s = system.scale_up_domain_chips if chips_per_domain is None else chips_per_domain
    checks.whole(
        "chips per domain",
        s,
        maximum=system.scale_up_domain_chips,
        allowed=f"1 to {system.scale_up_domain_chips} ({system.id}'s domain)",
    )
    return Topology(
        chips_per_domain=float(s),
        scale_up_bytes_per_s=up,
        scale_out_bytes_per_s=out,
        scale_up_latency_s=system.scale_up_latency_s,
        scale_out_latency_s=system.scale_out_latency_s,
    )


@dataclass(frozen=True)
class PlanCheck:
    """Whether a plan suits a model on a topology: the reasons it does not, and where it
    crosses domain boundaries."""

    plan: ParallelPlan
    reasons: tuple[str, ...]
    crossings: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.reasons


def check_plan(
    model: ModelSpec,
    plan: ParallelPlan,
    topo: Topology,
    *,
    chips: int | None = None,
    allow_uneven_stages: bool = True,
) -> PlanCheck:
    """Every rule a serving plan must satisfy, each failure with its reason. Layers that do
    not divide by ``pp`` are split by the tool (:func:`rackmath.core.sharding.pipeline_split`)
    unless ``allow_uneven_stages`` is False."""
    reasons = []
    heads = model.attention.num_heads
    if chips is not None and chips != plan.chips:
        reasons.append(
            f"chips = pp x dp x tp x cp = {plan.pp} x {plan.dp} x {plan.tp} x {plan.cp} "
            f"= {plan.chips}, not {chips}"
        )
    if heads % plan.tp:
        reasons.append(f"{heads} attention heads do not divide by tp = {plan.tp}")
    experts = model.moe.num_experts if model.is_moe and model.moe else 1
    if not model.is_moe and plan.ep > 1:
        reasons.append(f"{model.id} is dense: ep must be 1, got {plan.ep}")
    elif experts + plan.redundant_experts < plan.ep:
        reasons.append(
            f"ep = {plan.ep} exceeds {experts} experts + {plan.redundant_experts} redundant slots "
            f"(every EP rank holds one slot at least): set redundant_experts >= {plan.ep - experts}"
        )
    if plan.pp > model.num_layers:
        reasons.append(f"pp = {plan.pp} exceeds the {model.num_layers} layers")
    elif model.num_layers % plan.pp and not allow_uneven_stages:
        reasons.append(
            f"{model.num_layers} layers do not divide by pp = {plan.pp} "
            "(allow uneven stages to split them anyway)"
        )
    s = int(topo.chips_per_domain)
    crossings = []
    if plan.tp > s:
        crossings.append(f"TP group of {plan.tp} spans {-(-plan.tp // s)} domains of {s}")
    cp_domains = int(net.place(topo, plan.cp, plan.tp).domains)
    if cp_domains > 1:
        crossings.append(
            f"CP group of {plan.cp} (ranks {plan.tp} chips apart) spans {cp_domains} domains: "
            "its KV gathers and output merges cross scale-out"
        )
    ep_domains = int(net.place(topo, plan.ep, max(plan.moe_tp, 1)).domains)
    if ep_domains > 1:
        crossings.append(
            f"EP group of {plan.ep} spans {ep_domains} domains: "
            f"{(1 - 1 / ep_domains):.0%} of dispatch/combine bytes cross scale-out"
        )
    slots = experts + plan.redundant_experts
    if model.is_moe and plan.ep > 1 and slots % plan.ep:
        crossings.append(
            f"{slots} expert slots over ep = {plan.ep}: the fullest rank holds {-(-slots // plan.ep)} "
            f"({slots / plan.ep:.2f} on average); memory and weight reads count the fullest"
        )
    if plan.pp > 1:
        hops = net.pipeline_hops(plan.pp, decode=True)
        crossing = float(net.crossing_hops(plan.pp, plan.chips_per_stage, s, hops))
        if crossing:
            crossings.append(
                f"{crossing:.0f} of {float(hops):.0f} pipeline hops per decode token cross scale-out"
            )
    return PlanCheck(plan=plan, reasons=tuple(reasons), crossings=tuple(crossings))


@dataclass(frozen=True)
class MemoryPerChip:
    """HBM of one chip of the heaviest stage: weights by component, KV, activations, reserve."""

    weights: ChipWeightBytes
    kv_bytes: FloatArray
    activation_bytes: FloatArray
    reserve_bytes: float
    capacity_bytes: float

    @cached_property
    def total_bytes(self) -> FloatArray:
        return np.asarray(self.weights.total + self.kv_bytes + self.activation_bytes + self.reserve_bytes)

    @property
    def fits(self) -> NDArray[np.bool_]:
        return np.asarray(self.total_bytes <= self.capacity_bytes)

    @property
    def short_by_bytes(self) -> FloatArray:
        """How much more HBM the chip would need (0 when it fits)."""
        return np.asarray(np.maximum(self.total_bytes - self.capacity_bytes, 0.0))

    def to_dict(self) -> dict[str, Any]:
        w = self.weights

        def scalar(x: ArrayLike) -> float:
            return float(np.asarray(x).ravel()[0])

        return {
            "weights_bytes_by_component": {
                "tp_sharded": scalar(w.tp_sharded),
                "replicated": scalar(w.replicated),
                "routed_experts": scalar(w.routed_experts),
                "vocab": scalar(w.vocab),
            },
            "weights_bytes": scalar(w.total),
            "kv_bytes": scalar(self.kv_bytes),
            "activation_bytes": scalar(self.activation_bytes),
            "reserve_bytes": self.reserve_bytes,
            "total_bytes": scalar(self.total_bytes),
            "capacity_bytes": self.capacity_bytes,
            "fits": bool(np.asarray(self.fits).ravel()[0]),
            "short_by_bytes": scalar(self.short_by_bytes),
        }


@dataclass(frozen=True)
class PlannedGrid(DecodeThroughput, Tabular):
    """Decode (or prefill) over a batch x context grid under a plan."""

    frame_layout = grid_layout(
        Col("step.compute_s", "compute_s", "s"),
        Col("step.weight_fetch_s", "weight_fetch_s", "s"),
        Col("step.kv_fetch_s", "kv_fetch_s", "s"),
        Col("step.comm_s", "communication_s", "s"),
        Col("step.bottleneck", "bottleneck"),
        Col("memory.total_bytes", "memory_bytes_per_chip", "bytes"),
        labels=(*deployment_labels("deployment.base.precisions"), Col("deployment.plan", "plan")),
    )

    deployment: PlannedDeployment
    batch: FloatArray
    context: FloatArray
    step: PlanStep
    memory: MemoryPerChip

    @property
    def step_s(self) -> FloatArray:
        return self.step.step_s

    @property
    def fits(self) -> NDArray[np.bool_]:
        return self.memory.fits


@dataclass(frozen=True)
class PlannedDeployment:
    """A deployment under a parallel plan on a two-level topology."""

    base: pooled.Deployment
    plan: ParallelPlan
    topology: Topology
    comm_overlap_frac: float = CommOverlap.ADDED
    communication: bool = True
    extra_hop_latency_s: float = 0.0
    activation_bytes: float = DEFAULT_ACTIVATION_BYTES
    allow_uneven_stages: bool = True
    notes: tuple[str, ...] = field(default=())

    @property
    def model(self) -> ModelSpec:
        return self.base.model

    @property
    def system(self) -> SystemSpec:
        return self.base.system

    @property
    def usd_per_chip_hour(self) -> float:
        return self.base.usd_per_chip_hour

    @property
    def chips(self) -> int:
        return self.plan.chips

    @cached_property
    def shardable(self) -> ShardableModel:
        return shard.shardable(self.model, self.base.precisions.weights)

    @cached_property
    def stage_split(self) -> StageSplit:
        """The pipeline stages: the plan's ``stages`` or the tool's balanced split, the LM head
        charged to the last stage (:func:`rackmath.core.sharding.pipeline_split`)."""
        return shard.pipeline_split(self.shardable, self.plan.pp, self.plan.stages)

    @cached_property
    def _fracs(self) -> tuple[float, float, float]:
        """(the slowest stage's share of a pass, head included; its weight share; its layer share)."""
        time, weights, layers = shard.pipeline_fractions(self.shardable, self.plan.pp, self.plan.stages)
        return float(time), float(weights), float(layers)

    @property
    def peak_flops_per_s_per_chip(self) -> float:
        return self.system.chip.peak_flops(self.base.precisions.compute)

    @cached_property
    def _weights(self) -> ChipWeightBytes:
        """Weight bytes per chip of the heaviest stage (the plan's, whatever the load)."""
        p = self.plan
        return mem.weight_bytes_per_chip(
            self.shardable,
            tp=p.tp,
            pp=p.pp,
            ep=p.ep,
            stage_frac=self._fracs[1],
            moe_tp=p.moe_tp,
            redundant_experts=p.redundant_experts,
        )

    def memory(
        self,
        batch: ArrayLike,
        context: ArrayLike,
        tokens_in_flight: ArrayLike | None = None,
        *,
        shape: tuple[int, ...] | None = None,
    ) -> MemoryPerChip:
        """HBM per chip holding ``batch`` sequences of ``context`` tokens; ``tokens_in_flight``
        (default: one per sequence, decode) sizes the activation workspace. ``shape``: the
        grid's shape when one point is given as single values (computed on NumPy scalars)."""
        p = self.plan
        _, weight_frac, layer_frac = self._fracs
        b = numeric.num(batch)
        tokens = b if tokens_in_flight is None else numeric.num(tokens_in_flight)
        chip = self.system.chip
        held = mem.serving_memory_per_chip(
            self.shardable,
            batch=b,
            kv_bytes_per_sequence=self.base.kv_bytes_per_sequence(context),
            tokens_in_flight=tokens,
            tp=p.tp,
            pp=p.pp,
            dp=p.dp,
            ep=p.ep,
            stage_frac=weight_frac,
            layer_frac=layer_frac,
            activation_bytes=self.activation_bytes,
            moe_tp=p.moe_tp,
            redundant_experts=p.redundant_experts,
            weights=self._weights,
            cp=p.cp,
        )
        kv, activations = held.kv_bytes, held.activation_bytes
        if shape is not None:  # one point (shape all 1s): two views of one small array
            kv, activations = np.array((kv, activations), dtype=float).reshape(2, *shape)
        return MemoryPerChip(
            weights=held.weights,
            kv_bytes=kv,
            activation_bytes=activations,
            reserve_bytes=chip.hbm_capacity_bytes * self.base.memory_reserve_frac,
            capacity_bytes=chip.hbm_capacity_bytes,
        )

    def max_concurrency(self, context: ArrayLike, tokens_per_sequence: float = 1.0) -> FloatArray:
        """Most sequences of ``context`` tokens whose KV and activations fit per chip;
        ``tokens_per_sequence`` in flight per step (1 in decode, ``1 + I/O`` when mixed)."""
        one = self.memory(1.0, context, tokens_in_flight=tokens_per_sequence)
        empty = self.memory(0.0, context)
        chip = self.system.chip
        usable = chip.hbm_capacity_bytes - one.reserve_bytes
        return mem.max_concurrency(usable, empty.weights.total, one.total_bytes - empty.total_bytes)

    @cached_property
    def _rates(self) -> ChipRates:
        return self.base.chip_rates()

    def step(self, load: StepLoad, *, decode: bool, shape: tuple[int, ...] | None = None) -> PlanStep:
        """One cycle processing ``load`` (see :mod:`rackmath.core.operators`); ``shape``
        broadcasts a one-point load's answer to the grid's shape."""
        p = self.plan
        cost_frac = self._fracs[0]
        return par.plan_step(
            self.shardable,
            tp=p.tp,
            pp=p.pp,
            dp=p.dp,
            ep=p.ep,
            load=load,
            rates=self._rates,
            topo=self.topology,
            stage_frac=cost_frac,
            comm_overlap_frac=self.comm_overlap_frac,
            communication=self.communication,
            decode=decode,
            extra_hop_latency_s=self.extra_hop_latency_s,
            activation_bytes=self.activation_bytes,
            moe_tp=p.moe_tp,
            redundant_experts=p.redundant_experts,
            skew=p.skew,
            tbo_overlap_frac=p.tbo,
            shape=shape,
            cp=p.cp,
            cp_comm=p.cp_comm,
        )

    @property
    def kv_bytes_per_element(self) -> float:
        return self.base.precisions.kv.bytes_per_element

    def check_context_parallel(self, tokens: ArrayLike, what: str) -> None:
        """Refuse a CP degree beyond a sequence's KV blocks (one block of 16 tokens per CP rank
        at least, :func:`rackmath.core.memory.max_context_parallel`), in one line."""
        cp = self.plan.cp
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

    def decode(self, batch: ArrayLike, context: ArrayLike) -> PlannedGrid:
        """One decode cycle for each (batch, context): every sequence makes one token."""
        self.check_context_parallel(context, "context")
        b, c = batch_context_grid(batch, context)
        bs, cs, shape = _point(b, c)
        load = loads.decode_load(self.model, bs, cs, self.kv_bytes_per_element)
        return self._grid(b, c, self.step(load, decode=True, shape=shape), self.memory(bs, cs, shape=shape))

    def prefill(self, batch: ArrayLike, length: ArrayLike) -> PlannedGrid:
        """One prefill pass of ``batch`` whole prompts of ``length`` tokens (KV written once):
        each pipeline micro-batch holds whole prompts, so fewer prompts than stages leave
        stages idle."""
        self.check_context_parallel(length, "prompt")
        b, n = batch_context_grid(batch, length)
        bs, ns, shape = _point(b, n)
        load = loads.prefill_load(self.model, bs, ns, self.kv_bytes_per_element, whole=True)
        step = self.step(load, decode=False, shape=shape)
        return self._grid(b, n, step, self.memory(bs, ns, tokens_in_flight=bs * ns, shape=shape))

    def _grid(self, b: FloatArray, c: FloatArray, step: PlanStep, memory: MemoryPerChip) -> PlannedGrid:
        shape = step.step_s.shape
        return PlannedGrid(
            deployment=self,
            batch=b if b.shape == shape else np.broadcast_to(b, shape),
            context=c if c.shape == shape else np.broadcast_to(c, shape),
            step=step,
            memory=memory,
        )

    def describe(self) -> dict[str, Any]:
        d = self.base
        return {
            "model": self.model.id,
            "system": self.system.id,
            "chip": self.system.chip.id,
            "chips": self.chips,
            "plan": {
                "tp": self.plan.tp,
                "pp": self.plan.pp,
                "dp": self.plan.dp,
                "ep": self.plan.ep,
                "moe_tp": self.plan.moe_tp,
                "redundant_experts": self.plan.redundant_experts,
                "skew": self.plan.skew,
                "tbo": self.plan.tbo,
                **({"cp": self.plan.cp, "cp_comm": self.plan.cp_comm} if self.plan.cp > 1 else {}),
            },
            "plan_text": str(self.plan),
            "precision": {
                "weights": d.precisions.weights.value,
                "kv": d.precisions.kv.value,
                "compute": d.precisions.compute.value,
                **({"weight_classes": d.weight_formats} if d.model.stated_weight_classes else {}),
            },
            "chips_per_domain": self.topology.chips_per_domain,
            "scale_up_bytes_per_s": self.topology.scale_up_bytes_per_s,
            "scale_out_bytes_per_s": self.topology.scale_out_bytes_per_s,
            "comm_overlap_frac": float(self.comm_overlap_frac),
            "communication": self.communication,
            "usd_per_chip_hour": d.usd_per_chip_hour,
            "stage_layers": list(self.stage_split.stage_layers),
            "stage_imbalance": self.stage_split.imbalance,
            **({"lm_head_stage": self.plan.pp, "embedding_stage": 1} if self.plan.pp > 1 else {}),
            "notes": list(self.notes),
        }


def _point(b: FloatArray, c: FloatArray) -> tuple[FloatArray, FloatArray, tuple[int, ...] | None]:
    """A one-point grid as 0-d values (NumPy then computes on scalars, not 1x1 arrays) and
    the shape the answer takes; a larger grid as it is."""
    if b.size == 1 and c.size == 1:
        # NumPy scalars (not 0-d arrays): every formula then takes the one-point fast path
        return b.reshape(())[()], c.reshape(())[()], b.shape if b.ndim >= c.ndim else c.shape  # all 1s
    return b, c, None


def plan_deployment(
    model: ModelSpec,
    system: SystemSpec,
    plan: ParallelPlan | str,
    *,
    chips_per_domain: int | None = None,
    weights: Precision | str | None = None,
    kv: Precision | str | None = None,
    compute: Precision | str | None = None,
    usd_per_chip_hour: float | None = None,
    efficiency: rl.Efficiency | str = rl.KERNEL_GROUNDED,
    memory_reserve_frac: float = pooled.DEFAULT_MEMORY_RESERVE_FRAC,
    comm_overlap_frac: float = CommOverlap.ADDED,
    communication: bool = True,
    extra_hop_latency_s: float = 0.0,
    activation_bytes: float = DEFAULT_ACTIVATION_BYTES,
    allow_uneven_stages: bool = True,
    weight_classes: str | Mapping[str, str | Precision] | None = None,
) -> PlannedDeployment:
    """Validate a plan for a model on a system and build the deployment; an invalid plan
    raises :class:`~rackmath.errors.InputError` naming every reason (stated ``stages`` that do
    not cover the layers: naming the field and the tool's balanced split). ``weight_classes``:
    weights per tensor class (:func:`rackmath.analyses.serving.pooled.make_deployment`)."""
    the_plan = ParallelPlan.parse(plan) if isinstance(plan, str) else plan
    topo = topology(system, chips_per_domain)
    check = check_plan(model, the_plan, topo, allow_uneven_stages=allow_uneven_stages)
    if not check.ok:
        raise InputError("plan", str(the_plan), f"a plan that fits {model.id}: " + "; ".join(check.reasons))
    checks.fraction("comm overlap", comm_overlap_frac)
    if not extra_hop_latency_s >= 0:
        raise InputError("hop latency", extra_hop_latency_s, "seconds >= 0")
    base = pooled.make_deployment(
        model,
        system,
        chips=the_plan.chips,
        weights=weights,
        kv=kv,
        compute=compute,
        usd_per_chip_hour=usd_per_chip_hour,
        efficiency=efficiency,
        memory_reserve_frac=memory_reserve_frac,
        weight_classes=weight_classes,
    )
    base = pooled.Deployment(
        model=base.model,
        system=base.system,
        chips=base.chips,
        precisions=base.precisions,
        usd_per_chip_hour=base.usd_per_chip_hour,
        efficiency=base.efficiency,
        memory_reserve_frac=base.memory_reserve_frac,
        notes=(),  # the foundation's "communication not modelled" note no longer applies
    )
    if the_plan.stages and sum(the_plan.stages) != model.num_layers:
        balanced = shard.pipeline_split(
            shard.shardable(model, base.precisions.weights), the_plan.pp
        ).stage_layers
        shard.check_stated_stages(the_plan.stages, model.num_layers, balanced, model.id)
    return PlannedDeployment(
        base=base,
        plan=the_plan,
        topology=topo,
        comm_overlap_frac=float(comm_overlap_frac),
        communication=communication,
        extra_hop_latency_s=float(extra_hop_latency_s),
        activation_bytes=float(activation_bytes),
        allow_uneven_stages=allow_uneven_stages,
        notes=check.crossings,
    )
