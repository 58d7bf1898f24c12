"""Compare page: two to four configurations side by side at their batch and context.

Every number is an attribute of :func:`rackmath.analyses.deploy.compare.compare` (each configuration
is ``rackmath explain`` at one point, with an optional parallel plan); this module lays it out.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache
from typing import Any

import streamlit as st

from rackmath.analyses.deploy.compare import Comparison, Configuration, compare
from rackmath.catalog import loader as catalog
from rackmath.errors import RackmathError
from rackmath.specs.precision import Precision
from rackmath.views import fmt
from rackmath.views.figures import planner_charts
from rackmath.web import components as ui
from rackmath.web.commands import compare_command
from rackmath.web.state.common import MAX_BATCH, MAX_CONTEXT
from rackmath.web.state.planner import (
    EFFICIENCY_MODES,
    LETTERS,
    MAX_COMPARED,
    CompareConfig,
    CompareState,
    compare_query,
    parse_compare_query,
)

PAGE = "compare"


def configuration(c: CompareConfig) -> Configuration:
    return Configuration(
        catalog.model(c.model),
        catalog.system(c.system),
        c.batch,
        c.context,
        chips=c.chips,
        plan=c.plan,
        weights=c.weights,
        kv=c.kv,
        efficiency=c.efficiency,
    )


@lru_cache(maxsize=64)
def comparison(configs: tuple[CompareConfig, ...]) -> Comparison:
    """The comparison of ``configs`` (each configuration's explain at its point)."""
    return compare([configuration(c) for c in configs])


# --------------------------------------------------------------------------- controls


def _k(letter: str, field: str) -> str:
    return ui.key(PAGE, f"{letter}.{field}")


def _system_changed(letter: str) -> None:
    system = catalog.system(st.session_state[_k(letter, "system")])
    st.session_state[_k(letter, "chips")] = system.default_chips


def _config_controls(letter: str, where: Any) -> CompareConfig:
    with where:
        st.markdown(f"**{letter.upper()}**")
        model = st.selectbox(
            "Model", list(catalog.models()), key=_k(letter, "model"), format_func=lambda m: m
        )
        system = st.selectbox(
            "System",
            list(catalog.systems()),
            key=_k(letter, "system"),
            on_change=_system_changed,
            args=(letter,),
        )
        chips = st.number_input("Chips", min_value=1, max_value=1_000_000, step=1, key=_k(letter, "chips"))
        plan = st.text_input(
            "Parallel plan (empty: one ideal chip)",
            key=_k(letter, "plan"),
            placeholder="e.g. tp=8 or dp=64,ep=64",
            help="with a plan, communication over the real topology and memory per chip of the plan",
        )
        precisions = ["default", *(p.value for p in Precision)]
        weights = st.selectbox("Weights", precisions, key=_k(letter, "weights"))
        kv = st.selectbox("KV cache", precisions, key=_k(letter, "kv"))
        batch = st.number_input(
            "Batch (sequences)", min_value=1, max_value=MAX_BATCH, step=1, key=_k(letter, "batch")
        )
        context = st.number_input(
            "Context (tokens)", min_value=1, max_value=MAX_CONTEXT, step=1024, key=_k(letter, "context")
        )
        efficiency = st.radio(
            "Efficiency",
            EFFICIENCY_MODES,
            key=_k(letter, "efficiency"),
            horizontal=True,
            format_func=lambda m: "kernel-grounded" if m == "kernel" else "pure roofline",
        )
    return CompareConfig(
        model=str(model),
        system=str(system),
        chips=int(chips),
        plan=str(plan).strip() or None,
        weights=None if weights == "default" else str(weights),
        kv=None if kv == "default" else str(kv),
        batch=int(batch),
        context=int(context),
        efficiency=str(efficiency),
    )


def _controls(initial: CompareState) -> CompareState:
    seed: dict[str, Any] = {"count": initial.count}
    for letter, c in zip(LETTERS, initial.configs, strict=True):
        chips = c.chips or catalog.system(c.system).default_chips
        seed.update({f"{letter}.{k}": v for k, v in dataclasses.asdict(c).items()})
        seed.update(
            {
                f"{letter}.chips": chips,
                f"{letter}.plan": c.plan or "",
                f"{letter}.weights": c.weights or "default",
                f"{letter}.kv": c.kv or "default",
            }
        )
    ui.init_state(PAGE, seed)
    with st.sidebar:
        st.header("Configurations")
        count = st.number_input(
            "How many side by side", min_value=2, max_value=MAX_COMPARED, step=1, key=ui.key(PAGE, "count")
        )
    columns = st.columns(int(count))
    configs = [_config_controls(letter, col) for letter, col in zip(LETTERS, columns, strict=False)]
    return CompareState(int(count), (*configs, *initial.configs[len(configs) :]))


# --------------------------------------------------------------------------- page


def render_compare_page() -> None:
    """The Compare page: configurations in columns, their figures side by side below."""
    st.title("Compare")
    st.caption(
        "Two to four configurations at their own batch and context, side by side: step time, "
        "tokens/s per user and per GPU, dollars per million tokens, joules per token and memory "
        "per chip. Each column is `rackmath explain` at one point."
    )
    initial, errors = parse_compare_query(st.query_params.to_dict())
    state = _controls(initial)
    ui.sync_url(compare_query(state))
    ui.show_url_errors(PAGE, errors)
    try:
        result = comparison(state.shown)
    except RackmathError as exc:
        ui.show_error(exc)
        ui.cli_command(compare_command(state))
        return
    _table(result)
    ui.figure(PAGE, "ratios", planner_charts.comparison(result), "compare")
    ui.downloads(PAGE, "compare", [p.to_dict() for p in result.points], result.to_dict())
    ui.cli_command(compare_command(state))


def _cell(key: str, value: Any) -> str:
    if key == "fits":
        return "yes" if value else "no"
    if key == "joules_per_token":
        return "n/a (no power figures)" if value is None else f"{value:.3g} J"
    if key in ("tokens_per_s_per_user", "tokens_per_s_per_chip", "tokens_per_s"):
        return f"{value:,.1f} tokens/s" if value < 100 else f"{value:,.0f} tokens/s"
    return fmt.column(key, value)


def _table(result: Comparison) -> None:
    points = result.points
    st.markdown("##### Side by side")
    header = {p.label: f"{p.label}: {p.model} on {p.chips} x {p.chip}" for p in points}
    for p in points:
        how = f"plan {p.plan}" if p.plan else "one ideal chip"
        st.caption(
            f"**{p.label}**: {p.model} on {p.chips} x {p.chip} ({p.system}), {how}, batch {p.batch:,}, "
            f"context {p.context:,}; weights {p.weights}, KV {p.kv}, compute {p.compute}; {p.efficiency}"
        )
    rows = [
        {"figure": row["figure"], **{header[p.label]: _cell(row["key"], row[p.label]) for p in points}}
        for row in result.rows()
    ]
    st.table(rows, border="horizontal", hide_index=True)
    for p in points:
        if not p.fits:
            st.warning(
                f"{p.label} does not fit: {fmt.nbytes(p.memory_bytes_per_chip)} per chip, the chip may "
                f"fill {fmt.nbytes(p.usable_bytes_per_chip)} "
                f"({fmt.nbytes(p.capacity_bytes_per_chip)} less the reserve)."
            )
