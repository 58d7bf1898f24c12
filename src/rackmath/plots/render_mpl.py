"""Draw a :class:`~rackmath.views.figure_spec.FigureData` with Matplotlib (headless) and write it.

Drawing only: every coordinate arrives in its axis' unit from :mod:`rackmath.views.figures`.
Panels sit side by side; a figure of several panels carries its title above them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from rackmath.plots.files import checked_path, pyplot, save
from rackmath.views.figure_spec import Axis, FigureData, Panel, Series

_DASH = {"solid": "-", "dash": "--", "dot": ":", "dashdot": "-."}
_PANEL_W_IN, _PANEL_H_IN = 5.6, 4.8


def _positions(values: Any, axis: Axis) -> np.ndarray:
    """Numbers for an axis: category names become their index, None becomes NaN."""
    if axis.categories is not None:
        index = {c: i for i, c in enumerate(axis.categories)}
        return np.array([index.get(str(v), np.nan) for v in values], float)
    return np.array([np.nan if v is None else v for v in np.asarray(values, dtype=object).ravel()], float)


def _rgba(color: str | None, alpha: float) -> tuple[float, float, float, float]:
    from matplotlib.colors import to_rgba

    return to_rgba(color or "C0", alpha)


def _series(ax: Any, s: Series, xa: Axis, ya: Axis) -> None:
    label = s.name if s.legend else "_nolegend_"
    ls = _DASH[s.dash]
    alpha = s.opacity if isinstance(s.opacity, float) else 1.0
    if s.kind == "vline":
        ax.axvline(float(np.ravel(s.x)[0]), color=s.color, ls=ls, lw=s.width, label=label)
        return
    if s.kind == "hline":
        ax.axhline(float(np.ravel(s.y)[0]), color=s.color, ls=ls, lw=s.width, label=label)
        return
    if s.kind == "hspan":
        lo, hi = np.ravel(s.y)[:2]
        ax.axhspan(float(lo), float(hi), color=s.color, alpha=alpha, lw=0, label=label)
        return
    x, y = _positions(s.x, xa), _positions(s.y, ya)
    if s.kind in ("bar", "barh"):
        opacities = s.opacity if isinstance(s.opacity, tuple) else (alpha,) * len(x)
        colors = s.colors or (s.color,) * len(x)
        face = [_rgba(c, a) for c, a in zip(colors, opacities, strict=True)]
        base = None if s.base is None else np.asarray(s.base, float)
        if s.kind == "bar":
            bars = ax.bar(x, y, bottom=base, color=face, label=label, edgecolor="black", linewidth=0.3)
        else:
            bars = ax.barh(y, x, left=base, color=face, label=label, edgecolor="black", linewidth=0.3)
        if s.labels:
            ax.bar_label(bars, labels=list(s.labels), label_type="center", fontsize=7, color="white")
    elif s.kind == "fill":
        ax.fill(x, y, color=s.color, alpha=alpha, lw=0, label=label)
    elif s.kind == "scatter":
        ax.scatter(
            x, y, s=s.marker_size**2 / 2, c=list(s.colors) if s.colors else s.color,
            marker=s.marker or "o", alpha=alpha, label=label,
        )  # fmt: skip
    else:
        drawstyle = "steps-post" if s.kind == "step" else "default"
        ax.plot(
            x, y, color=s.color, ls=ls, lw=s.width, marker=s.marker, ms=s.marker_size / 2,
            alpha=alpha, label=label, drawstyle=drawstyle,
        )  # fmt: skip


def _axis(ax: Any, which: str, a: Axis) -> None:
    from matplotlib.ticker import FuncFormatter

    getattr(ax, f"set_{which}label")(a.title)
    if a.log:
        getattr(ax, f"set_{which}scale")("log")
    if a.categories is not None:
        getattr(ax, f"set_{which}ticks")(range(len(a.categories)))
        rotation = 60 if which == "x" and len(a.categories) > 6 else 0
        getattr(ax, f"set_{which}ticklabels")(a.categories, rotation=rotation, fontsize=7 if rotation else 9)
    if a.range is not None:
        getattr(ax, f"set_{which}lim")(*a.range)
    elif a.from_zero:
        getattr(ax, f"set_{which}lim")(0, None)
    if a.percent is not None:
        sign = "+" if a.percent == "+%" else ""
        getattr(ax, f"{which}axis").set_major_formatter(FuncFormatter(lambda v, _: f"{v:{sign}.0%}"))
    if a.reversed:
        getattr(ax, f"invert_{which}axis")()


def _panel(ax: Any, p: Panel) -> None:
    ax2 = ax.twinx() if p.y2 is not None else None
    for s in p.series:
        target = ax2 if (s.secondary_y and ax2 is not None) else ax
        _series(target, s, p.x, p.y2 if target is ax2 and p.y2 is not None else p.y)
    _axis(ax, "x", p.x)
    _axis(ax, "y", p.y)
    if ax2 is not None and p.y2 is not None:
        _axis(ax2, "y", p.y2)
    for a in p.annotations:
        coords = ("data", "axes fraction") if a.y_frac else "data"
        ax.annotate(a.text, (a.x, a.y), xycoords=coords, fontsize=7, rotation=90 if a.rotate else 0)
    ax.set_title(p.title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    if p.legend:
        handles, labels = ax.get_legend_handles_labels()
        if ax2 is not None:
            h2, l2 = ax2.get_legend_handles_labels()
            handles, labels = handles + h2, labels + l2
        if handles:
            ax.legend(handles, labels, fontsize=7)


def draw(fig_data: FigureData) -> Any:
    """A Matplotlib figure of ``fig_data`` (the caller saves or closes it)."""
    widths = [p.width for p in fig_data.panels]
    fig, axes = pyplot().subplots(
        1,
        len(widths),
        figsize=(_PANEL_W_IN * sum(widths), _PANEL_H_IN),
        constrained_layout=True,
        gridspec_kw={"width_ratios": widths},
        squeeze=False,
    )
    for ax, panel in zip(axes[0], fig_data.panels, strict=True):
        _panel(ax, panel)
    if len(fig_data.panels) > 1:
        fig.suptitle(fig_data.title)
    return fig


def save_figure(fig_data: FigureData, path: str | Path, dpi: int = 120) -> Path:
    """Write ``fig_data`` to ``path`` (.png, .svg or .pdf); a bad path is an InputError."""
    out = checked_path(path)
    return save(draw(fig_data), out, dpi=dpi)
