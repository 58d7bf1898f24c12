"""Validation charts: predicted against measured, the relative errors, and the kernel sweep
of ``rackmath measure``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from rackmath.units import MS
from rackmath.views.figure_spec import COLORS, PALETTE, Axis, FigureData, Panel, Series
from rackmath.views.figures.common import BAND_FRAC, ERROR_AXIS_FRAC, PHASE_COLORS, log_span


def metric_scale(rows: Sequence[dict[str, Any]]) -> dict[str, float]:
    """A power of ten per unit near the median measured value of that unit's rows.

    Metrics span 16 decades (milliseconds to FLOP/s); dividing each by its unit's scale
    puts every point within a few decades of 1 without changing any ratio.
    """
    by_unit: dict[str, list[float]] = {}
    for r in rows:
        by_unit.setdefault(str(r["unit"]), []).append(float(r["measured"]))
    return {u: float(10 ** np.floor(np.log10(np.median(v)))) for u, v in by_unit.items() if np.median(v) > 0}


def validation(
    rows: Sequence[dict[str, Any]], column: str, title: str, band_frac: float = BAND_FRAC
) -> FigureData:
    """Predicted against measured, each metric divided by its unit's scale (log-log), a
    ±band around y = x. ``rows`` are validation rows' ``to_dict()``."""
    scale = metric_scale(rows)
    series: list[Series] = []
    values: list[float] = []
    for phase, color in PHASE_COLORS.items():
        pts = [
            r
            for r in rows
            if r["phase"] == phase and r[column]["predicted"] is not None and r["unit"] in scale
        ]
        if not pts:
            continue
        x = [r["measured"] / scale[r["unit"]] for r in pts]
        y = [r[column]["predicted"] / scale[r["unit"]] for r in pts]
        values += x + y
        series.append(
            Series(
                phase,
                x,
                y,
                kind="scatter",
                color=color,
                marker="o",
                marker_size=9,
                hover=tuple(
                    f"row {r['id']}: {r.get('model') or r.get('training_run')} on {r['chip']}<br>"
                    f"{r['metric']}: measured {r['measured']:.4g}, predicted {r[column]['predicted']:.4g} "
                    f"{r['unit']}, error {r[column]['error_frac']:+.0%}"
                    for r in pts
                ),
            )
        )
    lo, hi = log_span([np.asarray(values, float)]) if values else (1e-3, 1.0)
    diag = np.geomspace(lo, hi, 2)
    band = Series(
        f"±{band_frac:.0%}",
        [*diag, *diag[::-1], diag[0]],
        [*(diag * (1 + band_frac)), *(diag[::-1] * (1 - band_frac)), diag[0] * (1 + band_frac)],
        kind="fill",
        color=COLORS["floor"],
        opacity=0.2,
    )
    diagonal = Series("predicted = measured", diag, diag, color=COLORS["step"], width=1)
    return FigureData.single(
        Panel(
            title,
            Axis("measured / scale of its unit", log=True, range=(lo, hi)),
            Axis("predicted / the same scale", log=True, range=(lo, hi)),
            (band, diagonal, *series),
            height_px=500,
        )
    )


def validation_errors(
    rows: Sequence[dict[str, Any]], columns: Sequence[str], band_frac: float = BAND_FRAC
) -> FigureData:
    """Each row's error (predicted / measured - 1) under each column, rows grouped by phase.

    The y axis is limited to :data:`ERROR_AXIS_FRAC`; an error beyond it is drawn at the edge
    and its hover text gives the real value.
    """
    order = list(PHASE_COLORS)
    ordered = sorted(rows, key=lambda r: (order.index(r["phase"]) if r["phase"] in order else 99, r["id"]))
    labels = tuple(f"{r['id']} {r['phase']}" for r in ordered)
    lo, hi = ERROR_AXIS_FRAC
    symbols = ["o", "D", "s"]
    series: list[Series] = [
        Series(
            f"±{band_frac:.0%}", [], [-band_frac, band_frac], kind="hspan", color=COLORS["floor"], opacity=0.2
        ),
        Series("no error", [], [0.0], kind="hline", color=COLORS["step"], width=1, legend=False),
    ]
    for i, c in enumerate(columns):
        pts = [(lab, r) for lab, r in zip(labels, ordered, strict=True) if r[c]["error_frac"] is not None]
        errs = [float(r[c]["error_frac"]) for _, r in pts]
        series.append(
            Series(
                c,
                [lab for lab, _ in pts],
                [min(max(e, lo), hi) for e in errs],
                kind="scatter",
                marker=symbols[i % len(symbols)],
                marker_size=9,
                colors=tuple(PHASE_COLORS.get(r["phase"], COLORS["floor"]) for _, r in pts),
                hover=tuple(
                    f"{c}: row {r['id']}, {r.get('model') or r.get('training_run')}, {r['metric']}: "
                    f"error {e:+.0%}" + (" (beyond the axis)" if not lo <= e <= hi else "")
                    for (_, r), e in zip(pts, errs, strict=True)
                ),
            )
        )
    return FigureData.single(
        Panel(
            f"Error of each row (the grey band is ±{band_frac:.0%}; colour = phase, symbol = prediction)",
            Axis("row (id, phase)", categories=labels),
            Axis("predicted / measured - 1", percent="+%", range=(lo, hi)),
            tuple(series),
            height_px=440,
        )
    )


def validation_report(report_dict: dict[str, Any], band_frac: float = BAND_FRAC) -> FigureData:
    """``rackmath validate --plot``: predicted vs measured for each column, from the report's
    ``to_dict()``."""
    rows = report_dict["rows"]
    columns = [c for c in ("roofline", "calibrated", "loso") if c in report_dict["columns"]]
    parts = []
    for c in columns:
        o = report_dict["aggregates"][c]["overall"]
        parts.append(
            validation(
                rows,
                c,
                f"{c}: median |err| {o['median_abs_error']:.0%}, p90 {o['p90_abs_error']:.0%}",
                band_frac,
            )
        )
    return FigureData.join(f"rackmath vs {len(rows)} published measurements", *parts)


def measure(result: Any) -> FigureData:
    """This machine's decode step time against batch, per context: measured points,
    predicted lines (roofline, and roofline + overhead), the predicted knee."""
    pts = result.run.points
    series: list[Series] = []
    for i, ctx in enumerate(result.contexts):
        sel = [j for j, p in enumerate(pts) if p.context == ctx]
        b = [float(pts[j].batch) for j in sel]
        color = PALETTE[i % len(PALETTE)]
        series += [
            Series(
                f"measured, context {ctx}", b, [pts[j].step_s / MS for j in sel], "scatter", color, marker="o"
            ),
            Series(
                f"roofline, context {ctx}",
                b,
                [result.predicted_step_s[j] / MS for j in sel],
                color=color,
                width=1,
            ),
            Series(
                f"roofline + overhead, context {ctx}",
                b,
                [result.with_overhead_step_s[j] / MS for j in sel],
                color=color,
                dash="dash",
                width=1,
            ),
        ]
        knee = float(result.balance_batch[i])
        if np.isfinite(knee):
            series.append(
                Series(f"knee, context {ctx}", [knee], [], kind="vline", color=color, dash="dot", width=1)
            )
    return FigureData.single(
        Panel(
            f"This machine ({result.run.ceilings.device}): the knee, measured and predicted",
            Axis("batch", "sequences", log=True),
            Axis("decode step", "ms", log=True),
            tuple(series),
        )
    )
