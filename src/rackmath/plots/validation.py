"""Plots of the reality check: predicted vs measured (log-log, ±20% band), and this
machine's decode step time vs batch beside rackmath's prediction."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from rackmath.analyses.measure import MeasureResult
from rackmath.analyses.validation import ValidationReport
from rackmath.plots._files import checked_path, pyplot, save

#: Half-width of the shaded band around the diagonal.
BAND_FRAC = 0.20


def _pyplot(path: Path) -> Any:
    checked_path(path)
    return pyplot()


def save_validation_plot(report: ValidationReport, path: str | Path) -> Path:
    """Predicted against measured, each metric normalised by its measured value's scale
    (both axes in the metric's own unit, log), pure roofline and calibrated side by side."""
    path = Path(path)
    plt = _pyplot(path)
    columns = [c for c in ("roofline", "calibrated", "loso") if c in report.columns]
    fig, axes = plt.subplots(1, len(columns), figsize=(5.2 * len(columns), 5), constrained_layout=True)
    axes = np.atleast_1d(axes)
    phases = report.group_names("phase")
    colors = dict(zip(phases, plt.rcParams["axes.prop_cycle"].by_key()["color"], strict=False))
    for ax, column in zip(axes, columns, strict=True):
        lo, hi = np.inf, 0.0
        for phase in phases:
            meas, pred = [], []
            for r in report.rows:
                p = r.column(column)
                if r.scenario.phase.value == phase and p.ok:
                    meas.append(r.scenario.value)
                    pred.append(p.value)
            if meas:
                # metrics differ in unit; each point is placed at (measured, predicted) in its own unit
                ax.scatter(meas, pred, s=22, label=phase, color=colors.get(phase))
                lo, hi = min(lo, *meas, *pred), max(hi, *meas, *pred)
        if hi > 0:
            x = np.geomspace(lo / 2, hi * 2, 50)
            ax.plot(x, x, "k-", lw=1)
            ax.fill_between(
                x, x * (1 - BAND_FRAC), x * (1 + BAND_FRAC), color="gray", alpha=0.2, label="±20%"
            )
        st = report.stats(column)
        ax.set(xscale="log", yscale="log", xlabel="measured (metric's SI unit)", ylabel="predicted")
        ax.set_title(f"{column}: median |err| {st.median_abs_error:.0%}, p90 {st.p90_abs_error:.0%}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"rackmath vs {len(report.rows)} published measurements")
    return save(fig, path, dpi=130)


def save_measure_plot(result: MeasureResult, path: str | Path) -> Path:
    """Decode step time against batch, per context: measured (points) and predicted (lines)."""
    path = Path(path)
    plt = _pyplot(path)
    fig, ax = plt.subplots(figsize=(7.5, 5), constrained_layout=True)
    color_cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    pts = result.run.points
    for i, ctx in enumerate(result.contexts):
        sel = [j for j, p in enumerate(pts) if p.context == ctx]
        b = np.array([pts[j].batch for j in sel], float)
        color = color_cycle[i % len(color_cycle)]
        ax.plot(b, [pts[j].step_s * 1e3 for j in sel], "o", color=color, label=f"measured, context {ctx}")
        ax.plot(
            b,
            [result.predicted_step_s[j] * 1e3 for j in sel],
            "-",
            color=color,
            lw=1,
            label=f"roofline, context {ctx}",
        )
        ax.plot(
            b,
            [result.with_overhead_step_s[j] * 1e3 for j in sel],
            "--",
            color=color,
            lw=1,
            label=f"roofline + overhead, context {ctx}",
        )
        knee = result.balance_batch[i]
        if np.isfinite(knee):
            ax.axvline(knee, color=color, ls=":", lw=1)
    ax.set(xscale="log", yscale="log", xlabel="batch (sequences)", ylabel="decode step (ms)")
    ax.set_title(f"This machine ({result.run.ceilings.device}): the knee, measured and predicted")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    return save(fig, path, dpi=130)
