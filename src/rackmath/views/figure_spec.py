"""One description of a chart, drawn by two renderers.

:mod:`rackmath.views.figures` builds a :class:`FigureData` for every chart (all the
arithmetic: curves, sweeps, spans, unit conversion to the axis' unit); the faces only draw
it, :mod:`rackmath.plots.render_mpl` with Matplotlib (files for ``--plot`` and the web's PNG
buttons) and :mod:`rackmath.web.render_plotly` with Plotly (the explorer). A figure is one
or more :class:`Panel` (axes), each holding :class:`Series`.

Coordinates are already in the axis' unit (the axis' ``unit`` names it: ms, GB, USD per
million tokens). Vertical markers and shaded bands are ordinary series with explicit
coordinates, so they show in the legend and in exported data alike; ``vline``, ``hline``
and ``hspan`` span the whole panel (their other coordinate is not known before drawing).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

#: Series kinds. ``line``/``scatter``/``step`` (a staircase holding each value until the
#: next x); ``bar`` (vertical, x = categories, ``base`` stacks); ``barh`` (horizontal,
#: y = categories, x = lengths, ``base`` = left ends); ``fill`` (a closed polygon);
#: ``vline`` (x[0]), ``hline`` (y[0]) and ``hspan`` (y[0] to y[1]) across the panel.
Kind = Literal["line", "scatter", "step", "bar", "barh", "fill", "vline", "hline", "hspan"]
Dash = Literal["solid", "dash", "dot", "dashdot"]

#: Colours by role, shared by both renderers (hex: both Matplotlib and Plotly read it).
COLORS = {
    "compute": "#1f77b4",
    "weights": "#ff7f0e",
    "kv": "#2ca02c",
    "memory": "#d62728",
    "step": "#111111",
    "floor": "#7f7f7f",
    "balance": "#9467bd",
    "nofit": "#7f7f7f",
    "selected": "#e377c2",
    "reserve": "#c7c7c7",
    "free": "#e8f4e8",
    "muted": "#9a9a9a",
}
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#d62728", "#8c564b", "#17becf")


def _values(v: Any) -> tuple[Any, ...]:
    """Plain Python values (floats, ints, strings; NaN/inf as None) for a JSON export."""
    out: list[Any] = []
    for item in np.asarray(v, dtype=object).ravel() if v is not None else ():
        if isinstance(item, str) or item is None:
            out.append(item)
        elif isinstance(item, (bool, np.bool_)):
            out.append(bool(item))
        else:
            f = float(item)
            out.append(f if np.isfinite(f) else None)
    return tuple(out)


@dataclass(frozen=True)
class Axis:
    label: str
    unit: str = ""
    log: bool = False
    #: Shown range in data units (both renderers clip to it); None: fit the data.
    range: tuple[float, float] | None = None
    #: ``"%"`` (fractions shown as percent), ``"+%"`` (signed), or None.
    percent: Literal["%", "+%"] | None = None
    #: Category order for a categorical axis (bars, the pipeline's stages); None: numeric.
    categories: tuple[str, ...] | None = None
    reversed: bool = False
    from_zero: bool = False

    @property
    def title(self) -> str:
        return f"{self.label} ({self.unit})" if self.unit and self.unit not in self.label else self.label


@dataclass(frozen=True)
class Series:
    name: str
    x: Any
    y: Any
    kind: Kind = "line"
    color: str | None = None
    dash: Dash = "solid"
    width: float = 2.0
    #: Marker symbol for points (``"o"``, ``"s"``, ``"D"``); a line with a marker draws both.
    marker: str | None = None
    marker_size: float = 6.0
    opacity: float | tuple[float, ...] = 1.0
    #: Bars: where each bar starts (stacking, or a timeline's start times).
    base: Any = None
    #: Per-point colours (bars coloured by outcome, points by phase).
    colors: tuple[str, ...] | None = None
    #: Per-point text written on the bar / point (None: none).
    labels: tuple[str, ...] | None = None
    #: Per-point hover text (the web); None: name, x and y.
    hover: tuple[str, ...] | None = None
    secondary_y: bool = False
    legend: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "x": _values(self.x), "y": _values(self.y)}


@dataclass(frozen=True)
class Annotation:
    text: str
    x: float
    #: In data units, or a fraction of the panel's height when ``y_frac``.
    y: float
    y_frac: bool = False
    rotate: bool = False


@dataclass(frozen=True)
class Panel:
    title: str
    x: Axis
    y: Axis
    series: tuple[Series, ...]
    y2: Axis | None = None
    annotations: tuple[Annotation, ...] = ()
    #: Relative width when panels sit side by side, and the height the web draws it at.
    width: float = 1.0
    height_px: int = 420
    legend: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {"title": self.title, "series": [s.to_dict() for s in self.series]}


@dataclass(frozen=True)
class FigureData:
    """A chart: a title and its panels (drawn side by side by Matplotlib; the web draws
    single-panel figures, one chart per panel)."""

    title: str
    panels: tuple[Panel, ...] = field(default_factory=tuple)

    @classmethod
    def single(cls, panel: Panel) -> FigureData:
        return cls(panel.title, (panel,))

    @classmethod
    def join(cls, title: str, *figures: FigureData) -> FigureData:
        """Several charts side by side in one figure (one file for ``--plot``)."""
        return cls(title, tuple(p for f in figures for p in f.panels))

    @property
    def panel(self) -> Panel:
        """The only panel (refused if there are several)."""
        if len(self.panels) != 1:
            raise ValueError(f"{self.title!r} has {len(self.panels)} panels, not one")
        return self.panels[0]

    def to_dict(self) -> dict[str, Any]:
        return {"title": self.title, "panels": [p.to_dict() for p in self.panels]}
