"""Draw a single-panel :class:`~rackmath.views.figure_spec.FigureData` with Plotly.

Drawing only: every coordinate arrives in its axis' unit from :mod:`rackmath.views.figures`.
Traces and the layout are plain dicts validated once by ``go.Figure(spec)`` with the empty
``"none"`` template: adding traces one by one under a named template costs about 40 ms a
figure, which would eat the page's budget. Lines across the whole panel (``vline``,
``hline``, ``hspan``) are layout shapes, each with a legend entry (a trace without points
that keeps the value in its data).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import plotly.graph_objects as go

from rackmath.views.figure_spec import Axis, FigureData, Panel, Series

_AXIS = {"showgrid": True, "gridcolor": "#e5e5e5", "zeroline": False, "linecolor": "#888", "ticks": "outside"}
_SYMBOL = {"o": "circle", "s": "square", "D": "diamond", None: "circle"}
_DASH = {"solid": "solid", "dash": "dash", "dot": "dot", "dashdot": "dashdot"}


def _rgba(color: str | None, alpha: float) -> str:
    c = (color or "#7f7f7f").lstrip("#")
    r, g, b = (int(c[i : i + 2], 16) for i in (0, 2, 4))
    return f"rgba({r},{g},{b},{alpha:g})"


def _plain(values: Any) -> list[Any]:
    """A list for Plotly: NaN and inf become gaps (None)."""
    out: list[Any] = []
    for v in np.asarray(values, dtype=object).ravel():
        if isinstance(v, (float, np.floating)) and not math.isfinite(v):
            out.append(None)
        else:
            out.append(v)
    return out


def _axis(a: Axis) -> dict[str, Any]:
    out: dict[str, Any] = {**_AXIS, "title": {"text": a.title}}
    if a.categories is not None:
        out.update(type="category", categoryorder="array", categoryarray=list(a.categories), showgrid=False)
        if len(a.categories) > 12:
            out.update(tickangle=-60, tickfont={"size": 9})
    else:
        out["type"] = "log" if a.log else "linear"
    if a.range is not None:
        lo, hi = a.range
        if a.log:
            lo, hi = math.log10(lo), math.log10(hi)
            out["dtick"] = 1 if hi - lo >= 2 else None
            if hi - lo >= 6:
                out["exponentformat"] = "power"
        out["range"] = [lo, hi]
    if a.percent is not None:
        out["tickformat"] = "+.0%" if a.percent == "+%" else ".0%"
    if a.reversed:
        out["autorange"] = "reversed"
    if a.from_zero:
        out["rangemode"] = "tozero"
    return {k: v for k, v in out.items() if v is not None}


def _legend_entry(s: Series, x: Any, y: Any) -> dict[str, Any]:
    return {
        "type": "scatter",
        "x": x,
        "y": y,
        "name": s.name,
        "mode": "lines",
        "line": {"color": s.color, "dash": _DASH[s.dash], "width": s.width},
        "showlegend": s.legend,
        "hoverinfo": "skip",
    }


def _trace(s: Series, shapes: list[dict[str, Any]]) -> dict[str, Any]:
    alpha = s.opacity if isinstance(s.opacity, float) else 1.0
    line = {"color": s.color, "dash": _DASH[s.dash], "width": s.width}
    if s.kind == "vline":
        x = float(np.ravel(s.x)[0])
        shapes.append(
            {"type": "line", "xref": "x", "yref": "paper", "x0": x, "x1": x, "y0": 0, "y1": 1, "line": line}
        )
        return _legend_entry(s, [x], [None])
    if s.kind == "hline":
        y = float(np.ravel(s.y)[0])
        shapes.append(
            {"type": "line", "xref": "paper", "yref": "y", "x0": 0, "x1": 1, "y0": y, "y1": y, "line": line}
        )
        return _legend_entry(s, [None], [y])
    if s.kind == "hspan":
        lo, hi = (float(v) for v in np.ravel(s.y)[:2])
        shapes.append(
            {
                "type": "rect", "xref": "paper", "yref": "y", "x0": 0, "x1": 1, "y0": lo, "y1": hi,
                "fillcolor": _rgba(s.color, alpha), "line": {"width": 0}, "layer": "below",
            }
        )  # fmt: skip
        return {
            "type": "scatter", "x": [None], "y": [lo, hi], "name": s.name, "mode": "markers",
            "marker": {"symbol": "square", "size": 12, "color": _rgba(s.color, alpha)},
            "showlegend": s.legend, "hoverinfo": "skip",
        }  # fmt: skip
    t: dict[str, Any] = {"name": s.name, "x": _plain(s.x), "y": _plain(s.y), "showlegend": s.legend}
    if s.hover is not None:
        t.update(hovertext=list(s.hover), hoverinfo="text")
    if s.secondary_y:
        t["yaxis"] = "y2"
    if s.kind in ("bar", "barh"):
        colors = list(s.colors) if s.colors else s.color
        marker: dict[str, Any] = {"color": colors, "line": {"color": "#222", "width": 0.5}}
        marker["opacity"] = list(s.opacity) if isinstance(s.opacity, tuple) else alpha
        t.update(type="bar", marker=marker)
        if s.kind == "barh":
            t["orientation"] = "h"
        if s.base is not None:
            t["base"] = _plain(s.base)
        if s.labels is not None:
            inside = s.kind == "barh"
            t.update(
                text=list(s.labels),
                textposition="inside" if inside else "outside",
                insidetextanchor="middle",
                textfont={"color": "white" if inside else "#222", "size": 10},
            )
        return t
    if s.kind == "fill":
        t.update(
            type="scatter", fill="toself", mode="none", fillcolor=_rgba(s.color, alpha), hoverinfo="name"
        )
        return t
    t["type"] = "scatter"
    point = {"symbol": _SYMBOL.get(s.marker, "circle"), "size": s.marker_size, "opacity": alpha}
    if s.kind == "scatter":
        point["color"] = list(s.colors) if s.colors else s.color
        point["line"] = {"color": "white", "width": 0.5}
        t.update(mode="markers", marker=point)
        return t
    t.update(mode="lines+markers" if s.marker else "lines", line=line)
    if s.marker:
        t["marker"] = {**point, "color": s.color}
    if s.kind == "step":
        t["line"] = {**line, "shape": "hv"}
    return t


def _annotation(a: Any, p: Panel) -> dict[str, Any]:
    x = math.log10(a.x) if p.x.log else a.x
    y = a.y if a.y_frac or not p.y.log else math.log10(a.y)
    return {
        "x": x, "y": y, "xref": "x", "yref": "paper" if a.y_frac else "y", "text": a.text,
        "showarrow": False, "font": {"size": 10}, "textangle": -90 if a.rotate else 0,
        "xanchor": "left", "yanchor": "bottom",
    }  # fmt: skip


#: Pixels the x axis takes below the plot (tick labels, the title and the gaps between them),
#: with categories (which Plotly tilts when the chart is narrow), and with more than 12
#: categories written at an angle; one legend row's height at 11 px text.
_X_AXIS_PX = 76
_CATEGORY_X_AXIS_PX = 110
_ANGLED_X_AXIS_PX = 150
_LEGEND_ROW_PX = 21
_TOP_PX = 50
#: Legend entries a row holds by their longest name (in characters): 3 short, 2, or 1.
_ENTRIES_PER_ROW = ((14, 3), (24, 2))


def _legend(p: Panel, traces: list[dict[str, Any]]) -> tuple[dict[str, Any], int, int]:
    """The legend below the x axis, clear of its tick labels and title: (legend layout, the
    pixels the legend takes, the pixels the x axis takes). Rows hold 1 to 3 entries of equal
    width by the longest name, so the legend's height is known before the browser lays it out
    and the figure grows by it (the plot keeps its height)."""
    axis_px = _X_AXIS_PX
    if p.x.categories:  # narrow charts tilt category labels (always past 12 of them)
        axis_px = _ANGLED_X_AXIS_PX if len(p.x.categories) > 12 else _CATEGORY_X_AXIS_PX
    names = [str(t.get("name") or "") for t in traces if t.get("showlegend", True) and t.get("name")]
    if not p.legend or not names:
        return {}, 0, axis_px
    longest = max(len(n) for n in names)
    per_row = next((k for most, k in _ENTRIES_PER_ROW if longest <= most), 1)
    legend_px = math.ceil(len(names) / per_row) * _LEGEND_ROW_PX + 8
    plot_px = p.height_px - _TOP_PX - axis_px - 10
    return (
        {
            "orientation": "h",
            "yanchor": "top",
            "y": -axis_px / plot_px,
            "x": 0,
            "xanchor": "left",
            "entrywidthmode": "fraction",
            "entrywidth": 1.0 / per_row,
            "font": {"size": 11},
        },
        legend_px,
        axis_px,
    )


def figure(fig_data: FigureData) -> go.Figure:
    """The figure's one panel as a Plotly figure."""
    p = fig_data.panel
    shapes: list[dict[str, Any]] = []
    traces = [_trace(s, shapes) for s in p.series]
    legend, legend_px, axis_px = _legend(p, traces)
    layout: dict[str, Any] = {
        "template": "none",
        "title": {"text": p.title, "font": {"size": 15}},
        "height": p.height_px + legend_px,
        "margin": {"l": 64, "r": 64 if p.y2 else 20, "t": _TOP_PX, "b": axis_px + legend_px + 10},
        "legend": legend,
        "showlegend": p.legend,
        "hovermode": "closest",
        "plot_bgcolor": "white",
        "paper_bgcolor": "white",
        "barmode": "overlay",
        "bargap": 0.15,
        "xaxis": _axis(p.x),
        "yaxis": _axis(p.y),
        "shapes": shapes,
        "annotations": [_annotation(a, p) for a in p.annotations if not p.x.categories],
    }
    if p.y2 is not None:
        layout["yaxis2"] = {**_axis(p.y2), "overlaying": "y", "side": "right", "showgrid": False}
    return go.Figure({"data": traces, "layout": layout})
