"""Configurations side by side: one decode point of each, as ``rackmath explain`` computes it.

A configuration is what the Serving page and ``rackmath explain`` take: a model on a system,
chips, precisions, efficiency, and one (batch, context) point, with an optional parallel plan.
Without a plan the chips act as one ideal chip (``explain``'s sections 1-6); with one, the
point is the plan-aware grid's (``explain --plan``: communication over the real topology,
memory of one chip of the heaviest stage). Each figure here is an attribute of that
:class:`~rackmath.analyses.serving.explain.Explanation` at the point, so the web's Compare view and
``rackmath explain ... --json`` agree to the last digit.

Memory per chip is what one chip holds: weights, the batch's KV cache and its live activations;
it fits when that total is at most what the chip may fill (its HBM less the memory reserve).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rackmath.analyses.serving.deployment import Deployment
from rackmath.analyses.serving.explain import Explanation, explain
from rackmath.analyses.serving.pooled import make_deployment
from rackmath.core.energy import DEFAULT_PUE
from rackmath.errors import InputError
from rackmath.frames import Record
from rackmath.specs.hardware import SystemSpec
from rackmath.specs.model import ModelSpec
from rackmath.specs.plan import ParallelPlan

#: Most configurations one comparison holds (a page shows them side by side).
MAX_CONFIGURATIONS = 6


@dataclass(frozen=True)
class Configuration:
    """One configuration to compare (the inputs of ``rackmath explain`` at one point)."""

    model: ModelSpec
    system: SystemSpec
    batch: int
    context: int
    chips: int | None = None  # None: the system's default
    plan: str | None = None  # None: the chips act as one ideal chip
    weights: str | None = None
    kv: str | None = None
    compute: str | None = None
    efficiency: str = "kernel"  # or "pure"
    usd_per_chip_hour: float | None = None


@dataclass(frozen=True)
class Compared(Record):
    """One configuration's figures at its point (SI)."""

    label: str
    model: str
    system: str
    chip: str
    chips: int
    plan: str | None
    weights: str
    kv: str
    compute: str
    efficiency: str  # the efficiency model, as the deployment labels it
    batch: int
    context: int
    step_s: float
    tokens_per_s_per_user: float
    tokens_per_s: float
    tokens_per_s_per_chip: float
    usd_per_million_output_tokens: float
    joules_per_token: float | None  # None: the chip has no power figures
    bottleneck: str
    weight_bytes_per_chip: float
    kv_bytes_per_chip: float
    memory_bytes_per_chip: float  # weights + KV + activations
    capacity_bytes_per_chip: float
    usable_bytes_per_chip: float  # the capacity less the memory reserve
    fits: bool


@dataclass(frozen=True)
class Comparison:
    points: tuple[Compared, ...]

    #: (key, what it is) of the figures a face shows, in order
    FIGURES = (
        ("step_s", "step time"),
        ("tokens_per_s_per_user", "tokens/s per user"),
        ("tokens_per_s_per_chip", "tokens/s per GPU"),
        ("tokens_per_s", "tokens/s (all chips)"),
        ("usd_per_million_output_tokens", "$ per million output tokens"),
        ("joules_per_token", "joules per output token"),
        ("weight_bytes_per_chip", "weights per chip"),
        ("kv_bytes_per_chip", "KV cache per chip"),
        ("memory_bytes_per_chip", "memory per chip"),
        ("capacity_bytes_per_chip", "HBM per chip"),
        ("usable_bytes_per_chip", "HBM usable per chip (less the reserve)"),
        ("fits", "fits"),
        ("bottleneck", "bound by"),
    )

    def rows(self) -> list[dict[str, Any]]:
        """One row per figure, one column per configuration (by label), SI values."""
        return [
            {"figure": what, "key": key, **{p.label: getattr(p, key) for p in self.points}}
            for key, what in self.FIGURES
        ]

    def ratio(self, key: str) -> tuple[float | None, ...]:
        """Each configuration's ``key`` over the first's (None where either is missing or 0)."""
        first = getattr(self.points[0], key)
        out: list[float | None] = []
        for p in self.points:
            v = getattr(p, key)
            out.append(None if v is None or not first else float(v) / float(first))
        return tuple(out)

    def to_dict(self) -> dict[str, Any]:
        return {"configurations": [p.to_dict() for p in self.points]}


def deployment_of(c: Configuration) -> Deployment:
    return make_deployment(
        c.model,
        c.system,
        chips=c.chips,
        weights=c.weights,
        kv=c.kv,
        compute=c.compute,
        usd_per_chip_hour=c.usd_per_chip_hour,
        efficiency=c.efficiency,
    )


def explained(c: Configuration, pue: float = DEFAULT_PUE) -> Explanation:
    """The configuration's :func:`~rackmath.analyses.serving.explain.explain` at its one point;
    refuses what ``rackmath explain`` refuses: a context past the model's window, more chips
    than one system without a plan, weights that do not fit."""
    dep = deployment_of(c)
    plan = None if c.plan is None else ParallelPlan.parse(c.plan)
    return explain(dep, [c.batch], [c.context], plan, pue=pue)


def compared(c: Configuration, label: str, pue: float = DEFAULT_PUE) -> Compared:
    r = explained(c, pue)
    dep = r.deployment
    p = dep.precisions
    capacity = dep.system.chip.hbm_capacity_bytes
    g, e = (r.decode, r.energy) if r.planned is None else (r.planned, r.planned_energy)
    per_chip, usd = float(g.tokens_per_s_per_chip[0, 0]), float(g.usd_per_million_output_tokens[0, 0])
    step = float(g.step_s[0, 0])
    return Compared(
        label=label,
        model=dep.model.id,
        system=dep.system.id,
        chip=dep.system.chip.id,
        chips=dep.chips,
        plan=None if r.planned is None else str(g.deployment.plan),
        weights=p.weights.value,
        kv=p.kv.value,
        compute=p.compute.value,
        efficiency=dep.efficiency_label,
        batch=c.batch,
        context=c.context,
        step_s=step,
        tokens_per_s_per_user=1.0 / step,
        tokens_per_s=c.batch / step,
        tokens_per_s_per_chip=per_chip,
        usd_per_million_output_tokens=usd,
        joules_per_token=None if e is None else float(e.joules_per_token[0, 0]),
        bottleneck=str(g.step.bottleneck[0, 0]),
        weight_bytes_per_chip=float(g.weight_bytes_per_chip),
        kv_bytes_per_chip=float(g.kv_bytes_per_chip[0, 0]),
        memory_bytes_per_chip=float(g.memory_bytes_per_chip[0, 0]),
        capacity_bytes_per_chip=capacity,
        usable_bytes_per_chip=dep.usable_bytes_per_chip,
        fits=bool(g.fits[0, 0]),
    )


def compare(configs: Sequence[Configuration], pue: float = DEFAULT_PUE) -> Comparison:
    """Each configuration at its point, labelled A, B, C ... in order."""
    if not 1 <= len(configs) <= MAX_CONFIGURATIONS:
        raise InputError("configurations", len(configs), f"1 to {MAX_CONFIGURATIONS}")
    return Comparison(tuple(compared(c, chr(ord("A") + i), pue) for i, c in enumerate(configs)))
