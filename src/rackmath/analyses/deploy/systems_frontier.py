"""Throughput per GPU against tokens/s per user for several systems, with cost and energy.

The view planners know from public inference dashboards: for one model and one request shape,
each system's frontier over plans and batches (:func:`rackmath.analyses.deploy.frontier.pareto`, the
same call as ``rackmath pareto MODEL --on SYSTEM``), every frontier point carrying its dollars
per million output tokens (the catalog's dated price) and its facility joules per output token.

Published measurements of the same model on those systems (``catalog/data/measurements.yaml``)
are placed on the same axes where their figures allow:

* decode tokens/s per user at batch ``B`` on ``n`` chips: per user as published, per GPU
  ``value x B / n``;
* a decode step of ``t`` seconds at batch ``B``: per user ``1 / t``, per GPU ``B / (t n)``;
* output tokens/s of a static batch ``B`` (the whole run, prefill included): per GPU
  ``value / n``, per user ``value / B`` (an average over the run, below the decode speed);
* output tokens/s at maximum throughput (the batch not stated): per GPU ``value / n``, no
  per-user figure: a level across the chart.

Each point's cost is the system's catalog price over its throughput per GPU. Measurements of
other phases (prefill, TTFT, MFU, training) have no place on these axes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rackmath.analyses.deploy.frontier import Frontier, pareto
from rackmath.analyses.deploy.plan_features import BALANCED, MoeRouting
from rackmath.analyses.kernels.tables import describe
from rackmath.catalog.measurements import measurements
from rackmath.core import roofline as rl
from rackmath.errors import InputError, RackmathError
from rackmath.frames import Record
from rackmath.specs.hardware import SystemSpec
from rackmath.specs.model import ModelSpec
from rackmath.specs.scenario import Metric, Phase, Scenario

#: Most systems on one chart (one colour each).
MAX_SYSTEMS = 7


@dataclass(frozen=True)
class SystemCurve:
    """One system's frontier, or why it has none."""

    system: str
    chip: str
    usd_per_chip_hour: float
    price_date: str
    efficiency: str
    frontier: Frontier | None
    refused: str = ""  # why there is no frontier (the model does not fit, ...)

    def to_dict(self) -> dict[str, Any]:
        return {
            "system": self.system,
            "chip": self.chip,
            "usd_per_chip_hour": self.usd_per_chip_hour,
            "price_date": self.price_date,
            "efficiency": self.efficiency,
            "refused": self.refused or None,
            "frontier": [] if self.frontier is None else [p.to_dict() for p in self.frontier.frontier],
        }


@dataclass(frozen=True)
class PublishedPoint(Record):
    """A published measurement on the frontier's axes (see the module docstring)."""

    row_id: int
    system: str
    chips: int
    batch: int | None
    input_tokens: int
    output_tokens: int
    tokens_per_s_per_user: float | None  # None: not stated (maximum throughput)
    tokens_per_s_per_chip: float
    usd_per_million_output_tokens: float  # at the system's catalog price
    source: str
    url: str
    how: str  # how the published figure became these two


@dataclass(frozen=True)
class SystemsFrontier:
    model: str
    input_len: int
    output_len: int
    precision: str
    curves: tuple[SystemCurve, ...]
    published: tuple[PublishedPoint, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "input_len": self.input_len,
            "output_len": self.output_len,
            "precision": self.precision,
            "systems": [c.to_dict() for c in self.curves],
            "published": [p.to_dict() for p in self.published],
        }


def _chips(n: int) -> str:
    return f"{n} chip" + ("s" if n != 1 else "")


def _on_axes(s: Scenario) -> tuple[float | None, float, str] | None:
    """(tokens/s per user or None, tokens/s per GPU, how) of a serving row, or None."""
    n, v, b = s.chips, s.value, s.batch
    if s.metric is Metric.DECODE_TOKENS_PER_S_PER_USER and b is not None:
        return v, v * b / n, f"decode {v:,.4g} tokens/s per user at batch {b:,} on {_chips(n)}"
    if s.metric is Metric.DECODE_STEP_S and b is not None:
        return 1.0 / v, b / (v * n), f"decode step {v * 1e3:.3g} ms at batch {b:,} on {_chips(n)}"
    if s.metric is Metric.OUTPUT_TOKENS_PER_S and s.phase is Phase.STATIC_BATCH and b is not None:
        return v / b, v / n, f"static batch {b:,}: {v:,.4g} output tokens/s on {_chips(n)} (prefill included)"
    if s.metric is Metric.OUTPUT_TOKENS_PER_S and s.phase is Phase.MAX_THROUGHPUT:
        return None, v / n, f"maximum throughput {v:,.4g} output tokens/s on {_chips(n)} (batch not stated)"
    return None


def published_points(model: ModelSpec, systems: Sequence[SystemSpec]) -> tuple[PublishedPoint, ...]:
    """The catalog's measurements of ``model`` on ``systems`` that these axes can hold."""
    by_id = {s.id: s for s in systems}
    out: list[PublishedPoint] = []
    for s in measurements().scenarios:
        if s.model_id != model.id or s.system_id not in by_id:
            continue
        placed = _on_axes(s)
        if placed is None:
            continue
        per_user, per_chip, how = placed
        if s.weights is not None:
            how += f", {s.weights.value} weights"
        price = by_id[s.system_id].chip.price_usd_per_chip_hour.value_usd
        usd = float(rl.usd_per_million_tokens(1.0, per_chip, 1.0, price))
        out.append(
            PublishedPoint(
                row_id=s.row_id,
                system=s.system_id,
                chips=s.chips,
                batch=s.batch,
                input_tokens=s.input_tokens,
                output_tokens=s.output_tokens,
                tokens_per_s_per_user=per_user,
                tokens_per_s_per_chip=per_chip,
                usd_per_million_output_tokens=usd,
                source=s.provenance.source,
                url=s.provenance.url,
                how=how,
            )
        )
    return tuple(out)


def systems_frontier(
    model: ModelSpec,
    systems: Sequence[SystemSpec],
    *,
    input_len: int = 1024,
    output_len: int = 1024,
    precision: str = "native",
    max_chips: int | None = None,
    efficiency: str = "kernel",
    routing: MoeRouting = BALANCED,
) -> SystemsFrontier:
    """Each system's frontier (``rackmath pareto`` with the same inputs) and the published
    points. A system the model does not fit on is kept, with the reason, and has no curve."""
    if not 1 <= len(systems) <= MAX_SYSTEMS:
        raise InputError("systems", len(systems), f"1 to {MAX_SYSTEMS} systems")
    mode = rl.Efficiency.parse(efficiency)
    curves: list[SystemCurve] = []
    for system in systems:
        price = system.chip.price_usd_per_chip_hour
        label = describe(system.chip.id, mode)["label"]
        try:
            f: Frontier | None = pareto(
                model,
                system,
                input_len=input_len,
                output_len=output_len,
                precisions=(precision,),
                max_chips=max_chips,
                efficiency=mode,
                routing=routing,
            )
            refused = ""
        except RackmathError as exc:
            f, refused = None, str(exc)
        curves.append(SystemCurve(system.id, system.chip.id, price.value_usd, price.date, label, f, refused))
    return SystemsFrontier(
        model.id, input_len, output_len, precision, tuple(curves), published_points(model, systems)
    )
