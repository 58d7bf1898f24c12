"""Plotly figures of analysis results: layout only, no math.

Every y value is an attribute of an analysis result (``Explanation``, ``DecodeGrid``,
``Deployment``, the economics, training and validation results); the only arithmetic here
converts SI units to the units on an axis (s -> ms, bytes -> GB, USD per token -> per
million) and stacks bars. Markers and bands (the balance batch, the latency floor, the
batch beyond which the KV cache does not fit) are drawn as traces, so they appear in the
legend and in an exported figure's data.

Traces and layouts are written as plain dicts and validated once by ``go.Figure(spec)``
with the empty ``"none"`` template: adding traces one by one and applying a named
template costs about 40 ms per figure, which would eat the page's 200 ms budget.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from rackmath import fmt
from rackmath.analyses.caching import CacheEconomics
from rackmath.analyses.explain import Explanation
from rackmath.analyses.fast_mode import FastModeReport
from rackmath.analyses.fleet import Fleet
from rackmath.analyses.overtrain import Overtraining
from rackmath.analyses.prices import LongContext, PriceSurvey, price_dict
from rackmath.analyses.search import Frontier
from rackmath.analyses.serving import DecodeGrid, Deployment
from rackmath.analyses.sparsity import SparsityStudy
from rackmath.analyses.training import PipelineResult, TrainingEstimate
from rackmath.core import roofline as rl
from rackmath.units import GB, MILLION, MS

COLORS = {
    "compute": "#1f77b4",
    "weights": "#ff7f0e",
    "kv": "#2ca02c",
    "memory": "#d62728",
    "step": "#111111",
    "floor": "#7f7f7f",
    "balance": "#9467bd",
    "nofit": "rgba(127,127,127,0.15)",
    "selected": "#e377c2",
    "reserve": "#c7c7c7",
    "free": "#e8f4e8",
}
_HEIGHT_PX = 420
_AXIS = {"showgrid": True, "gridcolor": "#e5e5e5", "zeroline": False, "linecolor": "#888", "ticks": "outside"}
Trace = dict[str, Any]


def _figure(
    traces: list[Trace], title: str, x_title: str, y_title: str, *, log_x: bool, log_y: bool, **layout: Any
) -> go.Figure:
    spec_layout: dict[str, Any] = {
        "template": "none",
        "title": {"text": title, "font": {"size": 15}},
        "height": _HEIGHT_PX,
        "margin": {"l": 64, "r": 20, "t": 50, "b": 50},
        "legend": {"orientation": "h", "yanchor": "top", "y": -0.2, "x": 0, "font": {"size": 11}},
        "hovermode": "closest",
        "plot_bgcolor": "white",
        "paper_bgcolor": "white",
        "xaxis": {**_AXIS, "title": {"text": x_title}, "type": "log" if log_x else "linear"},
        "yaxis": {**_AXIS, "title": {"text": y_title}, "type": "log" if log_y else "linear"},
    }
    for name, value in layout.items():
        if name in ("xaxis", "yaxis"):
            spec_layout[name] = {**spec_layout[name], **value}
        else:
            spec_layout[name] = value
    return go.Figure({"data": traces, "layout": spec_layout})


def _line(
    x: Any, y: Any, name: str, color: str, *, dash: str = "solid", width: float = 2, **extra: Any
) -> Trace:
    return {
        "type": "scatter",
        "x": x,
        "y": y,
        "name": name,
        "mode": "lines",
        "line": {"color": color, "dash": dash, "width": width},
        **extra,
    }


def _span(values: Sequence[np.ndarray]) -> tuple[float, float]:
    """Positive finite min and max over arrays, padded for a log axis."""
    stacked = np.concatenate([np.ravel(v) for v in values])
    good = stacked[np.isfinite(stacked) & (stacked > 0)]
    if good.size == 0:
        return 1e-3, 1.0
    return float(good.min()) / 2, float(good.max()) * 2


def _log_range(lo: float, hi: float) -> dict[str, Any]:
    """A log axis from lo to hi: one labelled tick per decade when it spans several."""
    a, b = float(np.log10(lo)), float(np.log10(hi))
    return {"range": [a, b], "dtick": 1} if b - a >= 2 else {"range": [a, b], "minorloglabels": "complete"}


def _balance(result: Explanation, lo: float, hi: float) -> list[Trace]:
    b_star = float(result.balance.balance_batch_with_kv[0])
    if not np.isfinite(b_star):
        return []
    name = f"balance B* = {b_star:,.0f}"
    return [_line([b_star, b_star], [lo, hi], name, COLORS["balance"], dash="dashdot", width=1.5)]


def _nofit_band(result: Explanation, top: float, lo: float, hi: float) -> list[Trace]:
    max_batch = float(result.max_batch[0])
    if not 1 <= max_batch < top:
        return []
    return [
        {
            "type": "scatter",
            "x": [max_batch, top, top, max_batch, max_batch],
            "y": [lo, lo, hi, hi, lo],
            "fill": "toself",
            "mode": "none",
            "fillcolor": COLORS["nofit"],
            "name": f"KV does not fit (batch > {max_batch:,.0f})",
            "hoverinfo": "name",
        }
    ]


def _selected(point: DecodeGrid, y: float, unit: str) -> Trace:
    """The selected (batch, context) as a marker; ``y`` is read from the same ``point`` grid."""
    b = float(point.batch[0, 0])
    return {
        "type": "scatter",
        "x": [b],
        "y": [y],
        "mode": "markers",
        "name": f"selected batch {b:,.0f}",
        "marker": {"color": COLORS["selected"], "size": 12, "symbol": "diamond"},
        "hovertemplate": f"batch %{{x:,.0f}}<br>%{{y:.4g}} {unit}<extra></extra>",
    }


def step_time_figure(result: Explanation, sweep: DecodeGrid, point: DecodeGrid) -> go.Figure:
    """Decode step time and its parts against batch at the first context (log-log, ms)."""
    b = sweep.batch[:, 0]
    t = sweep.times
    step_ms = sweep.step_s[:, 0] / MS
    parts = [
        ("compute", t.compute_s[:, 0] / MS, COLORS["compute"]),
        ("weight fetch", t.weight_fetch_s[:, 0] / MS, COLORS["weights"]),
        ("KV fetch", t.kv_fetch_s[:, 0] / MS, COLORS["kv"]),
    ]
    lo, hi = _span([p[1] for p in parts] + [step_ms])
    floor_ms = result.latency_floor_s / MS
    traces = [_line(b, y, name, color) for name, y, color in parts]
    traces += [
        _line(b, t.memory_s[:, 0] / MS, "weights + KV", COLORS["memory"], dash="dot"),
        _line(
            b,
            step_ms,
            "step = max(compute, weights + KV)",
            COLORS["step"],
            width=3,
            hovertemplate="batch %{x:,.0f}<br>step %{y:.4g} ms<extra></extra>",
        ),
        _line(
            [b[0], b[-1]],
            [floor_ms, floor_ms],
            f"latency floor {fmt.seconds(result.latency_floor_s)}",
            COLORS["floor"],
            dash="dash",
            width=1.5,
        ),
        *_balance(result, lo, hi),
        *_nofit_band(result, float(b[-1]), lo, hi),
        _selected(point, float(point.step_s[0, 0]) / MS, "ms"),
    ]
    return _figure(
        traces,
        f"Step time vs batch at {float(result.contexts[0]):,.0f} tokens of context",
        "batch (sequences)",
        "time per decode step (ms)",
        log_x=True,
        log_y=True,
        yaxis=_log_range(lo, hi),
    )


def cost_figure(result: Explanation, sweep: DecodeGrid, point: DecodeGrid) -> go.Figure:
    """USD per million output tokens against batch, and the compute-only cost below it."""
    d = result.deployment
    b = sweep.batch[:, 0]
    cost = sweep.usd_per_million_output_tokens[:, 0]
    compute_only = rl.usd_per_million_tokens(sweep.times.compute_s[:, 0], b, d.chips, d.usd_per_chip_hour)
    lo, hi = _span([cost, compute_only])
    traces = [
        _line(
            b,
            cost,
            "$ per million output tokens",
            COLORS["step"],
            width=3,
            hovertemplate="batch %{x:,.0f}<br>$%{y:.4g} per M tokens<extra></extra>",
        ),
        _line(b, compute_only, "compute-only cost", COLORS["compute"], dash="dash", width=1.5),
        *_balance(result, lo, hi),
        *_nofit_band(result, float(b[-1]), lo, hi),
        _selected(point, float(point.usd_per_million_output_tokens[0, 0]), "$/M tokens"),
    ]
    return _figure(
        traces,
        f"Cost per token vs batch at {fmt.usd(d.usd_per_chip_hour)}/chip-hour",
        "batch (sequences)",
        "USD per million output tokens",
        log_x=True,
        log_y=True,
        yaxis=_log_range(lo, hi),
    )


def memory_figure(d: Deployment, point: DecodeGrid) -> go.Figure:
    """HBM of one chip: weights, the KV cache of the selected batch, the reserve, what is free."""
    capacity = d.system.chip.hbm_capacity_bytes
    weights = d.weight_bytes_per_chip
    kv = float(point.kv_bytes_per_chip[0, 0])
    reserve = capacity - d.usable_bytes_per_chip
    free = d.usable_bytes_per_chip - weights - kv
    bars = [
        ("weights", weights, COLORS["weights"]),
        (f"KV cache of {point.batch[0, 0]:,.0f} sequences", kv, COLORS["kv"]),
        (f"reserve ({d.memory_reserve_frac:.0%})", reserve, COLORS["reserve"]),
    ]
    if free >= 0:
        bars.append(("free", free, COLORS["free"]))
    traces: list[Trace] = [
        {
            "type": "bar",
            "y": ["per chip"],
            "x": [value / GB],
            "orientation": "h",
            "name": name,
            "marker": {"color": color},
            "hovertemplate": f"{name}: %{{x:.4g}} GB<extra></extra>",
        }
        for name, value, color in bars
    ]
    capacity_line = {
        "type": "line",
        "xref": "x",
        "yref": "paper",
        "x0": capacity / GB,
        "x1": capacity / GB,
        "y0": 0,
        "y1": 1,
        "line": {"color": COLORS["step"], "width": 2},
    }
    label = {
        "xref": "x",
        "yref": "paper",
        "x": capacity / GB,
        "y": 1,
        "yanchor": "bottom",
        "xanchor": "right",
        "showarrow": False,
        "text": f"HBM capacity {fmt.nbytes(capacity)}",
    }
    title = "Memory of one chip" + ("" if free >= 0 else f": over by {fmt.nbytes(-free)}")
    return _figure(
        traces,
        title,
        "GB (1e9 bytes)",
        "",
        log_x=False,
        log_y=False,
        barmode="stack",
        height=290,
        shapes=[capacity_line],
        annotations=[label],
        yaxis={"type": "category", "showgrid": False},
        margin={"l": 64, "r": 20, "t": 60, "b": 40},
        legend={"orientation": "h", "yanchor": "top", "y": -0.62, "x": 0, "font": {"size": 11}},
    )


def mfu_context_figure(result: Explanation) -> go.Figure:
    """MFU against context at the closed-form balance batch: long context turns FLOPs into reads."""
    b = result.balance.balance_batch
    trace = _line(
        result.mfu_contexts,
        result.mfu_at_balance_batch,
        f"MFU at batch {b:,.0f}",
        COLORS["compute"],
        hovertemplate="context %{x:,.0f}<br>MFU %{y:.1%}<extra></extra>",
    )
    trace["mode"] = "lines+markers"
    return _figure(
        [trace],
        f"MFU vs context at the balance batch {b:,.0f}",
        "context (tokens)",
        "MFU",
        log_x=True,
        log_y=False,
        showlegend=False,
        yaxis={"tickformat": ".0%", "rangemode": "tozero"},
    )


def pareto_figure(frontier: Frontier) -> go.Figure:
    """Tokens/s per chip against tokens/s per user: every fitting deployment, and the frontier."""
    points = frontier.frontier
    traces: list[Trace] = [
        {
            "type": "scatter",
            "x": frontier.all_per_user,
            "y": frontier.all_per_chip,
            "mode": "markers",
            "name": f"all {frontier.all_per_user.size:,} fitting deployments",
            "marker": {"color": "rgba(127,127,127,0.35)", "size": 4},
            "hoverinfo": "skip",
        },
        {
            "type": "scatter",
            "x": [p.tokens_per_s_per_user for p in points],
            "y": [p.tokens_per_s_per_chip for p in points],
            "mode": "lines+markers",
            "name": f"frontier ({len(points)} deployments)",
            "line": {"color": COLORS["step"], "width": 2.5},
            "marker": {"size": 6},
            "text": [
                f"{p.plan_text}, {p.chips} chips, batch {p.batch:,}, {p.family}, "
                f"{fmt.usd(p.usd_per_million_output_tokens)}/M out"
                for p in points
            ],
            "hovertemplate": "%{x:,.1f} tok/s/user<br>%{y:,.0f} tok/s/chip<br>%{text}<extra></extra>",
        },
    ]
    return _figure(
        traces,
        f"{frontier.model} on {frontier.system}: throughput vs interactivity "
        f"({frontier.input_len:,} in / {frontier.output_len:,} out)",
        "tokens/s per user (interactivity)",
        "tokens/s per chip (throughput)",
        log_x=True,
        log_y=True,
    )


# --------------------------------------------------------------------------- Economics page


def _vline(x: float, lo: float, hi: float, name: str, color: str, dash: str = "dash") -> Trace:
    return _line([x, x], [lo, hi], name, color, dash=dash, width=1.5)


def _hline(x0: float, x1: float, y: float, name: str, color: str, dash: str = "dash") -> Trace:
    return _line([x0, x1], [y, y], name, color, dash=dash, width=1.5)


def price_ratio_figure(survey: PriceSurvey) -> go.Figure:
    """Each priced model's output/input price ratio, beside the roofline's cost ratio (D34)."""
    rows = [price_dict(p, survey.as_of) for p in survey.prices]
    rows.sort(key=lambda r: r["output_over_input"])
    ratio = survey.roofline.output_over_input
    ref = survey.roofline.to_dict()
    bars: Trace = {
        "type": "bar",
        "orientation": "h",
        "y": [r["id"] for r in rows],
        "x": [r["output_over_input"] for r in rows],
        "name": "output price / input price",
        "marker": {"color": COLORS["weights"]},
        "customdata": [[r["implied_decode_utilization_frac"], r["date"]] for r in rows],
        "hovertemplate": "%{y}: %{x:.2f}x<br>implies decode at ~%{customdata[0]:.0%} of prefill's "
        "utilization<br>price of %{customdata[1]}<extra></extra>",
    }
    line = _line(
        [ratio, ratio],
        [rows[0]["id"], rows[-1]["id"]],
        f"roofline cost ratio {ratio:.1f}x ({ref['model']}, batch {ref['batch']:,.0f}, "
        f"{ref['context']:,.0f} tokens)",
        COLORS["step"],
        dash="dash",
    )
    return _figure(
        [bars, line],
        "Output over input: what the price ratio says about decode",
        "output / input (price or cost per token)",
        "",
        log_x=False,
        log_y=False,
        yaxis={"type": "category", "showgrid": False},
        height=max(_HEIGHT_PX, 28 * len(rows) + 160),
    )


def long_context_figure(lc: LongContext) -> go.Figure:
    """Cost per token against context at a batch, with a provider's tier prices over it (D30, D31)."""
    c = lc.contexts
    series = [
        lc.cost_usd_per_million_output_tokens,
        lc.price_usd_per_million_output_tokens,
        lc.cost_usd_per_million_input_tokens,
        lc.price_usd_per_million_input_tokens,
    ]
    lo, hi = _span(series)
    hv = {"shape": "hv"}
    traces: list[Trace] = [
        _line(
            c,
            lc.cost_usd_per_million_output_tokens,
            f"cost per output token (batch {lc.batch:,.0f})",
            COLORS["step"],
            width=3,
            hovertemplate="%{x:,.0f} tokens<br>$%{y:.4g} per M output tokens<extra></extra>",
        ),
        _line(c, lc.price_usd_per_million_output_tokens, f"{lc.price.id} output price", COLORS["memory"]),
        _line(
            c,
            lc.cost_usd_per_million_input_tokens,
            "cost per input token (prefill)",
            COLORS["step"],
            dash="dash",
        ),
        _line(
            c,
            lc.price_usd_per_million_input_tokens,
            f"{lc.price.id} input price",
            COLORS["weights"],
            dash="dash",
        ),
        _vline(
            lc.crossover_context_tokens,
            lo,
            hi,
            f"KV read = compute at {lc.crossover_context_tokens:,.0f} tokens (len*)",
            COLORS["balance"],
            dash="dashdot",
        ),
    ]
    for t in traces[1:4:2]:
        t["line"] = {**t["line"], **hv}
    for b in lc.price.tier_boundaries_tokens:
        traces.append(_vline(float(b), lo, hi, f"tier boundary {b:,} tokens", COLORS["floor"], dash="dot"))
    nofit = c[~lc.fits]
    if nofit.size:
        x0, x1 = float(nofit.min()), float(c.max())
        traces.append(
            {
                "type": "scatter",
                "x": [x0, x1, x1, x0, x0],
                "y": [lo, lo, hi, hi, lo],
                "fill": "toself",
                "mode": "none",
                "fillcolor": COLORS["nofit"],
                "name": f"batch {lc.batch:,.0f} does not fit (> {x0:,.0f} tokens)",
                "hoverinfo": "name",
            }
        )
    return _figure(
        traces,
        f"{lc.deployment.model.id}: cost per token vs context, {lc.price.id}'s tiers over it",
        "context (tokens)",
        "USD per million tokens",
        log_x=True,
        log_y=True,
        yaxis=_log_range(lo, hi),
    )


def cache_figure(cache: CacheEconomics, retentions_s: np.ndarray, hit_usd_per_token: np.ndarray) -> go.Figure:
    """Cost of a cache hit (hold for the retention, then fetch) per tier, against recomputing."""
    palette = [COLORS["compute"], COLORS["weights"], COLORS["kv"], COLORS["balance"], COLORS["memory"]]
    per_m = hit_usd_per_token * MILLION
    recompute = cache.recompute_usd_per_token * MILLION
    lo, hi = _span([per_m, np.array([recompute])])
    traces: list[Trace] = [
        _line(
            retentions_s,
            per_m[i],
            f"{t.id}: drain time {fmt.duration(t.drain_time_s)}",
            palette[i % len(palette)],
            hovertemplate=f"{t.id}<br>held %{{x:.3g}} s<br>$%{{y:.3g}} per M tokens<extra></extra>",
        )
        for i, t in enumerate(cache.tiers)
    ]
    traces.append(
        _hline(
            float(retentions_s[0]),
            float(retentions_s[-1]),
            recompute,
            f"recompute (prefill of {cache.prompt_tokens:,.0f} tokens)",
            COLORS["step"],
        )
    )
    best = cache.to_dict()["by_retention"]
    traces.append(
        {
            "type": "scatter",
            "x": [b["retention_s"] for b in best],
            "y": [b["hit_usd_per_million_tokens"].get(b["cheapest"], recompute) for b in best],
            "text": [b["cheapest"] for b in best],
            "mode": "markers",
            "name": "cheapest at each chosen retention",
            "marker": {"color": COLORS["selected"], "size": 11, "symbol": "diamond"},
            "hovertemplate": "%{x:.3g} s: %{text}<extra></extra>",
        }
    )
    return _figure(
        traces,
        "Prompt cache: cost of a hit by tier vs retention",
        "retention (s)",
        "USD per million tokens (hold + fetch)",
        log_x=True,
        log_y=True,
        yaxis=_log_range(lo, hi),
    )


def fast_mode_figure(report: FastModeReport) -> go.Figure:
    """Speed-up against price multiple: the deployment's curve up to batch 1, and the lecture's ideal."""
    ideal = report.ideal
    traces: list[Trace] = []
    top_x = max(100.0, ideal.price_multiple)
    dm = report.deployment
    if dm is not None:
        top_x = max(top_x, float(dm.price_multiples.max()))
        traces += [
            _line(
                dm.price_multiples,
                dm.speedups,
                f"{dm.deployment.model.id}: batch {dm.normal_batch:,.0f} down to 1",
                COLORS["step"],
                width=3,
                customdata=dm.batches,
                hovertemplate="batch %{customdata:,.0f}<br>%{x:.3g}x price -> %{y:.3g}x speed<extra></extra>",
            ),
            {
                "type": "scatter",
                "x": [dm.requested_price_multiple],
                "y": [dm.fast_speedup],
                "mode": "markers",
                "name": f"{dm.requested_price_multiple:g}x price: batch {dm.fast_batch:,.0f}, "
                f"{dm.fast_speedup:.2f}x faster",
                "marker": {"color": COLORS["selected"], "size": 12, "symbol": "diamond"},
            },
            _hline(
                1.0,
                top_x,
                dm.ceiling_speedup,
                f"latency floor (batch 1): {dm.ceiling_speedup:.1f}x",
                COLORS["floor"],
            ),
        ]
    traces += [
        _hline(
            1.0,
            top_x,
            ideal.ceiling_speedup,
            f"lecture ideal: ceiling {ideal.ceiling_speedup:g}x",
            COLORS["compute"],
            dash="dot",
        ),
        {
            "type": "scatter",
            "x": [ideal.price_multiple],
            "y": [ideal.speedup],
            "mode": "markers",
            "name": f"ideal: {ideal.price_multiple:g}x price -> {ideal.speedup:g}x speed",
            "marker": {"color": COLORS["compute"], "size": 10, "symbol": "square"},
        },
    ]
    return _figure(
        traces,
        "What a higher price buys: speed-up vs price multiple",
        "price multiple (cost per token / normal)",
        "speed-up (normal step / step)",
        log_x=True,
        log_y=True,
    )


def fleet_latency_figure(f: Fleet) -> go.Figure:
    """Simulated TTFT and TPOT percentiles against load, and the train's worst case (D8)."""
    loads = [p.load_frac for p in f.loads]

    def ms(values: list[float]) -> list[float | None]:
        return [v / MS if np.isfinite(v) else None for v in values]

    series = [
        ("TTFT p50", [p.ttft_p50_s for p in f.loads], COLORS["compute"], "solid"),
        ("TTFT p99", [p.ttft_p99_s for p in f.loads], COLORS["compute"], "dash"),
        ("TPOT p50", [p.tpot_p50_s for p in f.loads], COLORS["weights"], "solid"),
        ("TPOT p99", [p.tpot_p99_s for p in f.loads], COLORS["weights"], "dash"),
    ]
    traces: list[Trace] = []
    for name, values, color, dash in series:
        t = _line(
            loads,
            ms(values),
            name,
            color,
            dash=dash,
            hovertemplate=f"load %{{x:.0%}}<br>{name} %{{y:.4g}} ms<extra></extra>",
        )
        t["mode"] = "lines+markers"
        traces.append(t)
    worst = f.train.closed_form_worst_s / MS
    traces.append(
        _hline(
            min(loads),
            max(loads),
            worst,
            f"train worst case T + run = {fmt.seconds(f.train.closed_form_worst_s)}",
            COLORS["floor"],
            dash="dot",
        )
    )
    return _figure(
        traces,
        "Latency vs load (continuous batching, simulated)",
        "load (fraction of capacity)",
        "ms",
        log_x=False,
        log_y=True,
        xaxis={"tickformat": ".0%"},
    )


def fleet_batch_figure(f: Fleet) -> go.Figure:
    """Mean running batch against load, below the maximum batch."""
    loads = [p.load_frac for p in f.loads]
    t = _line(
        loads,
        [p.mean_batch for p in f.loads],
        "mean running batch",
        COLORS["kv"],
        hovertemplate="load %{x:.0%}<br>%{y:,.0f} sequences<extra></extra>",
    )
    t["mode"] = "lines+markers"
    return _figure(
        [
            t,
            _hline(min(loads), max(loads), f.batch, f"max batch {f.batch:,.0f}", COLORS["floor"], dash="dot"),
        ],
        f"{f.replicas:,} replicas for {fmt.si(f.traffic_tokens_per_s, 'tokens/s')}: batch vs load",
        "load (fraction of capacity)",
        "sequences",
        log_x=False,
        log_y=False,
        xaxis={"tickformat": ".0%"},
        yaxis={"rangemode": "tozero"},
    )


def overtrain_figure(
    result: Overtraining, params: np.ndarray, pretrain_flops: np.ndarray, rest_flops: np.ndarray
) -> go.Figure:
    """Lifetime compute against model size at the same loss: pre-training, RL + inference, total."""
    total = pretrain_flops + rest_flops
    lo, hi = _span([pretrain_flops, rest_flops, total])
    # below some N the loss is out of reach (D -> infinity): show three decades above the minimum
    hi = min(hi, lo * OVERTRAIN_Y_DECADES)
    traces = [
        _line(params, pretrain_flops, "pre-training", COLORS["compute"]),
        _line(params, rest_flops, "RL + inference", COLORS["weights"]),
        _line(
            params,
            total,
            "lifetime total",
            COLORS["step"],
            width=3,
            hovertemplate="N = %{x:.3g}<br>%{y:.3g} FLOPs<extra></extra>",
        ),
        _vline(result.params, lo, hi, f"equal thirds, N = {fmt.count(result.params)}", COLORS["memory"]),
        _vline(
            result.optimum_params,
            lo,
            hi,
            f"exact optimum, N = {fmt.count(result.optimum_params)}",
            COLORS["kv"],
            dash="dashdot",
        ),
    ]
    return _figure(
        traces,
        f"Over-training at loss {result.loss:.3f}: lifetime compute vs model size",
        "active parameters N (same loss)",
        "FLOPs (pre-training equivalent)",
        log_x=True,
        log_y=True,
        yaxis=_log_range(lo, hi),
    )


#: How far above the cheapest lifetime compute the over-training figure looks (a factor).
OVERTRAIN_Y_DECADES = 1e4


def sparsity_cost_figure(study: SparsityStudy) -> go.Figure:
    """Cost per token against sparsity: flat at the balance batch, rising once users run out."""
    s = [r.sparsity for r in study.rows]
    at_balance = _line(
        s,
        [r.usd_per_million_tokens_at_balance for r in study.rows],
        "at the balance batch",
        COLORS["compute"],
    )
    at_users = _line(
        s,
        [r.usd_per_million_tokens_at_users for r in study.rows],
        f"with {study.users:,.0f} users",
        COLORS["memory"],
        dash="dash",
    )
    for t in (at_balance, at_users):
        t["mode"] = "lines+markers"
        t["hovertemplate"] = "sparsity %{x:g}<br>$%{y:.4g} per M tokens<extra></extra>"
    return _figure(
        [at_balance, at_users],
        "Cost per token vs sparsity",
        "sparsity N_total / N_active",
        "USD per million tokens",
        log_x=True,
        log_y=True,
    )


def sparsity_needs_figure(study: SparsityStudy) -> go.Figure:
    """What sparsity buys (dense-equivalent parameters) and needs (users: the balance batch)."""
    s = [r.sparsity for r in study.rows]
    quality = _line(
        s,
        [r.effective_params for r in study.rows],
        "dense-equivalent parameters (Clark et al.)",
        COLORS["kv"],
    )
    users = _line(
        s,
        [r.balance_batch for r in study.rows],
        "balance batch B* (users needed)",
        COLORS["balance"],
        dash="dash",
    )
    users["yaxis"] = "y2"
    for t in (quality, users):
        t["mode"] = "lines+markers"
    return _figure(
        [quality, users],
        "What sparsity buys and needs",
        "sparsity N_total / N_active",
        "dense-equivalent parameters",
        log_x=True,
        log_y=True,
        yaxis2={
            **_AXIS,
            "title": {"text": "sequences"},
            "type": "log",
            "dtick": 1,
            "overlaying": "y",
            "side": "right",
            "showgrid": False,
        },
        margin={"l": 64, "r": 64, "t": 50, "b": 50},
    )


# --------------------------------------------------------------------------- Training page

_OP_COLORS = {"F": COLORS["compute"], "B": COLORS["weights"], "W": COLORS["kv"]}
_OP_NAMES = {"F": "forward", "B": "backward", "W": "weight gradient"}
#: Label each bar of a pipeline drawing only when there are few enough to read.
_LABELLED_OPS = 160


def pipeline_figure(result: PipelineResult) -> go.Figure:
    """The lecture's pipeline drawing from a simulated schedule: one bar per op, per stage."""
    t = result.timeline
    label = len(t.ops) <= _LABELLED_OPS
    traces: list[Trace] = []
    for kind in ("F", "B", "W"):
        ops = [o for o in t.ops if o.op.kind.value == kind]
        if not ops:
            continue
        chunk = t.virtual_stages > 1
        text = [f"{kind}{o.op.microbatch}" + (f".{o.op.chunk}" if chunk else "") for o in ops]
        traces.append(
            {
                "type": "bar",
                "orientation": "h",
                "base": [o.start for o in ops],
                "x": [o.end - o.start for o in ops],
                "y": [f"stage {o.stage}" for o in ops],
                "name": _OP_NAMES[kind],
                "marker": {
                    "color": _OP_COLORS[kind],
                    "opacity": [1.0 if o.op.chunk % 2 == 0 else 0.6 for o in ops],
                    "line": {"color": "#222", "width": 0.5},
                },
                "text": text if label else None,
                "textposition": "inside",
                "insidetextanchor": "middle",
                "textfont": {"color": "white", "size": 10},
                "hovertext": [f"{x}: {o.start:g} to {o.end:g}" for x, o in zip(text, ops, strict=True)],
                "hoverinfo": "text+y",
            }
        )
    v = f", v = {t.virtual_stages}" if t.virtual_stages > 1 else ""
    return _figure(
        traces,
        f"{t.schedule.value}: P = {t.stages}, m = {t.microbatches}{v}; bubble {t.bubble_frac:.1%} "
        f"(closed form {result.closed_form_bubble_frac:.1%})",
        "time (forward of one micro-batch on one stage = 1)",
        "",
        log_x=False,
        log_y=False,
        barmode="overlay",
        bargap=0.15,
        height=max(260, 36 * t.stages + 150),
        yaxis={
            "type": "category",
            "showgrid": False,
            "autorange": "reversed",
            "categoryorder": "array",
            "categoryarray": [f"stage {s}" for s in range(t.stages)],
        },
        xaxis={"range": [0, t.makespan]},
    )


def training_memory_figure(est: TrainingEstimate) -> go.Figure:
    """Memory per chip by component, for each recomputation mode, against usable HBM."""
    m = est.memory
    modes = [o.mode.value for o in est.options]
    parts = [
        ("weights", [m.weights_bytes] * len(modes), COLORS["weights"]),
        ("gradients", [m.grads_bytes] * len(modes), COLORS["balance"]),
        ("optimizer states", [m.optimizer_bytes] * len(modes), COLORS["reserve"]),
        ("activations", [o.activations_bytes for o in est.options], COLORS["kv"]),
    ]
    traces: list[Trace] = [
        {
            "type": "bar",
            "x": modes,
            "y": [v / GB for v in values],
            "name": name,
            "marker": {"color": color},
            "hovertemplate": f"%{{x}}: {name} %{{y:.4g}} GB<extra></extra>",
        }
        for name, values, color in parts
    ]
    usable = m.usable_bytes / GB
    traces.append(
        _line(
            modes,
            [usable] * len(modes),
            f"usable HBM {fmt.nbytes(m.usable_bytes)}",
            COLORS["step"],
            dash="dash",
        )
    )
    traces.append(
        {
            "type": "scatter",
            "x": [est.setup.recompute.value],
            "y": [m.total_bytes / GB],
            "mode": "markers",
            "name": f"chosen: {est.setup.recompute.value}, {fmt.nbytes(m.total_bytes)}",
            "marker": {"color": COLORS["selected"], "size": 12, "symbol": "diamond"},
        }
    )
    return _figure(
        traces,
        "Memory per chip by recomputation mode",
        "recomputation",
        "GB per chip (1e9 bytes)",
        log_x=False,
        log_y=False,
        barmode="stack",
        xaxis={"type": "category"},
    )


def recompute_step_figure(est: TrainingEstimate) -> go.Figure:
    """Step time for each recomputation mode: memory saved is paid in FLOPs."""
    opts = est.options
    bars: Trace = {
        "type": "bar",
        "x": [o.mode.value for o in opts],
        "y": [o.step_s for o in opts],
        "name": "step time",
        "marker": {"color": [COLORS["kv"] if o.fits else COLORS["memory"] for o in opts]},
        "customdata": [[o.extra_flops_frac, "fits" if o.fits else "does not fit"] for o in opts],
        "hovertemplate": "%{x}: %{y:.4g} s<br>+%{customdata[0]:.1%} FLOPs<br>%{customdata[1]}<extra></extra>",
        "text": [f"+{o.extra_flops_frac:.0%}" for o in opts],
        "textposition": "outside",
    }
    return _figure(
        [bars],
        "Step time by recomputation mode (green: fits, red: does not)",
        "recomputation",
        "s per step",
        log_x=False,
        log_y=False,
        showlegend=False,
        xaxis={"type": "category"},
        yaxis={"rangemode": "tozero"},
    )


# --------------------------------------------------------------------------- Validation page

_PHASE_COLORS = {
    "decode": COLORS["compute"],
    "prefill": COLORS["weights"],
    "static-batch": COLORS["kv"],
    "max-throughput": COLORS["memory"],
    "training": COLORS["balance"],
}


def validation_figure(rows: Sequence[dict[str, Any]], column: str, title: str, band_frac: float) -> go.Figure:
    """Predicted against measured (each metric in its own SI unit, log-log), a ±band around y = x.

    ``rows`` are validation rows' ``to_dict()``; rows the column cannot predict are left out.
    """
    traces: list[Trace] = []
    values: list[float] = []
    for phase, color in _PHASE_COLORS.items():
        pts = [r for r in rows if r["phase"] == phase and r[column]["predicted"] is not None]
        if not pts:
            continue
        x = [r["measured"] for r in pts]
        y = [r[column]["predicted"] for r in pts]
        values += x + y
        traces.append(
            {
                "type": "scatter",
                "x": x,
                "y": y,
                "mode": "markers",
                "name": phase,
                "marker": {"color": color, "size": 9, "line": {"color": "white", "width": 0.5}},
                "text": [
                    f"row {r['id']}: {r.get('model') or r.get('training_run')} on {r['chip']}<br>"
                    f"{r['metric']} ({r['unit']}), error {r[column]['error_frac']:+.0%}"
                    for r in pts
                ],
                "hovertemplate": "%{text}<br>measured %{x:.4g}<br>predicted %{y:.4g}<extra></extra>",
            }
        )
    lo, hi = _span([np.asarray(values, float)]) if values else (1e-3, 1.0)
    axis = {"range": [float(np.log10(lo)), float(np.log10(hi))], "exponentformat": "power"}
    diag = np.geomspace(lo, hi, 2)
    band = {
        "type": "scatter",
        "x": [*diag, *diag[::-1], diag[0]],
        "y": [*(diag * (1 + band_frac)), *(diag[::-1] * (1 - band_frac)), diag[0] * (1 + band_frac)],
        "fill": "toself",
        "mode": "none",
        "fillcolor": "rgba(127,127,127,0.2)",
        "name": f"±{band_frac:.0%}",
        "hoverinfo": "name",
    }
    traces = [band, _line(diag, diag, "predicted = measured", COLORS["step"], width=1), *traces]
    return _figure(
        traces,
        title,
        "measured (the metric's SI unit)",
        "predicted",
        log_x=True,
        log_y=True,
        xaxis=axis,
        yaxis=axis,
        height=500,
        legend={"orientation": "h", "yanchor": "top", "y": -0.22, "x": 0, "font": {"size": 11}},
        margin={"l": 64, "r": 20, "t": 50, "b": 70},
    )


def validation_error_figure(
    rows: Sequence[dict[str, Any]], columns: Sequence[str], band_frac: float
) -> go.Figure:
    """Each row's error (predicted / measured - 1) under each column, rows grouped by phase."""
    ordered = sorted(
        rows,
        key=lambda r: (list(_PHASE_COLORS).index(r["phase"]) if r["phase"] in _PHASE_COLORS else 99, r["id"]),
    )
    labels = [f"{r['id']} {r['phase']}" for r in ordered]
    symbols = ["circle", "diamond", "square"]
    traces: list[Trace] = []
    for i, c in enumerate(columns):
        pts = [(lab, r) for lab, r in zip(labels, ordered, strict=True) if r[c]["error_frac"] is not None]
        traces.append(
            {
                "type": "scatter",
                "x": [lab for lab, _ in pts],
                "y": [r[c]["error_frac"] for _, r in pts],
                "mode": "markers",
                "name": c,
                "marker": {
                    "size": 9,
                    "symbol": symbols[i % len(symbols)],
                    "color": [_PHASE_COLORS.get(r["phase"], COLORS["floor"]) for _, r in pts],
                    "line": {"color": "#333", "width": 0.6},
                },
                "text": [
                    f"row {r['id']}: {r.get('model') or r.get('training_run')}, {r['metric']}" for _, r in pts
                ],
                "hovertemplate": f"{c}<br>%{{text}}<br>error %{{y:+.0%}}<extra></extra>",
            }
        )
    band = {
        "type": "rect",
        "xref": "paper",
        "yref": "y",
        "x0": 0,
        "x1": 1,
        "y0": -band_frac,
        "y1": band_frac,
        "fillcolor": "rgba(127,127,127,0.2)",
        "line": {"width": 0},
        "layer": "below",
    }
    zero = {
        **band,
        "type": "line",
        "y0": 0,
        "y1": 0,
        "fillcolor": None,
        "line": {"color": COLORS["step"], "width": 1},
    }
    return _figure(
        traces,
        f"Error of each row (the grey band is ±{band_frac:.0%}; colour = phase, symbol = prediction)",
        "row (id, phase)",
        "predicted / measured - 1",
        log_x=False,
        log_y=False,
        shapes=[band, zero],
        xaxis={
            "type": "category",
            "categoryorder": "array",
            "categoryarray": labels,
            "tickangle": -60,
            "tickfont": {"size": 9},
            "showgrid": False,
        },
        yaxis={"tickformat": "+.0%", "zeroline": False},
        height=440,
        margin={"l": 64, "r": 20, "t": 50, "b": 120},
        legend={
            "orientation": "h",
            "yanchor": "bottom",
            "y": 1.0,
            "x": 1,
            "xanchor": "right",
            "font": {"size": 11},
        },
    )
