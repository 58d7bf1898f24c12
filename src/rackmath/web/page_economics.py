"""Economics page: what prices reveal, cache tiers, fast modes, fleets, over-training, sparsity.

Every number comes from :mod:`rackmath.analyses` (``prices``, ``caching``, ``fast_mode``,
``fleet``, ``overtrain``, ``sparsity``), called as ``rackmath prices | fleet | overtrain |
sparsity`` do (``cli/econ_cmds.py``, ``cli/scale_cmds.py``); this module lays them out. The tabs are lazy:
only the open tab computes, each tab's result is cached on (reference deployment, the tab's
state), and every tab's controls live in the URL (``<tab>.<field>``), open or not.

The computations live in :mod:`rackmath.web.economics_views` and the controls in
:mod:`rackmath.web.economics_controls`; this module lays out the page and each tab's results.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import streamlit as st

from rackmath.analyses.economics import prices
from rackmath.catalog import loader as catalog
from rackmath.errors import RackmathError
from rackmath.plots.economics import save_fleet_plot, save_overtrain_plot, save_sparsity_plot
from rackmath.views import fmt
from rackmath.views.figure_spec import FigureData
from rackmath.views.figures import economics_charts
from rackmath.web import components as ui
from rackmath.web.commands import economics_command
from rackmath.web.economics_controls import (
    CONTROLS,
    PAGE,
    widget_key,
)
from rackmath.web.economics_views import (
    caches_view,
    fast_view,
    fleet_view,
    overtrain_view,
    prices_report,
    prices_view,
    sparsity_view,
)
from rackmath.web.state.economics import (
    ECONOMICS_TABS,
    EconomicsState,
    economics_query,
    parse_economics_query,
)


def render_economics_page() -> None:
    """The Economics page: a reference deployment in the sidebar, one tab per question."""
    st.title("Economics")
    st.caption(
        "What API prices reveal about the hardware under them, where a prompt cache should live, "
        "what a fast mode buys, how big a fleet is, how far past Chinchilla to train, and what "
        "sparsity costs. Costs come from the roofline of the reference deployment."
    )
    initial, errors = parse_economics_query(st.query_params.to_dict())
    ui.init_state(
        PAGE, {"tab": ECONOMICS_TABS[initial.tab], "model": initial.model, "system": initial.system}
    )
    with st.sidebar:
        st.header("Reference deployment")
        model = st.selectbox(
            "Model",
            list(catalog.models()),
            key=widget_key("model"),
            format_func=lambda m: f"{catalog.models()[m].name} ({m})",
        )
        system = st.selectbox(
            "System",
            list(catalog.systems()),
            key=widget_key("system"),
            format_func=lambda s: f"{catalog.systems()[s].name} ({s})",
        )
        st.caption("Its default chips, precisions and dated price; the Serving page shows it in detail.")
    messages = st.container()
    tabs = st.tabs(list(ECONOMICS_TABS.values()), key=widget_key("tab"), on_change="rerun")
    opened = [tab_id for tab_id, tab in zip(ECONOMICS_TABS, tabs, strict=True) if tab.open] or ["prices"]
    sections: dict[str, Any] = {}
    for tab_id, tab in zip(ECONOMICS_TABS, tabs, strict=True):
        if tab_id == opened[0]:
            with tab:
                sections[tab_id] = CONTROLS[tab_id](getattr(initial, tab_id))
    state = dataclasses.replace(initial, tab=opened[0], model=str(model), system=str(system), **sections)
    ui.sync_url(economics_query(state))
    with messages:
        ui.show_url_errors(PAGE, errors)
    with tabs[list(ECONOMICS_TABS).index(state.tab)]:
        try:
            _RENDER[state.tab](state)
        except RackmathError as exc:
            ui.show_error(exc)
        ui.cli_command(economics_command(state, dt.date.today().isoformat()))


def _side_by_side(*charts: tuple[str, FigureData]) -> None:
    """Charts ``(name, figure)`` in equal columns, left to right."""
    for column, (name, fig) in zip(st.columns(len(charts)), charts, strict=True):
        with column:
            ui.figure(PAGE, name, fig, "economics")


def _prices_png(state: EconomicsState) -> Callable[[Path], Path]:
    def draw(path: Path) -> Path:
        from rackmath.plots.economics import save_prices_plot

        return save_prices_plot(prices_report(state, dt.date.today()), path)

    return draw


def _render_prices(state: EconomicsState) -> None:
    survey, lc = prices_view(state.model, state.system, state.prices, dt.date.today())
    rr = survey.roofline
    d = rr.deployment
    st.markdown(
        f"##### Output over input (D34): {d.model.name} on {d.chips} x {d.system.chip.name}, "
        f"batch {rr.batch:,.0f}, {rr.context:,.0f} tokens"
    )
    cols = list(st.columns(5))
    cols[0].metric("Roofline $ per M output", fmt.usd(rr.usd_per_million_output_tokens))
    cols[1].metric("Roofline $ per M input", fmt.usd(rr.usd_per_million_input_tokens), help="one prefill")
    cols[2].metric("Roofline output / input", f"{rr.output_over_input:.1f}x")
    cols[3].metric("Decode MFU", fmt.pct(rr.decode_mfu))
    cols[4].metric("Prefill MFU", fmt.pct(rr.prefill_mfu))
    st.caption(
        "If prices track cost, a price ratio r says decode runs at about 1/r of prefill's utilization "
        f"(5x: ~20%). Prices as of {survey.as_of.isoformat()}; the oldest is {survey.oldest_days} days old."
    )
    ui.figure(PAGE, "price-ratio", economics_charts.price_ratio(survey), "economics")
    rows = [
        {
            k: v
            for k, v in prices.price_dict(p, survey.as_of).items()
            if k not in ("tiers", "fast_mode", "source")
        }
        for p in survey.prices
    ]
    with st.expander(f"The {len(rows)} price entries"):
        ui.table(rows)
        ui.downloads(PAGE, "prices", rows, survey.to_dict())
    x = lc.to_dict()
    st.markdown(f"##### Long-context tiers (D30, D31): {lc.price.name} over {lc.deployment.model.id}")
    cols = list(st.columns(5))
    cols[0].metric("Tier boundaries", ", ".join(f"{b:,}" for b in lc.price.tier_boundaries_tokens))
    cols[1].metric(
        "KV = compute at (len*)",
        f"{lc.crossover_context_tokens:,.0f} tokens",
        help=f"{lc.deployment.model.id}: {lc.kv_bytes_per_token:,.0f} bytes of KV per token",
    )
    cols[2].metric(
        "Implied KV per token",
        ", ".join(f"{v:,.0f} B" for v in lc.boundary_implied_kv_bytes_per_token),
        help=f"what each tier boundary implies; N_active = {fmt.count(lc.params_active_assumed)}, "
        f"r = {lc.balance_ratio_assumed:g} (the lecture's round inputs)",
    )
    cols[3].metric("Price above cost everywhere", "yes" if lc.above_cost_everywhere else "no")
    cols[4].metric(
        "Thinnest output margin",
        f"{x['min_output_margin_frac']:+.0%}",
        help=f"at {x['min_output_margin_context']:,.0f} tokens; input {x['min_input_margin_frac']:+.0%} "
        f"at {x['min_input_margin_context']:,.0f}",
    )
    ui.figure(PAGE, "long-context", economics_charts.long_context(lc), "economics")
    with st.expander("The cost-vs-context curve"):
        ui.table(x["curve"])
        ui.downloads(PAGE, "long-context", x["curve"], x)
    ui.png_download(
        PAGE,
        "prices",
        _prices_png(state),
        "long context, cache tiers and fast mode, as `rackmath prices --plot`",
    )


def _render_caches(state: EconomicsState) -> None:
    c = caches_view(state.model, state.system, state.caches)
    d = c.to_dict()
    st.markdown(f"##### Prompt caches (D35, D36): {c.deployment.model.id}'s KV in each memory tier")
    cols = list(st.columns(4))
    cols[0].metric("KV per token", fmt.nbytes(c.kv_bytes_per_token))
    cols[1].metric(
        "Recompute (prefill) $ per M",
        f"{d['recompute_usd_per_million_tokens']:.3g}",
        help=f"a miss prefills the {c.prompt_tokens:,.0f}-token prompt again",
    )
    cols[2].metric("Cheapest for 5 min", d["lecture_mapping"]["300s"])
    cols[3].metric("Cheapest for 1 h", d["lecture_mapping"]["3600s"])
    tiers = d["tiers"]
    ui.table(tiers)
    ui.downloads(PAGE, "cache-tiers", tiers, d)
    ui.figure(PAGE, "cache", economics_charts.cache(c), "economics")
    by_retention = [
        {
            "retention_s": b["retention_s"],
            "cheapest": b["cheapest"],
            **{f"{t}_hit_usd_per_million_tokens": v for t, v in b["hit_usd_per_million_tokens"].items()},
        }
        for b in d["by_retention"]
    ]
    st.markdown("##### Cheapest tier by retention")
    ui.table(by_retention)
    ui.downloads(PAGE, "cache-retention", by_retention)
    pr = d["pricing"]
    if pr and pr["miss_over_hit"]:
        st.markdown(
            f"**{pr['priced_model']}** charges a miss {pr['miss_over_hit']:.0f}x a hit (input "
            f"{fmt.usd(pr['input_usd_per_million_tokens'])}/M = recompute, read "
            f"{fmt.usd(pr['cache_read_usd_per_million_tokens'])}/M). At cost, recomputing is "
            f"{pr['cost_recompute_over_hit_5m']:.0f}x a 5-minute hit, and holding 5 minutes costs "
            f"{pr['cheapest_hold_5m_usd_per_million_tokens']:.2g} $/M."
        )
    elif pr:
        st.caption(f"{pr['priced_model']} publishes no cache-read price.")
    ui.png_download(PAGE, "prices-caches", _prices_png(state), "as `rackmath prices --plot`")


def _render_fast(state: EconomicsState) -> None:
    f = fast_view(state.model, state.system, state.fast)
    i = f.ideal
    st.markdown("##### The lecture's ideal (D12): weights-only roofline")
    cols = list(st.columns(4))
    cols[0].metric("Normal batch", f"{i.normal_over_balance:g} x B*")
    cols[1].metric("Fast batch", f"B* / {i.price_multiple:g}")
    cols[2].metric("Speed-up", f"{i.speedup:.2f}x", help=f"for {i.price_multiple_check:.2f}x the price")
    cols[3].metric("Ceiling", f"{i.ceiling_speedup:.2f}x", help="no price buys more: the latency floor")
    pub = f.to_dict()["published"]
    if pub:
        st.caption(
            f"Published ({pub['priced_model']}, {pub['date']}): {pub['price_multiple']:.0f}x the price, "
            f"up to {pub['speedup_max']:g}x faster."
        )
    dm = f.deployment
    if dm is not None:
        st.markdown(
            f"##### On {dm.deployment.model.id} ({dm.deployment.chips} x {dm.deployment.system.chip.id}, "
            f"{dm.context:,.0f} tokens)"
        )
        cols = list(st.columns(6))
        cols[0].metric("Balance batch B*", f"{dm.balance_batch:,.0f}")
        cols[1].metric("Normal batch", f"{dm.normal_batch:,.0f}")
        cols[2].metric(f"Fast batch at {dm.requested_price_multiple:g}x", f"{dm.fast_batch:,.0f}")
        cols[3].metric("Fast speed-up", f"{dm.fast_speedup:.2f}x")
        cols[4].metric("Batch-1 ceiling", f"{dm.ceiling_speedup:.1f}x", help="the latency floor")
        cols[5].metric(
            "Slow mode saves", fmt.pct(dm.slow_mode_saving_frac), help=f"at batch {dm.slow_batch:,.0f}"
        )
    ui.figure(PAGE, "fast-mode", economics_charts.fast_mode(f), "economics")
    if dm is not None:
        curve = dm.to_dict()["curve"]
        with st.expander("The speed-vs-price curve"):
            ui.table(curve)
            ui.downloads(PAGE, "fast-mode", curve, f.to_dict())
    ui.png_download(PAGE, "prices-fast", _prices_png(state), "as `rackmath prices --plot`")


def _render_fleet(state: EconomicsState) -> None:
    f = fleet_view(state.model, state.system, state.fleet)
    st.caption(f"Step time: {f.source}.")
    cols = list(st.columns(6))
    cols[0].metric("Step time", fmt.seconds(f.step_s))
    cols[1].metric("Tokens/s per replica", f"{f.tokens_per_s_per_replica:,.0f}")
    cols[2].metric("Replicas", f"{f.replicas:,}")
    cols[3].metric("Chips", f"{f.chips:,}", help=f"{f.replicas:,} x {f.chips_per_replica}")
    cols[4].metric(
        "$ per day",
        f"${fmt.si(f.usd_per_day)}",
        help=f"{fmt.usd(f.usd_per_day)} at {fmt.usd(f.usd_per_chip_hour)}/chip-hour",
    )
    cols[5].metric("$ per M tokens", fmt.usd(f.usd_per_million_tokens))
    t = f.train
    st.markdown("##### Batching as a train (D8)")
    cols = list(st.columns(5))
    cols[0].metric("Worst latency T + run", fmt.seconds(t.closed_form_worst_s), help="closed form")
    cols[1].metric("Worst, simulated", fmt.seconds(t.worst_latency_s))
    cols[2].metric("Mean latency T/2 + run", fmt.seconds(t.closed_form_mean_s), help="closed form")
    cols[3].metric("Mean, simulated", fmt.seconds(t.mean_latency_s))
    cols[4].metric(
        "Filling a batch takes",
        fmt.seconds(f.batch_fill_time_s),
        help=f"{f.requests_per_s_per_replica:,.1f} requests/s of {f.output_tokens} tokens per replica",
    )
    st.markdown(
        f"##### Continuous batching simulated (Poisson arrivals; capacity {f.capacity_requests_per_s:,.1f} "
        "requests/s per replica)"
    )
    _side_by_side(
        ("fleet-latency", economics_charts.fleet_latency(f)), ("fleet-batch", economics_charts.fleet_batch(f))
    )
    rows = [p.to_dict() for p in f.loads]
    ui.table(rows)
    ui.downloads(PAGE, "fleet", rows, f.to_dict())
    ui.png_download(PAGE, "fleet", partial(save_fleet_plot, f), "as `rackmath fleet --plot`")


def _render_overtrain(state: EconomicsState) -> None:
    view = overtrain_view(state.overtrain)
    r = view.result
    d = r.to_dict()
    k = r.coefficients
    st.markdown("##### The lecture's chain (D25-D29)")
    cols = list(st.columns(6))
    cols[0].metric("Inference tokens D_inf", f"{r.inference_tokens:.3g}", help="tokens/s x duration")
    cols[1].metric("Pre-training tokens D_pre", f"{r.pretrain_tokens:.3g}")
    cols[2].metric("RL tokens D_RL", f"{r.rl_tokens:.3g}", help=f"D_pre = {d['pretrain_over_rl']:.2f} D_RL")
    cols[3].metric("Chinchilla tokens", f"{r.chinchilla_tokens:.3g}")
    cols[4].metric("Over-trained", f"{r.overtraining_factor:,.0f}x")
    cols[5].metric("Loss", f"{r.loss:.4f}", help=r.fit.source)
    st.caption(
        f"Equal thirds: {k.pre:g} N D_pre = {k.rl:g}/{k.rl_efficiency:.3g} N D_RL = "
        f"{k.inference:g}/{k.inference_efficiency:.3g} N D_inf."
    )
    f = d["compute_optimal_at_same_pretrain_compute"]
    o = d["exact_optimum_at_same_loss"]
    cols = list(st.columns(6))
    cols[0].metric("Compute-optimal N", fmt.count(f["params"]), help="the same pre-training compute")
    cols[1].metric("its tokens/param", f"{f['tokens_per_param']:.0f}", help=f"loss {f['loss']:.4f}")
    cols[2].metric("Exact optimum N", fmt.count(o["params"]), help="least lifetime compute at the same loss")
    cols[3].metric("its D_pre", f"{o['pretrain_tokens']:.3g}")
    cols[4].metric(
        "Pre-training share",
        fmt.pct(o["pretrain_share_frac"]),
        help=f"power law p A = q B with q = {o['local_exponent_q']:.2f}: "
        f"{o['power_law_pretrain_share_frac']:.1%}",
    )
    cols[5].metric("Equal thirds cost more by", f"{o['equal_thirds_excess_frac']:.2%}")
    fig = economics_charts.overtrain(r, view.curve)
    ui.figure(PAGE, "overtrain", fig, "economics")
    phases = [
        {"plan": "equal thirds", **{f"{p}_flops": v for p, v in d["equal_thirds_compute_flops"].items()}},
        {"plan": "exact optimum", **{f"{p}_flops": v for p, v in o["compute_flops"].items()}},
    ]
    ui.table(phases)
    ui.downloads(PAGE, "overtrain", phases, d)
    ui.png_download(PAGE, "overtrain", partial(save_overtrain_plot, r), "as `rackmath overtrain --plot`")


def _render_sparsity(state: EconomicsState) -> None:
    s = sparsity_view(state.model, state.system, state.sparsity)
    d = s.deployment
    st.markdown(
        f"##### N_active = {fmt.count(s.params_active)} ({d.model.id}) on {d.system.chip.id} at "
        f"{fmt.usd(d.usd_per_chip_hour)}/chip-hour, {s.context:,.0f} tokens, {s.users:,.0f} users"
    )
    _side_by_side(
        ("sparsity-cost", economics_charts.sparsity_cost(s)),
        ("sparsity-needs", economics_charts.sparsity_needs(s)),
    )
    rows = [r.to_dict() for r in s.rows]
    ui.table(rows)
    ui.downloads(PAGE, "sparsity", rows, s.to_dict())
    st.caption(
        "At its balance batch every sparsity costs the same per token while quality rises: a pure win "
        "for bandwidth until you run out of users (B* = r x sparsity concurrent sequences) or memory. "
        f"Quality: {s.fit.source}; sparsity read as the expert count at top-1 routing."
    )
    ui.png_download(PAGE, "sparsity", partial(save_sparsity_plot, s), "as `rackmath sparsity --plot`")


_RENDER: dict[str, Callable[[EconomicsState], None]] = {
    "prices": _render_prices,
    "caches": _render_caches,
    "fast": _render_fast,
    "fleet": _render_fleet,
    "overtrain": _render_overtrain,
    "sparsity": _render_sparsity,
}
