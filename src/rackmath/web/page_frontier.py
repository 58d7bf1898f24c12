"""Frontier page: throughput per GPU against tokens/s per user for several systems on one set
of axes, with cost and energy on the same x axis and published measurements overlaid.

Every number comes from :func:`rackmath.analyses.deploy.systems_frontier.systems_frontier` (each
system's curve is ``rackmath pareto`` for it); this module lays it out.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import streamlit as st

from rackmath.analyses.deploy.candidates import PRECISION_CHOICES
from rackmath.analyses.deploy.systems_frontier import MAX_SYSTEMS, SystemsFrontier, systems_frontier
from rackmath.catalog import loader as catalog
from rackmath.errors import InputError, RackmathError
from rackmath.views import fmt
from rackmath.views.figures import planner_charts
from rackmath.web import components as ui
from rackmath.web.commands import frontier_command
from rackmath.web.state.common import MAX_CONTEXT
from rackmath.web.state.planner import (
    EFFICIENCY_MODES,
    FrontierState,
    frontier_query,
    parse_frontier_query,
)
from rackmath.web.wording import in_page_words

PAGE = "frontier"
VIEWS = {"throughput": "Throughput per GPU", "cost": "Cost", "energy": "Energy"}


@lru_cache(maxsize=32)
def frontier_view(state: FrontierState) -> SystemsFrontier:
    """Every system's frontier and the published points for ``state``."""
    return systems_frontier(
        catalog.model(state.model),
        [catalog.system(s) for s in state.systems],
        input_len=state.input_len,
        output_len=state.output_len,
        precision=state.precision,
        max_chips=state.max_chips,
        efficiency=state.efficiency,
    )


def _controls(initial: FrontierState) -> FrontierState:
    ui.init_state(
        PAGE,
        {
            "model": initial.model,
            "systems": list(initial.systems),
            "input_len": initial.input_len,
            "output_len": initial.output_len,
            "precision": initial.precision,
            "max_chips": initial.max_chips,
            "efficiency": initial.efficiency,
        },
    )
    with st.sidebar:
        st.header("Workload and systems")
        model = st.selectbox(
            "Model",
            list(catalog.models()),
            key=ui.key(PAGE, "model"),
            format_func=lambda m: f"{catalog.models()[m].name} ({m})",
        )
        systems = st.multiselect(
            f"Systems (up to {MAX_SYSTEMS})",
            list(catalog.systems()),
            key=ui.key(PAGE, "systems"),
            max_selections=MAX_SYSTEMS,
        )
        cols = st.columns(2)
        input_len = cols[0].number_input(
            "Prompt tokens", min_value=1, max_value=MAX_CONTEXT, step=256, key=ui.key(PAGE, "input_len")
        )
        output_len = cols[1].number_input(
            "Output tokens", min_value=1, max_value=MAX_CONTEXT, step=256, key=ui.key(PAGE, "output_len")
        )
        precision = st.selectbox(
            "Precision family",
            PRECISION_CHOICES,
            key=ui.key(PAGE, "precision"),
            help="native: as the model ships; fp8: fp8 weights, KV and compute; fp4: 4-bit weights",
        )
        max_chips = st.number_input(
            "Most chips per replica (empty: the system's domain, at least 64)",
            min_value=1,
            max_value=1024,
            value=None,
            step=8,
            key=ui.key(PAGE, "max_chips"),
        )
        efficiency = st.radio(
            "Efficiency",
            EFFICIENCY_MODES,
            key=ui.key(PAGE, "efficiency"),
            horizontal=True,
            format_func=lambda m: "kernel-grounded" if m == "kernel" else "pure roofline",
        )
    return FrontierState(
        model=str(model),
        systems=tuple(systems),
        input_len=int(input_len),
        output_len=int(output_len),
        precision=str(precision),
        max_chips=None if max_chips is None else int(max_chips),
        efficiency=str(efficiency),
    )


def render_frontier_page() -> None:
    """The Frontier page: the systems' frontiers in three views, their tables, the command."""
    st.title("Frontier")
    st.caption(
        "For one model and request shape, each system's best tokens/s per GPU at every tokens/s "
        "per user (over plans and batches), with what each point costs and the energy it takes; "
        "published measurements of the same model are placed where their figures allow."
    )
    initial, errors = parse_frontier_query(st.query_params.to_dict())
    state = _controls(initial)
    ui.sync_url(frontier_query(state))
    ui.show_url_errors(PAGE, errors)
    if not state.systems:
        ui.show_error(InputError("Systems", "none", f"1 to {MAX_SYSTEMS} systems"))
        return
    try:
        result = frontier_view(state)
    except RackmathError as exc:
        ui.show_error(exc)
        return
    for c in result.curves:
        if c.refused:
            st.warning(in_page_words(f"{c.system}: no deployment fits: {c.refused}"))
    charts = planner_charts.systems_frontier(result)
    for tab, key in zip(st.tabs(list(VIEWS.values())), VIEWS, strict=True):
        with tab:
            ui.figure(PAGE, key, charts[key], "frontier")
    _tables(result)
    ui.cli_command(frontier_command(state))


def _best(c: Any) -> str:
    pts = c.frontier.frontier
    fastest = max(pts, key=lambda p: p.tokens_per_s_per_user)
    cheapest = min(pts, key=lambda p: p.usd_per_million_output_tokens)
    return (
        f"up to {fastest.tokens_per_s_per_user:,.0f} tokens/s per user; cheapest "
        f"{fmt.usd(cheapest.usd_per_million_output_tokens)}/M at {cheapest.tokens_per_s_per_user:,.1f} "
        f"tokens/s per user ({cheapest.plan_text}, batch {cheapest.batch:,})"
    )


def _tables(result: SystemsFrontier) -> None:
    st.markdown("##### The systems")
    for c in result.curves:
        if c.frontier is not None:
            st.caption(
                f"**{c.system}** ({c.chip}, {fmt.usd(c.usd_per_chip_hour)}/chip-hour as of {c.price_date}; "
                f"{c.efficiency}): {_best(c)}"
            )
    rows = [
        {"system": c.system, **p.to_dict()}
        for c in result.curves
        if c.frontier is not None
        for p in c.frontier.frontier
    ]
    with st.expander(f"Every frontier point ({len(rows)})"):
        ui.table(rows)
        ui.downloads(PAGE, "frontier", rows, result.to_dict())
    st.markdown("##### Published measurements on these axes")
    if not result.published:
        st.caption(f"The catalog has no throughput measurement of {result.model} on these systems.")
        return
    ui.table(
        [
            {
                "row": p.row_id,
                "system": p.system,
                "published": p.how,
                "lengths": f"{p.input_tokens:,} in / {p.output_tokens:,} out",
                "tokens/s per user": "not stated"
                if p.tokens_per_s_per_user is None
                else f"{p.tokens_per_s_per_user:,.1f}",
                "tokens/s per GPU": f"{p.tokens_per_s_per_chip:,.0f}",
                "usd_per_million_output_tokens": p.usd_per_million_output_tokens,
                "source": p.source,
            }
            for p in result.published
        ]
    )
