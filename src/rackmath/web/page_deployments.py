"""Deployments page: the cheapest fleet that meets an SLO, and the throughput/interactivity frontier.

Every number comes from :func:`rackmath.analyses.deploy.search.search` and
:func:`rackmath.analyses.deploy.frontier.pareto`; this module lays them out.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache
from typing import Any

import streamlit as st

from rackmath.analyses.deploy import frontier as frontier_analysis
from rackmath.analyses.deploy import search
from rackmath.analyses.deploy.candidates import ASSUMPTIONS, PRECISION_CHOICES, Choice, Workload
from rackmath.analyses.deploy.frontier import Frontier
from rackmath.catalog import loader as catalog
from rackmath.errors import RackmathError
from rackmath.units import MS
from rackmath.views import fmt
from rackmath.views.figures import serving_charts
from rackmath.web import components as ui
from rackmath.web.commands import deployments_command
from rackmath.web.render_plotly import figure as plotly_figure
from rackmath.web.state.common import CUSTOM_MODEL, MAX_CONTEXT, model_of
from rackmath.web.state.deployments import DeploymentsState, deployments_query, parse_deployments_query

PAGE = "deployments"


@lru_cache(maxsize=32)
def search_result(state: DeploymentsState) -> search.SearchResult:
    """The search for ``state`` (the frontier's system is not part of it)."""
    return search.search(
        model_of(state.model, state.config),
        [catalog.system(s) for s in state.systems],
        Workload(
            traffic_tokens_per_s=state.traffic_tokens_per_s,
            input_len=state.input_len,
            output_len=state.output_len,
            ttft_s=None if state.ttft_ms is None else state.ttft_ms * MS,
            tpot_s=None if state.tpot_ms is None else state.tpot_ms * MS,
        ),
        precisions=state.precisions,
        max_chips=state.max_chips,
    )


@lru_cache(maxsize=32)
def frontier(state: DeploymentsState) -> Frontier:
    return frontier_analysis.pareto(
        model_of(state.model, state.config),
        catalog.system(state.frontier_system),
        input_len=state.input_len,
        output_len=state.output_len,
        precisions=state.precisions,
    )


def _controls(initial: DeploymentsState) -> DeploymentsState:
    ui.init_state(
        PAGE,
        {
            "model": initial.model,
            "config": initial.config or "",
            "systems": list(initial.systems),
            "precisions": list(initial.precisions),
            "traffic_tokens_per_s": initial.traffic_tokens_per_s,
            "input_len": initial.input_len,
            "output_len": initial.output_len,
            "ttft_ms": initial.ttft_ms,
            "tpot_ms": initial.tpot_ms,
            "max_chips": initial.max_chips,
            "frontier_system": initial.frontier_system,
        },
    )
    with st.sidebar:
        st.header("Model and workload")
        model_id, config = ui.model_picker(PAGE)
        systems = st.multiselect("Systems searched", list(catalog.systems()), key=ui.key(PAGE, "systems"))
        precisions = st.multiselect(
            "Precision families",
            list(PRECISION_CHOICES),
            key=ui.key(PAGE, "precisions"),
            help="native: as the model ships; fp8: weights, KV and compute in fp8; fp4: 4-bit weights",
        )
        traffic = ui.bounded_number(PAGE, "traffic_tokens_per_s", "Traffic (output tokens/s)", step=10_000.0)
        input_len = ui.bounded_number(PAGE, "input_len", "Prompt tokens", limits=(1, MAX_CONTEXT), step=256)
        output_len = ui.bounded_number(PAGE, "output_len", "Output tokens", limits=(1, MAX_CONTEXT), step=256)
        ttft = ui.bounded_number(
            PAGE,
            "ttft_ms",
            "TTFT SLO (ms)",
            value=None,
            step=100.0,
            placeholder="none",
            help="empty: no limit on the time to first token",
        )
        tpot = ui.bounded_number(
            PAGE,
            "tpot_ms",
            "TPOT SLO (ms)",
            value=None,
            step=5.0,
            placeholder="none",
            help="empty: no limit on the time per output token",
        )
        max_chips = ui.bounded_number(
            PAGE, "max_chips", "Most chips per replica", limits=(1, 100_000), step=8
        )
    return DeploymentsState(
        model=model_id,
        config=config if model_id == CUSTOM_MODEL else None,
        systems=tuple(systems),
        precisions=tuple(precisions),
        traffic_tokens_per_s=float(traffic),
        input_len=int(input_len),
        output_len=int(output_len),
        ttft_ms=None if ttft is None else float(ttft),
        tpot_ms=None if tpot is None else float(tpot),
        max_chips=int(max_chips),
        frontier_system=str(st.session_state[ui.key(PAGE, "frontier_system")]),
    )


def _choice_row(c: Choice) -> dict[str, Any]:
    d = c.to_dict()
    d["precision"] = "/".join(d["precision"][k] for k in ("weights", "kv", "compute"))
    del d["plan"]
    return d


def render_deployments_page() -> None:
    """The Deployments page: search and frontier, controls in the sidebar."""
    st.title("Deployments")
    st.caption(
        "Parallel plans (tensor, pipeline, data, expert) over real topologies: the cheapest fleet that "
        "meets the latency SLOs, and the frontier of throughput against interactivity."
    )
    initial, errors = parse_deployments_query(st.query_params.to_dict())
    state = _controls(initial)
    st.subheader("Throughput vs interactivity")
    options = sorted({*state.systems, state.frontier_system}) or list(catalog.systems())
    frontier_system = st.selectbox("Frontier on", options, key=ui.key(PAGE, "frontier_system"))
    state = dataclasses.replace(state, frontier_system=str(frontier_system))
    ui.sync_url(deployments_query(state))
    ui.show_errors(errors)
    if state.model == CUSTOM_MODEL and not (state.config or "").strip():
        st.info("Paste a Hugging Face config.json in the sidebar, or upload one, to search its deployments.")
        return
    _frontier(state)
    _search(state)
    ui.cli_command(deployments_command(state))


def _frontier(state: DeploymentsState) -> None:
    try:
        f = frontier(state)
    except RackmathError as exc:
        ui.show_error(exc)
        return
    fig = plotly_figure(serving_charts.pareto(f))
    ui.figure(PAGE, "pareto", fig, "deployments")
    rows = [p.to_dict() for p in f.frontier]
    with st.expander(f"The {len(rows)} deployments on the frontier ({f.candidates_evaluated:,} evaluated)"):
        ui.table(rows)
        ui.downloads(PAGE, "pareto", rows, f.to_dict())


def _search(state: DeploymentsState) -> None:
    st.subheader("The cheapest fleet for the SLO")
    if not state.systems or not state.precisions:
        ui.show_error(RackmathError("pick at least one system and one precision family to search"))
        return
    try:
        result = search_result(dataclasses.replace(state, frontier_system=""))
    except RackmathError as exc:
        ui.show_error(exc)
        return
    st.caption(f"{result.candidates_evaluated:,} deployments evaluated")
    best = result.best
    if best is None:
        ui.show_error(RackmathError(f"no deployment meets the SLOs: {result.infeasible_reason}"))
    else:
        cols = st.columns(6)
        cols[0].metric("System", best.system)
        cols[1].metric("Plan", best.plan_text, help=f"{best.chips} chips per replica, batch {best.batch:,}")
        cols[2].metric("Chips", f"{best.chips} x {best.replicas}", help="chips per replica x replicas")
        cols[3].metric("$ per M output tokens", fmt.usd(best.fleet_usd_per_million_output_tokens))
        cols[4].metric("TPOT", fmt.seconds(best.tpot_s))
        cols[5].metric("TTFT", fmt.seconds(best.ttft_s))
        rows = [_choice_row(c) for c in (best, *result.runners_up)]
        st.markdown("##### The best plan and the runners-up")
        ui.table(rows)
        ui.downloads(PAGE, "plans", rows, result.to_dict())
    st.markdown("##### Each system and precision family")
    families = [
        {
            "system": f.system,
            "precision_family": f.family,
            "candidates": f.candidates,
            "feasible": f.best is not None,
            "binding_constraint": f.binding or "",
            "reason": f.reason,
            "best_tpot_s": f.best_tpot_s,
            "best_ttft_s": f.best_ttft_s,
            "fleet_usd_per_million_output_tokens": f.best.fleet_usd_per_million_output_tokens
            if f.best
            else None,
        }
        for f in result.families
    ]
    ui.table(families)
    ui.downloads(PAGE, "families", families)
    with st.expander("Assumptions"):
        st.markdown("\n".join(f"- {a}" for a in ASSUMPTIONS))
