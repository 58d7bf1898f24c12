"""The throughput/interactivity frontier: tokens/s per chip against tokens/s per user over
the search's plans and batches (fitting candidates only)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from rackmath.analyses.deploy.candidates import (
    ASSUMPTIONS,
    BATCH_GRID,
    Candidates,
    FloatArray,
    Workload,
    check_max_chips,
    choice_at,
    evaluate,
)
from rackmath.analyses.deploy.plan_features import BALANCED, MoeRouting
from rackmath.analyses.deploy.search_rules import check_precisions, check_search_size
from rackmath.analyses.kernels.tables import describe as describe_efficiency
from rackmath.analyses.serving.deployment import check_context
from rackmath.core import network as net
from rackmath.core import roofline as rl
from rackmath.errors import InputError
from rackmath.frames import Col, Layout, Tabular
from rackmath.specs.bounds import MAX_SEARCH_CANDIDATES
from rackmath.specs.efficiency import EfficiencyMode
from rackmath.specs.hardware import SystemSpec
from rackmath.specs.model import ModelSpec
from rackmath.specs.runtime import RuntimeProfile


@dataclass(frozen=True)
class ParetoPoint:
    tokens_per_s_per_user: float
    tokens_per_s_per_chip: float
    plan_text: str
    chips: int
    batch: int
    family: str
    usd_per_million_output_tokens: float
    #: facility joules per output token (default PUE; None when the chip has no power figures)
    joules_per_token: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "tokens_per_s_per_user": self.tokens_per_s_per_user,
            "tokens_per_s_per_chip": self.tokens_per_s_per_chip,
            "plan_text": self.plan_text,
            "chips": self.chips,
            "batch": self.batch,
            "precision_family": self.family,
            "usd_per_million_output_tokens": self.usd_per_million_output_tokens,
            "joules_per_token": self.joules_per_token,
        }


@dataclass(frozen=True)
class Frontier(Tabular):
    """The Pareto frontier; as a table, one row per frontier point."""

    frame_layout = Layout(
        columns=(
            Col("model", "model"),
            Col("system", "system"),
            Col("frontier[].tokens_per_s_per_user", "tokens_per_s_per_user", "tokens/s"),
            Col("frontier[].tokens_per_s_per_chip", "tokens_per_s_per_chip", "tokens/s"),
            Col("frontier[].plan_text", "plan"),
            Col("frontier[].chips", "chips", "chips"),
            Col("frontier[].batch", "batch", "sequences"),
            Col("frontier[].family", "precision_family"),
            Col(
                "frontier[].usd_per_million_output_tokens",
                "usd_per_million_output_tokens",
                "USD per 1e6 tokens",
            ),
        ),
        dims=("point",),
    )

    model: str
    system: str
    input_len: int
    output_len: int
    frontier: tuple[ParetoPoint, ...]
    #: every fitting candidate, for the scatter behind the curve
    all_per_user: FloatArray
    all_per_chip: FloatArray
    candidates_evaluated: int
    #: xPyD points (a decode candidate with its share of the best prefill replica), when asked
    disaggregated_frontier: tuple[ParetoPoint, ...] = ()
    #: the MoE routing and MTP every plan was searched with
    routing: MoeRouting = BALANCED
    #: the efficiency the numbers use (:func:`rackmath.analyses.kernels.tables.describe`)
    efficiency: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "system": self.system,
            "input_len": self.input_len,
            "output_len": self.output_len,
            "candidates_evaluated": self.candidates_evaluated,
            "frontier": [p.to_dict() for p in self.frontier],
            "disaggregated_frontier": [p.to_dict() for p in self.disaggregated_frontier],
            "efficiency": self.efficiency,
            "assumptions": list(ASSUMPTIONS[:4]),
            "moe_routing": self.routing.to_dict(),
            "speculation": self.routing.speculation_dict(),
        }


def pareto_mask(x: FloatArray, y: FloatArray) -> NDArray[np.bool_]:
    """Points no other point beats on both ``x`` and ``y`` (larger is better for both)."""
    order = np.lexsort((-y, -x))
    best_y = -np.inf
    keep = np.zeros(x.size, bool)
    for i in order:
        if y[i] > best_y:
            keep[i] = True
            best_y = y[i]
    return keep


def pareto(
    model: ModelSpec,
    system: SystemSpec,
    *,
    input_len: int = 1024,
    output_len: int = 1024,
    precisions: tuple[str, ...] = ("native",),
    max_chips: int | None = None,
    batches: tuple[int, ...] = BATCH_GRID,
    comm_overlap_frac: float = net.CommOverlap.ADDED,
    disaggregated: bool = False,
    runtime: RuntimeProfile | None = None,
    efficiency: rl.Efficiency | EfficiencyMode | str = rl.KERNEL_GROUNDED,
    routing: MoeRouting = BALANCED,
    max_candidates: int = MAX_SEARCH_CANDIDATES,
) -> Frontier:
    """Tokens/s per chip against tokens/s per user over plans and batches (fitting only);
    with ``disaggregated`` also the xPyD frontier (:func:`disagg_search.frontier_points`).
    ``max_chips`` defaults to the scale-up domain, at least 64. Refuses a request beyond the
    model's window, families the system has no peak for, and more than ``max_candidates``
    deployments to evaluate."""
    efficiency = rl.Efficiency.parse(efficiency)
    w = Workload(traffic_tokens_per_s=1.0, input_len=input_len, output_len=output_len)
    cap = max(system.scale_up_domain_chips, 64) if max_chips is None else check_max_chips(max_chips)
    check_context(model, input_len + output_len, "--input-len + --output-len")
    precisions = tuple(dict.fromkeys(precisions))
    check_precisions(model, [system], precisions)
    check_search_size(model, [system], precisions, cap, max_candidates, routing.redundant_experts)
    xs: list[FloatArray] = []
    ys: list[FloatArray] = []
    meta: list[tuple[Candidates, int]] = []
    total = 0
    for fam in precisions:
        c = evaluate(
            model,
            system,
            fam,
            w,
            max_chips=cap,
            batches=batches,
            comm_overlap_frac=comm_overlap_frac,
            runtime=runtime,
            efficiency=efficiency,
            routing=routing,
        )
        if c is None:
            continue
        total += c.size
        idx = np.flatnonzero(c.fits)
        xs.append(c.tokens_per_s_per_user[idx])
        ys.append(c.tokens_per_s_per_chip[idx])
        meta.extend((c, int(i)) for i in idx)
    if not meta:
        raise InputError("pareto", f"{model.id} on {system.id}", "a system where the model fits")
    x, y = np.concatenate(xs), np.concatenate(ys)
    keep = np.flatnonzero(pareto_mask(x, y))
    keep = keep[np.argsort(-x[keep])]
    points = []
    for i in keep:
        c, j = meta[i]
        ch = choice_at(c, j, 1.0)
        points.append(
            ParetoPoint(
                tokens_per_s_per_user=float(x[i]),
                tokens_per_s_per_chip=float(y[i]),
                plan_text=ch.plan_text,
                chips=ch.chips,
                batch=ch.batch,
                family=c.family,
                usd_per_million_output_tokens=ch.usd_per_million_output_tokens,
                joules_per_token=ch.joules_per_token,
            )
        )
    dis = (
        _disaggregated_points(model, system, w, precisions, cap, runtime, efficiency, routing)
        if disaggregated
        else ()
    )
    described = describe_efficiency(system.chip.id, efficiency)
    return Frontier(
        model.id, system.id, input_len, output_len, tuple(points), x, y, total, dis, routing, described
    )


def _disaggregated_points(
    model: ModelSpec,
    system: SystemSpec,
    w: Workload,
    families: tuple[str, ...],
    cap: int,
    runtime: RuntimeProfile | None,
    efficiency: rl.Efficiency,
    routing: MoeRouting,
) -> tuple[ParetoPoint, ...]:
    from rackmath.analyses.deploy.disagg_search import frontier_points

    rows: list[ParetoPoint] = []
    for fam in families:
        per_user, per_chip, d, idx = frontier_points(
            model,
            system,
            w,
            family=fam,
            max_chips=cap,
            runtime=runtime,
            efficiency=efficiency,
            routing=routing,
        )
        if d is None:
            continue
        usd = d.usd_per_chip_hour / 3600.0 / per_chip * 1e6  # per output token of one chip's share
        for k in np.flatnonzero(pareto_mask(per_user, per_chip)):
            ch = choice_at(d, int(idx[k]), 1.0)
            rows.append(
                ParetoPoint(
                    tokens_per_s_per_user=float(per_user[k]),
                    tokens_per_s_per_chip=float(per_chip[k]),
                    plan_text=ch.plan_text,
                    chips=ch.chips,
                    batch=ch.batch,
                    family=fam,
                    usd_per_million_output_tokens=float(usd[k]),
                )
            )
    if not rows:
        return ()
    x = np.array([r.tokens_per_s_per_user for r in rows])
    y = np.array([r.tokens_per_s_per_chip for r in rows])
    keep = np.flatnonzero(pareto_mask(x, y))
    return tuple(rows[i] for i in keep[np.argsort(-x[keep])])
