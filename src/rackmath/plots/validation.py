"""Plots of the reality check: predicted vs measured (log-log, ±20% band), and this
machine's decode step time vs batch beside rackmath's prediction; data:
:mod:`rackmath.views.figures`."""

from __future__ import annotations

from pathlib import Path

from rackmath.analyses.reality.measure import MeasureResult
from rackmath.analyses.reality.report import ValidationReport
from rackmath.plots.render_mpl import save_figure
from rackmath.views.figures import validation_charts


def save_validation_plot(report: ValidationReport, path: str | Path) -> Path:
    """Predicted against measured for the pure roofline, the calibration and leave-one-out."""
    return save_figure(validation_charts.validation_report(report.to_dict()), path, dpi=130)


def save_measure_plot(result: MeasureResult, path: str | Path) -> Path:
    """Decode step time against batch, per context: measured (points) and predicted (lines)."""
    return save_figure(validation_charts.measure(result), path, dpi=130)
