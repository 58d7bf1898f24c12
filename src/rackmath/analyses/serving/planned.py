"""A model on a real topology under a parallel plan: the plan's rules and the deployment.

:func:`plan_deployment` validates a :class:`~rackmath.specs.plan.ParallelPlan` against a model on
a system (:func:`check_plan`) and builds the one
:class:`~rackmath.analyses.serving.deployment.Deployment` with the system's two-level
:class:`~rackmath.core.network.Topology` (:func:`topology`); its step pays the TP all-reduce, EP
all-to-all and PP hops of :mod:`rackmath.core.parallel`. With ``tp = N``, ``pp = dp = 1`` and
communication off it gives the pooled ideal chip's numbers (up to the replicated norms).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from rackmath.analyses.serving.deployment import Deployment
from rackmath.analyses.serving.parts import DEFAULT_MEMORY_RESERVE_FRAC
from rackmath.analyses.serving.pooled import precisions_of, price_of, with_weight_classes
from rackmath.core import network as net
from rackmath.core import roofline as rl
from rackmath.core import sharding as shard
from rackmath.core.network import DEFAULT_ACTIVATION_BYTES, CommOverlap, Topology
from rackmath.errors import InputError
from rackmath.specs import checks
from rackmath.specs.efficiency import EfficiencyMode
from rackmath.specs.hardware import SystemSpec
from rackmath.specs.model import ModelSpec
from rackmath.specs.plan import ParallelPlan
from rackmath.specs.precision import Precision


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


def replan(
    deployment: Deployment,
    plan: ParallelPlan | str,
    *,
    chips_per_domain: int | None = None,
    allow_uneven_stages: bool = True,
) -> Deployment:
    """The same deployment (model, system, precisions, price, efficiency, reserve, runtime)
    under ``plan`` on the system's topology; an invalid plan raises
    :class:`~rackmath.errors.InputError` naming every reason (stated ``stages`` that do not
    cover the layers: naming the field and the tool's balanced split)."""
    d = deployment
    the_plan = ParallelPlan.parse(plan) if isinstance(plan, str) else plan
    topo = topology(d.system, chips_per_domain)
    check = check_plan(d.model, the_plan, topo, allow_uneven_stages=allow_uneven_stages)
    if not check.ok:
        raise InputError("plan", str(the_plan), f"a plan that fits {d.model.id}: " + "; ".join(check.reasons))
    if the_plan.stages and sum(the_plan.stages) != d.model.num_layers:
        balanced = shard.pipeline_split(d.shardable, the_plan.pp).stage_layers
        shard.check_stated_stages(the_plan.stages, d.model.num_layers, balanced, d.model.id)
    return replace(
        d,
        plan=the_plan,
        pooled=False,
        topology=topo,
        allow_uneven_stages=allow_uneven_stages,
        notes=check.crossings,
    )


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
    efficiency: rl.Efficiency | EfficiencyMode | str = rl.KERNEL_GROUNDED,
    memory_reserve_frac: float = DEFAULT_MEMORY_RESERVE_FRAC,
    comm_overlap_frac: float = CommOverlap.ADDED,
    communication: bool = True,
    extra_hop_latency_s: float = 0.0,
    activation_bytes: float = DEFAULT_ACTIVATION_BYTES,
    allow_uneven_stages: bool = True,
    weight_classes: str | Mapping[str, str | Precision] | None = None,
) -> Deployment:
    """Validate a plan for a model on a system and build the deployment (:func:`replan`).
    ``weight_classes``: weights per tensor class
    (:func:`rackmath.analyses.serving.pooled.make_deployment`)."""
    model, weights = with_weight_classes(model, weights, weight_classes)
    the_plan = ParallelPlan.parse(plan) if isinstance(plan, str) else plan
    checks.fraction("comm overlap", comm_overlap_frac)
    if not extra_hop_latency_s >= 0:
        raise InputError("hop latency", extra_hop_latency_s, "seconds >= 0")
    checks.fraction("memory reserve", memory_reserve_frac, one=False)
    unplanned = Deployment(
        model=model,
        system=system,
        plan=the_plan,
        precisions=precisions_of(model, system, weights, kv, compute),
        usd_per_chip_hour=price_of(system, usd_per_chip_hour),
        efficiency=rl.Efficiency.parse(efficiency),
        memory_reserve_frac=memory_reserve_frac,
        comm_overlap_frac=float(comm_overlap_frac),
        communication=communication,
        extra_hop_latency_s=float(extra_hop_latency_s),
        activation_bytes=float(activation_bytes),
    )
    return replan(
        unplanned, the_plan, chips_per_domain=chips_per_domain, allow_uneven_stages=allow_uneven_stages
    )
