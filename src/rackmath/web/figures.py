"""Plotly figures of analysis results: layout only, no math.

Every y value is an attribute of an analysis result (``Explanation``, ``DecodeGrid``,
``Deployment``); the only arithmetic here converts SI units to the units on an axis
(s -> ms, bytes -> GB) and stacks bars. Markers and bands (the balance batch, the latency
floor, the batch beyond which the KV cache does not fit) are drawn as traces, so they
appear in the legend and in an exported figure's data.

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
from rackmath.analyses.explain import Explanation
from rackmath.analyses.search import Frontier
from rackmath.analyses.serving import DecodeGrid, Deployment
from rackmath.core import roofline as rl
from rackmath.units import GB, MS

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
    kv = float(point.batch[0, 0] * point.kv_bytes_per_sequence[0, 0]) / d.chips
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
