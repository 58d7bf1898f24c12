"""The Economics page's controls: one function per tab that draws its widgets (seeded from the
URL, bounded as the URL parser bounds them) and returns the tab's state."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import streamlit as st

from rackmath.catalog import economics as ce
from rackmath.web import components as ui
from rackmath.web.state.common import MAX_BATCH, MAX_CONTEXT
from rackmath.web.state.economics import (
    MAX_LOAD_FRAC,
    MAX_LOADS,
    NO_PRICE,
    CachesTab,
    FastTab,
    FleetTab,
    OvertrainTab,
    PricesTab,
    SparsityTab,
)

PAGE = "economics"


def widget_key(field: str) -> str:
    return ui.key(PAGE, field)


def _seed(section: str, tab: Any) -> None:
    ui.init_state(PAGE, {f"{section}.{f.name}": getattr(tab, f.name) for f in dataclasses.fields(tab)})


def _price_label(price_id: str) -> str:
    if price_id == NO_PRICE:
        return "none: the lecture's 2.5x speed for 6x the price"
    p = ce.prices()[price_id]
    return f"{p.name} ({p.id})"


def _prices_controls(initial: PricesTab) -> PricesTab:
    _seed("prices", initial)
    cols = list(st.columns(4))
    batch = ui.bounded_number(
        PAGE,
        "prices.batch",
        "Decode batch",
        limits=(1, MAX_BATCH),
        where=cols[0],
        step=100,
        help="The output/input reference: decode at this batch against one prefill",
    )
    context = ui.bounded_number(
        PAGE, "prices.context", "Context (tokens)", limits=(1, MAX_CONTEXT), where=cols[1], step=1024
    )
    tiered = [p.id for p in ce.prices().values() if p.tier_boundaries_tokens]
    long_price = cols[2].selectbox(
        "Long-context tiers of", tiered, key=widget_key("prices.long_price"), format_func=_price_label
    )
    long_batch = ui.bounded_number(
        PAGE,
        "prices.long_batch",
        "Decode batch of the cost-vs-context curve",
        limits=(1, MAX_BATCH),
        where=cols[3],
        step=16,
    )
    return PricesTab(int(batch), int(context), str(long_price), int(long_batch))


def _caches_controls(initial: CachesTab) -> CachesTab:
    _seed("caches", initial)
    cols = list(st.columns(4))
    price = cols[0].selectbox(
        "Cache prices of", list(ce.prices()), key=widget_key("caches.price"), format_func=_price_label
    )
    retentions = cols[1].text_input(
        "Retentions",
        key=widget_key("caches.retentions"),
        help="comma-separated durations: 20ms, 30s, 5m, 1h, 2d, 1y",
    )
    years = ui.bounded_number(
        PAGE,
        "caches.amortization_years",
        "Amortization (years)",
        where=cols[2],
        step=1.0,
        help="memory purchases are spread over this many 365-day years (HBM is priced at the GPU's rental)",
    )
    prompt = ui.bounded_number(
        PAGE,
        "caches.prompt_tokens",
        "Prompt a miss recomputes (tokens)",
        limits=(1, MAX_CONTEXT),
        where=cols[3],
        step=1024,
    )
    return CachesTab(str(price), str(retentions), float(years), int(prompt))


def _fast_controls(initial: FastTab) -> FastTab:
    _seed("fast", initial)
    cols = list(st.columns(4))
    with_fast = [p.id for p in ce.prices().values() if p.fast_mode is not None]
    price = cols[0].selectbox(
        "Published fast mode", [*with_fast, NO_PRICE], key=widget_key("fast.price"), format_func=_price_label
    )
    k = ui.bounded_number(
        PAGE,
        "fast.normal_over_balance",
        "Normal batch / balance batch (k)",
        where=cols[1],
        value=None,
        step=0.5,
        placeholder="published speed-up, or 2.5",
        help="Normal service runs at k x B*; empty = the published speed-up (or the lecture's 2.5)",
    )
    m = ui.bounded_number(
        PAGE,
        "fast.price_multiple",
        "Price multiple (m)",
        where=cols[2],
        value=None,
        step=1.0,
        placeholder="published multiple, or 6",
        help="How many times the normal price per token; empty = the published multiple (or 6)",
    )
    context = ui.bounded_number(
        PAGE, "fast.context", "Context (tokens)", limits=(1, MAX_CONTEXT), where=cols[3], step=1024
    )
    return FastTab(
        str(price),
        None if k is None else float(k),
        None if m is None else float(m),
        int(context),
    )


def _fleet_controls(initial: FleetTab) -> FleetTab:
    _seed("fleet", initial)
    cols = list(st.columns(4))
    traffic = ui.bounded_number(
        PAGE,
        "fleet.traffic_tokens_per_s",
        "Traffic (output tokens/s)",
        where=cols[0],
        step=1e6,
        format="%.0f",
    )
    batch = ui.bounded_number(
        PAGE, "fleet.batch", "Batch (sequences per replica)", limits=(1, 100_000), where=cols[1], step=100
    )
    source = cols[2].radio(
        "Step time",
        ["stated", "roofline"],
        key=widget_key("fleet.step_source"),
        format_func=lambda s: "stated, same at every batch" if s == "stated" else "roofline of the reference",
        horizontal=True,
    )
    if source == "stated":
        step_ms = ui.bounded_number(
            PAGE, "fleet.step_ms", "Decode step (ms)", where=cols[3], step=1.0, format="%.6g"
        )
        context = initial.context
    else:
        context = ui.bounded_number(
            PAGE, "fleet.context", "Context (tokens)", limits=(1, MAX_CONTEXT), where=cols[3], step=1024
        )
        step_ms = initial.step_ms
    cols = list(st.columns(6))
    chips = ui.bounded_number(
        PAGE,
        "fleet.chips_per_replica",
        "Chips per replica",
        limits=(1, 1_000_000),
        where=cols[0],
        value=None,
        step=8,
        placeholder="72, or the reference's",
    )
    usd = ui.bounded_number(
        PAGE,
        "fleet.usd_per_chip_hour",
        "USD per chip-hour",
        where=cols[1],
        value=None,
        step=0.1,
        placeholder="catalog",
    )
    output_tokens = ui.bounded_number(
        PAGE, "fleet.output_tokens", "Output tokens per request", limits=(1, 100_000), where=cols[2], step=64
    )
    loads = cols[3].text_input(
        "Loads (fractions of capacity)",
        key=widget_key("fleet.loads"),
        help=f"comma-separated, at most {MAX_LOADS}, each from 1e-6 to {MAX_LOAD_FRAC:g}: "
        "each is one simulation",
    )
    requests = ui.bounded_number(
        PAGE, "fleet.requests", "Arrivals per load (at least)", limits=(100, 20_000), where=cols[4], step=500
    )
    seed = ui.bounded_number(PAGE, "fleet.seed", "Seed", limits=(0, 2**31 - 1), where=cols[5], step=1)
    return FleetTab(
        traffic_tokens_per_s=float(traffic),
        batch=int(batch),
        step_source=str(source),
        step_ms=float(step_ms),
        context=int(context),
        chips_per_replica=None if chips is None else int(chips),
        usd_per_chip_hour=None if usd is None else float(usd),
        output_tokens=int(output_tokens),
        loads=str(loads),
        requests=int(requests),
        seed=int(seed),
    )


def _overtrain_controls(initial: OvertrainTab) -> OvertrainTab:
    _seed("overtrain", initial)
    cols = list(st.columns(4))
    params = ui.bounded_number(
        PAGE, "overtrain.params_billions", "Active parameters N (billions)", where=cols[0], step=10.0
    )
    traffic = ui.bounded_number(
        PAGE,
        "overtrain.tokens_per_s_millions",
        "Inference traffic (millions of tokens/s)",
        where=cols[1],
        step=10.0,
        format="%.4g",
    )
    days = ui.bounded_number(PAGE, "overtrain.duration_days", "Serving for (days)", where=cols[2], step=30.0)
    per_param = ui.bounded_number(
        PAGE, "overtrain.tokens_per_param", "Chinchilla tokens per parameter", where=cols[3], step=1.0
    )
    cols = list(st.columns(3))
    rl = ui.bounded_number(
        PAGE,
        "overtrain.rl_flops_per_param_token",
        "RL FLOPs per parameter-token",
        where=cols[0],
        step=1.0,
        help="2 (forward only) to 6 (forward and backward)",
    )
    rl_eff = ui.bounded_number(
        PAGE,
        "overtrain.rl_efficiency_frac",
        "RL efficiency vs pre-training",
        where=cols[1],
        step=0.05,
        format="%.3f",
    )
    inf_eff = ui.bounded_number(
        PAGE,
        "overtrain.inference_efficiency_frac",
        "Inference efficiency vs pre-training",
        where=cols[2],
        step=0.05,
        format="%.3f",
    )
    return OvertrainTab(
        float(params), float(traffic), float(days), float(rl), float(rl_eff), float(inf_eff), float(per_param)
    )


def _sparsity_controls(initial: SparsityTab) -> SparsityTab:
    _seed("sparsity", initial)
    cols = list(st.columns(4))
    levels = cols[0].text_input(
        "Sparsities N_total / N_active",
        key=widget_key("sparsity.sparsities"),
        help="comma-separated numbers >= 1",
    )
    active = ui.bounded_number(
        PAGE,
        "sparsity.params_active_billions",
        "Active parameters (billions)",
        where=cols[1],
        value=None,
        step=10.0,
        placeholder="the reference model's",
    )
    context = ui.bounded_number(
        PAGE, "sparsity.context", "Context (tokens)", limits=(1, MAX_CONTEXT), where=cols[2], step=1024
    )
    users = ui.bounded_number(
        PAGE, "sparsity.users", "Concurrent users", limits=(1, 10_000_000), where=cols[3], step=500
    )
    return SparsityTab(str(levels), None if active is None else float(active), int(context), int(users))


CONTROLS: dict[str, Callable[[Any], Any]] = {
    "prices": _prices_controls,
    "caches": _caches_controls,
    "fast": _fast_controls,
    "fleet": _fleet_controls,
    "overtrain": _overtrain_controls,
    "sparsity": _sparsity_controls,
}
