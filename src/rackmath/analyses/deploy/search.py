"""The cheapest deployment that meets an SLO, runners-up, and why the others failed.

The candidates (every plan x batch of each system and precision family) come from
:mod:`rackmath.analyses.deploy.candidates`; the frontier lives in :mod:`rackmath.analyses.deploy.frontier`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rackmath.analyses.deploy.candidates import (
    ASSUMPTIONS,
    BATCH_GRID,
    DEFAULT_MAX_CHIPS,
    DEFAULT_MAX_CP,
    DEFAULT_MAX_PP,
    DEFAULT_PRECISIONS,
    Candidates,
    Choice,
    Workload,
    check_max_chips,
    choice_at,
    evaluate,
)
from rackmath.analyses.deploy.disagg_search import Disaggregated, best_disaggregated, compare
from rackmath.analyses.deploy.plan_features import BALANCED, MoeRouting
from rackmath.analyses.deploy.search_rules import check_precisions, check_search_size
from rackmath.analyses.deploy.simulate import parse_slo
from rackmath.analyses.kernels.tables import describe as describe_efficiency
from rackmath.analyses.serving.deployment import check_context
from rackmath.core import economics as econ
from rackmath.core import network as net
from rackmath.core import roofline as rl
from rackmath.errors import InputError, RackmathError
from rackmath.frames import Col, Layout, Tabular
from rackmath.progress import track
from rackmath.specs import checks
from rackmath.specs.bounds import MAX_SEARCH_CANDIDATES
from rackmath.specs.efficiency import EfficiencyMode
from rackmath.specs.hardware import SystemSpec
from rackmath.specs.model import ModelSpec
from rackmath.specs.runtime import RuntimeProfile


@dataclass(frozen=True)
class FamilyOutcome:
    """A (system, precision) family: its best feasible choice, or the constraint that bound."""

    system: str
    family: str
    candidates: int
    best: Choice | None
    binding: str  # "" when feasible; else "memory", "tpot", "ttft" or "tpot+ttft"
    reason: str
    best_tpot_s: float | None  # fastest step among candidates that fit
    best_ttft_s: float | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "system": self.system,
            "precision_family": self.family,
            "candidates": self.candidates,
            "feasible": self.best is not None,
            "binding_constraint": self.binding or None,
            "reason": self.reason,
            "best_tpot_s": self.best_tpot_s,
            "best_ttft_s": self.best_ttft_s,
            "best": self.best.to_dict() if self.best else None,
        }


def _family_outcome(c: Candidates, w: Workload, max_chips: int) -> FamilyOutcome:
    sid = c.system.id
    if c.size == 0 or not c.fits.any():
        return FamilyOutcome(
            sid,
            c.family,
            c.size,
            None,
            "memory",
            f"the weights and a batch of one do not fit in {c.system.chip.hbm_capacity_bytes / 1e9:.0f} GB "
            f"per chip on any plan of up to {max_chips} chips",
            None,
            None,
        )
    fit_tpot = np.where(c.fits, c.tpot_s, np.inf)
    fit_ttft = np.where(c.fits, c.ttft_s, np.inf)
    ok_tpot = c.fits & (c.tpot_s <= (w.tpot_s or np.inf))
    ok_ttft = c.fits & (c.ttft_s <= (w.ttft_s or np.inf))
    feasible = ok_tpot & ok_ttft
    best_tpot, best_ttft = float(fit_tpot.min()), float(fit_ttft.min())
    if feasible.any():
        rate = c.tokens_per_s
        replicas = econ.replicas_needed(w.traffic_tokens_per_s, rate)
        fleet = np.where(feasible, replicas * c.chips, np.inf)
        # cheapest fleet; ties to the faster step
        order = np.lexsort((c.tpot_s, fleet))
        return FamilyOutcome(
            sid,
            c.family,
            c.size,
            choice_at(c, int(order[0]), w.traffic_tokens_per_s),
            "",
            "",
            best_tpot,
            best_ttft,
        )
    if not ok_tpot.any():
        binding = "tpot"
        reason = f"best achievable TPOT {best_tpot * 1e3:.3g} ms > SLO {(w.tpot_s or 0) * 1e3:.3g} ms"
    elif not ok_ttft.any():
        binding = "ttft"
        reason = f"best achievable TTFT {best_ttft * 1e3:.3g} ms > SLO {(w.ttft_s or 0) * 1e3:.3g} ms"
    else:
        binding = "tpot+ttft"
        reason = (
            "each SLO is met alone but never together: a small batch keeps TPOT low while "
            "TTFT needs a large one"
        )
    return FamilyOutcome(sid, c.family, c.size, None, binding, reason, best_tpot, best_ttft)


@dataclass(frozen=True)
class SearchResult(Tabular):
    """The search's answer; as a table, one row per ranked deployment (best first)."""

    frame_layout = Layout(
        columns=(
            Col("model", "model"),
            Col("choices[].system", "system"),
            Col("choices[].family", "precision_family"),
            Col("choices[].plan_text", "plan"),
            Col("choices[].chips", "chips", "chips"),
            Col("choices[].batch", "batch", "sequences"),
            Col("choices[].tpot_s", "tpot_s", "s"),
            Col("choices[].ttft_s", "ttft_s", "s"),
            Col("choices[].tokens_per_s_per_chip", "tokens_per_s_per_chip", "tokens/s"),
            Col(
                "choices[].usd_per_million_output_tokens",
                "usd_per_million_output_tokens",
                "USD per 1e6 tokens",
            ),
            Col("choices[].replicas", "replicas", "replicas"),
            Col("choices[].bottleneck", "bottleneck"),
        ),
        dims=("rank",),
    )

    model: str
    workload: Workload
    systems: tuple[str, ...]
    families: tuple[FamilyOutcome, ...]
    candidates_evaluated: int
    best: Choice | None
    runners_up: tuple[Choice, ...]
    #: when nothing meets the SLOs: the binding constraint and the best achievable figure
    infeasible_reason: str = ""
    space: dict[str, Any] = field(default_factory=dict)
    #: the cheapest xPyD fleet (when the search was asked for it) and the sentence comparing it
    disaggregated: Disaggregated | None = None
    disaggregated_note: str = ""
    #: per system, the efficiency its numbers use (:func:`rackmath.analyses.kernels.tables.describe`)
    efficiency: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def choices(self) -> tuple[Choice, ...]:
        """The best deployment and the runners-up, in rank order."""
        return ((self.best,) if self.best is not None else ()) + self.runners_up

    def to_dict(self) -> dict[str, Any]:
        w = self.workload
        return {
            "model": self.model,
            "traffic_tokens_per_s": w.traffic_tokens_per_s,
            "input_len": w.input_len,
            "output_len": w.output_len,
            "ttft_slo_s": w.ttft_s,
            "tpot_slo_s": w.tpot_s,
            "systems": list(self.systems),
            "candidates_evaluated": self.candidates_evaluated,
            "feasible": self.best is not None,
            "best": self.best.to_dict() if self.best else None,
            "runners_up": [c.to_dict() for c in self.runners_up],
            "families": [f.to_dict() for f in self.families],
            "infeasible_reason": self.infeasible_reason or None,
            "disaggregated": self.disaggregated.to_dict() if self.disaggregated else None,
            "disaggregated_vs_aggregated": self.disaggregated_note or None,
            "space": self.space,
            "efficiency": self.efficiency,
            "assumptions": list(ASSUMPTIONS),
        }


def search(
    model: ModelSpec,
    systems: list[SystemSpec],
    workload: Workload,
    *,
    precisions: tuple[str, ...] = DEFAULT_PRECISIONS,
    max_chips: int = DEFAULT_MAX_CHIPS,
    max_pp: int = DEFAULT_MAX_PP,
    batches: tuple[int, ...] = BATCH_GRID,
    comm_overlap_frac: float = net.CommOverlap.ADDED,
    runners_up: int = 5,
    max_cp: int = DEFAULT_MAX_CP,
    disaggregated: bool = False,
    runtime: RuntimeProfile | None = None,
    efficiency: rl.Efficiency | EfficiencyMode | str = rl.KERNEL_GROUNDED,
    routing: MoeRouting = BALANCED,
    max_candidates: int = MAX_SEARCH_CANDIDATES,
) -> SearchResult:
    """The cheapest fleet meeting the SLOs, runners-up, and why each rejected family failed.

    Refuses, before any work: a request beyond the model's context window, precision
    families no searched system has, more than ``max_candidates`` deployments to evaluate
    (the xPyD pools evaluate about three times the aggregated ones), and a prompt longer than
    the runtime's token budget when it cannot chunk prefill."""
    efficiency = rl.Efficiency.parse(efficiency)
    max_chips = check_max_chips(max_chips)
    check_context(model, workload.input_len + workload.output_len, "--input-len + --output-len")
    check_precisions(model, systems, precisions)
    budget = checks.whole("--max-candidates", max_candidates) // (3 if disaggregated else 1)
    check_search_size(model, systems, precisions, max_chips, budget, routing.redundant_experts, max_cp)
    if runtime is not None and not runtime.chunked_prefill and workload.input_len > runtime.max_tokens:
        raise InputError(
            "--input-len",
            workload.input_len,
            f"at most {runtime.max_tokens:,} tokens under {runtime.id}, which runs each prompt whole in one "
            "step (no chunked prefill)",
        )
    families: list[FamilyOutcome] = []
    total = 0
    seen: set[tuple[str, str, str, str]] = set()
    for system in track(systems, "Searching systems"):
        for fam in precisions:
            cands = evaluate(
                model,
                system,
                fam,
                workload,
                max_chips=max_chips,
                max_pp=max_pp,
                batches=batches,
                comm_overlap_frac=comm_overlap_frac,
                runtime=runtime,
                efficiency=efficiency,
                routing=routing,
                max_cp=max_cp,
            )
            if cands is None:
                continue
            p = cands.precisions
            key = (system.id, p.weights.value, p.kv.value, p.compute.value)
            if key in seen:  # "native" may equal "fp8" (weights, KV and compute all alike)
                continue
            seen.add(key)
            total += cands.size
            families.append(_family_outcome(cands, workload, max_chips))
    feasible = sorted(
        (f.best for f in families if f.best is not None),
        key=lambda c: (c.fleet_usd_per_million_output_tokens, c.tpot_s),
    )
    reason = ""
    if not feasible:
        reason = _infeasible_reason(families, workload)
    dis, note = None, ""
    if disaggregated:
        dis, n_dis, why = best_disaggregated(
            model,
            systems,
            workload,
            families=precisions,
            max_chips=max_chips,
            max_pp=max_pp,
            batches=batches,
            comm_overlap_frac=comm_overlap_frac,
            runtime=runtime,
            efficiency=efficiency,
            routing=routing,
            max_cp=max_cp,
        )
        total += n_dis
        note = compare(feasible[0] if feasible else None, dis, why)
    return SearchResult(
        model=model.id,
        workload=workload,
        systems=tuple(s.id for s in systems),
        families=tuple(families),
        candidates_evaluated=total,
        best=feasible[0] if feasible else None,
        runners_up=tuple(feasible[1 : 1 + runners_up]),
        infeasible_reason=reason,
        space={
            "batches": list(batches),
            "precision_families": list(precisions),
            "max_chips": max_chips,
            "max_pp": max_pp,
            "tp": "divisors of the attention heads up to the scale-up domain",
            "stage_width": "powers of two and multiples or halvings of the domain",
            "ep": "common divisors of the experts and the stage width",
            "pp": f"divisors of the layers up to {max_pp}",
            **({"cp": f"powers of two up to {max_cp} dividing the stage width / tp"} if max_cp > 1 else {}),
            "moe_routing": routing.to_dict(),
            "speculation": routing.speculation_dict(),
            "runtime": None
            if runtime is None
            else {
                "id": runtime.id,
                "version": runtime.version,
                "max_seqs_per_engine": runtime.max_seqs,
                "max_tokens_per_engine": runtime.max_tokens,
                "kv_memory_frac": runtime.kv_memory_frac,
                "kv_memory_basis": runtime.kv_memory_basis,
            },
        },
        disaggregated=dis,
        disaggregated_note=note,
        efficiency={s.id: describe_efficiency(s.chip.id, efficiency) for s in systems},
    )


class InfeasibleError(RackmathError):
    """A valid request no deployment in the searched space can meet."""


def require_feasible(result: SearchResult) -> SearchResult:
    """``result`` when some deployment (aggregated or xPyD) meets the SLOs; else
    :class:`InfeasibleError` with the reason, as ``rackmath plan`` exits 1 after its report."""
    if result.best is None and result.disaggregated is None:
        raise InfeasibleError(f"no deployment meets the SLOs; {result.infeasible_reason}")
    return result


def slo_limits(
    slo: str | None, ttft_s: float | None = None, tpot_s: float | None = None
) -> tuple[float | None, float | None]:
    """``(ttft_s, tpot_s)`` with ``--slo ttft_p99=2s,tpot_p99=50ms`` read over them: ``plan``
    sizes a steady state without queueing, so only those two limits mean anything to it."""
    if slo is None:
        return ttft_s, tpot_s
    limits = parse_slo(slo)
    if set(limits) - {"ttft_p99", "tpot_p99"}:
        raise InputError("--slo", slo, "ttft_p99 and tpot_p99 limits (plan has no queueing; see simulate)")
    return limits.get("ttft_p99", ttft_s), limits.get("tpot_p99", tpot_s)


def plan(
    model: ModelSpec,
    systems: list[SystemSpec],
    *,
    traffic: float = 1e6,
    input_len: int = 1024,
    output_len: int = 1024,
    ttft_s: float | None = None,
    tpot_s: float | None = None,
    prefix_hit: float = 0.0,
    slo: str | None = None,
    disaggregated: bool = True,
    runtime: RuntimeProfile | None = None,
    max_chips: int = DEFAULT_MAX_CHIPS,
    precisions: tuple[str, ...] = DEFAULT_PRECISIONS,
    max_candidates: int = MAX_SEARCH_CANDIDATES,
    routing: MoeRouting = BALANCED,
    efficiency: rl.Efficiency | EfficiencyMode | str = rl.KERNEL_GROUNDED,
    max_cp: int = DEFAULT_MAX_CP,
) -> SearchResult:
    """``rackmath plan``: the cheapest deployment serving ``traffic`` output tokens/s of
    ``input_len``/``output_len`` requests under the SLOs (seconds, or ``slo`` text), over
    ``systems`` and ``precisions``, xPyD pools included unless ``disaggregated`` is false;
    context parallelism up to ``max_cp`` (1: none); ``prefix_hit`` of each prompt found in the
    prefix cache (in [0, 1))."""
    ttft_s, tpot_s = slo_limits(slo, ttft_s, tpot_s)
    work = Workload(
        traffic_tokens_per_s=traffic,
        input_len=input_len,
        output_len=output_len,
        ttft_s=ttft_s,
        tpot_s=tpot_s,
        prefix_hit=prefix_hit,
    )
    return search(
        model,
        list({s.id: s for s in systems}.values()),
        work,
        precisions=tuple(dict.fromkeys(precisions)),
        max_chips=max_chips,
        disaggregated=disaggregated,
        runtime=runtime,
        efficiency=efficiency,
        routing=routing,
        max_candidates=max_candidates,
        max_cp=checks.whole("--max-cp", max_cp, maximum=64),
    )


def _infeasible_reason(families: list[FamilyOutcome], w: Workload) -> str:
    fitting = [f for f in families if f.best_tpot_s is not None]
    if not fitting:
        return "memory: no plan of any searched system holds the weights (raise --max-chips)"
    tpots = [f.best_tpot_s for f in fitting if f.best_tpot_s is not None]
    ttfts = [f.best_ttft_s for f in fitting if f.best_ttft_s is not None]
    best_tpot, best_ttft = min(tpots), min(ttfts)
    if w.tpot_s is not None and best_tpot > w.tpot_s:
        who = min(fitting, key=lambda f: f.best_tpot_s or np.inf)
        return (
            f"tpot: the best achievable TPOT is {best_tpot * 1e3:.3g} ms ({who.system}, {who.family}), "
            f"above the {w.tpot_s * 1e3:.3g} ms SLO"
        )
    if w.ttft_s is not None and best_ttft > w.ttft_s:
        who = min(fitting, key=lambda f: f.best_ttft_s or np.inf)
        return (
            f"ttft: the best achievable TTFT is {best_ttft * 1e3:.3g} ms ({who.system}, {who.family}), "
            f"above the {w.ttft_s * 1e3:.3g} ms SLO"
        )
    return "tpot+ttft: each SLO is reachable alone, but no deployment meets both"
