"""What every chart shares: the sweep and axis constants, the colours of the phases and of a
pipeline drawing, the padded log span of an axis and the guide lines (vertical, horizontal,
shaded band) drawn over a panel."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from rackmath.views.figure_spec import COLORS, Series

#: Points of the dense batch sweep behind the step-time and cost curves.
SWEEP_POINTS = 160
#: The sweep reaches at least this multiple of the balance batch (the knee stays mid-plot).
SWEEP_PAST_BALANCE = 4.0
#: Retentions the cache-tier curves are drawn over: 1 ms to about 11.6 days.
CACHE_CURVE_RETENTIONS_S = np.geomspace(1e-3, 1e6, 200)
#: Model sizes of the over-training curve: this factor either side of the two marked sizes.
OVERTRAIN_CURVE_SPAN = 10.0
#: How far above the cheapest lifetime compute the over-training figure looks (a factor):
#: below some N the loss is out of reach (D -> infinity) and the curve shoots up.
OVERTRAIN_Y_FACTOR = 1e4
#: Half-width of the shaded band of the validation plots (|error| <= 20 %).
BAND_FRAC = 0.20
#: The validation error plot's y axis: errors beyond these are drawn at the edge (marked).
ERROR_AXIS_FRAC = (-1.0, 2.0)
#: Label each bar of a pipeline drawing only when there are few enough to read.
LABELLED_OPS = 160
PHASE_COLORS = {
    "decode": COLORS["compute"],
    "prefill": COLORS["weights"],
    "static-batch": COLORS["kv"],
    "max-throughput": COLORS["memory"],
    "training": COLORS["balance"],
}
OP_COLORS = {"F": COLORS["compute"], "B": COLORS["weights"], "W": COLORS["kv"]}
OP_NAMES = {"F": "forward", "B": "backward", "W": "weight gradient"}


def log_span(values: Sequence[Any], pad: float = 2.0) -> tuple[float, float]:
    """Positive finite min and max over arrays, padded by ``pad`` for a log axis."""
    stacked = np.concatenate([np.ravel(np.asarray(v, float)) for v in values]) if values else np.array([])
    good = stacked[np.isfinite(stacked) & (stacked > 0)]
    if good.size == 0:
        return 1e-3, 1.0
    return float(good.min()) / pad, float(good.max()) * pad


def vline(x: float, lo: float, hi: float, name: str, color: str, dash: Any = "dash") -> Series:
    return Series(name, [x, x], [lo, hi], color=color, dash=dash, width=1.5)


def hline(x0: float, x1: float, y: float, name: str, color: str, dash: Any = "dash") -> Series:
    return Series(name, [x0, x1], [y, y], color=color, dash=dash, width=1.5)


def shaded_band(x0: float, x1: float, lo: float, hi: float, name: str) -> Series:
    return Series(
        name, [x0, x1, x1, x0, x0], [lo, lo, hi, hi, lo], kind="fill", color=COLORS["nofit"], opacity=0.15
    )


def marked_points(
    name: str,
    x: Any,
    y: Any,
    *,
    color: str = COLORS["selected"],
    marker: str = "D",
    size: float = 12,
    hover: tuple[str, ...] | None = None,
) -> Series:
    """Marked points (by default the selected one: a large diamond), no line between them."""
    return Series(name, x, y, kind="scatter", color=color, marker=marker, marker_size=size, hover=hover)


def finite_or_none(values: Sequence[float]) -> list[float | None]:
    return [float(v) if np.isfinite(v) else None for v in values]
